"""The hybrid search pipeline: :meth:`SearchPipeline._run` is the list of stages, one line each.

Each stage is a named step (:meth:`Trace.step`) that records what it did into the trace, and
lives with its rules, in :class:`~nbmemory.search.config.PipelineConfig` order:

- ``bm25``, ``vector``: the retrievers (:mod:`~nbmemory.search.bm25`, :mod:`~nbmemory.search.vector`);
- ``convex`` or ``rrf``: the :class:`~nbmemory.search.base.Fusion` picked by ``config.fusion``
  (:class:`~nbmemory.search.convex.ConvexFusion`, :class:`~nbmemory.search.rrf.RRFFusion`);
- ``rerank``: :func:`~nbmemory.search.rerank.rerank_stage`;
- ``recency``: :func:`~nbmemory.search.decay.recency_stage`;
- ``supersede``: :func:`~nbmemory.search.supersede.supersede_stage`;
- with MMR, ``dedup`` over the pool and ``mmr``: :func:`~nbmemory.search.dedup.dedup_stage`,
  :func:`~nbmemory.search.mmr.mmr_stage`;
- ``dedup`` and ``group`` in one walk that stops at the ``k``-th group:
  :func:`~nbmemory.search.group.walk`;
- ``reject``, the no-answer flag: :class:`~nbmemory.search.noanswer.NoAnswer`;
- ``hydrate``: the hits (:func:`~nbmemory.search.result.hydrate`), their tiers and the weak tail
  (:mod:`~nbmemory.search.tiers`).

What stays here: the passes (a grouped search that finds fewer than ``k`` sources takes deeper
candidates, :func:`~nbmemory.search.group.few_sources`), the retrieval loop, the hydration step
and the trace's labels.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING, Any

from nbmemory.errors import ConfigError
from nbmemory.items import Hit
from nbmemory.search import reject as reject_mod
from nbmemory.search import when as when_mod
from nbmemory.search.base import (
    Fusion,
    Query,
    Ranked,
    Retrieved,
    Retriever,
    retriever_ranks,
    retriever_scores,
)
from nbmemory.search.bm25 import BM25Retriever
from nbmemory.search.config import PipelineConfig
from nbmemory.search.convex import ConvexFusion
from nbmemory.search.decay import recency_stage
from nbmemory.search.dedup import dedup_stage
from nbmemory.search.filters import Filters
from nbmemory.search.group import few_sources, walk
from nbmemory.search.mmr import mmr_stage
from nbmemory.search.noanswer import NoAnswer
from nbmemory.search.pool import Pool
from nbmemory.search.rerank import rerank_stage
from nbmemory.search.result import SearchResult, hydrate, place
from nbmemory.search.rrf import RRFFusion
from nbmemory.search.supersede import supersede_stage
from nbmemory.search.tiers import WEAK_LEXICAL, WEAK_SHARE, mark_weak, set_tiers
from nbmemory.search.trace import Trace
from nbmemory.search.vector import VectorRetriever
from nbmemory.store.db import Database, utcnow
from nbmemory.store.rows import HitRow, fetch_rows

if TYPE_CHECKING:
    from nbmemory.embed.base import Embedder

__all__ = [
    "MAX_GROUP_DEPTH",
    "MAX_K",
    "MAX_QUERY_CHARS",
    "WEAK_LEXICAL",
    "WEAK_SHARE",
    "SearchPipeline",
    "checked_query",
]

#: Grouped searches take deeper candidates, up to this many per retriever, to fill k sources.
MAX_GROUP_DEPTH = 20_000
MAX_QUERY_CHARS = 4000
#: The largest k: ranks and the search log's k are 32-bit.
MAX_K = 2**31 - 1


def checked_query(query: str, k: int) -> str:
    """``query`` cut to :data:`MAX_QUERY_CHARS`, or a :class:`ConfigError` naming what is wrong."""
    if k <= 0:
        raise ConfigError(f"k must be greater than 0, got {k}")
    if k > MAX_K:
        raise ConfigError(f"k must be at most {MAX_K}, got {k}")
    if not query or not query.strip():
        raise ConfigError("the query is empty: type some words to search for")
    try:
        query.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(
            f"the query holds a lone surrogate (U+{ord(query[exc.start]):04X} at position {exc.start}): "
            "it is not valid Unicode text"
        ) from None
    return query[:MAX_QUERY_CHARS]


def _gc_counts() -> tuple[list[int], int]:
    """Collections so far per generation, and the youngest generation's count (objects
    allocated less those freed since its last collection)."""
    return [g["collections"] for g in gc.get_stats()], gc.get_count()[0]


def _more_exist(found: dict[str, Retrieved], depth: int, pool_size: int) -> bool:
    """Whether candidates exist beyond those a pass considers: a retriever returned all it was
    asked for, or the fused pool cuts some of those they returned."""
    candidates = len({i for got in found.values() for i in got.ids})
    return candidates > pool_size or any(len(got.ranked) >= depth for got in found.values())


class SearchPipeline:
    """Runs one hybrid search over a :class:`Database` with an :class:`Embedder`.

    ``retrievers`` are the configured ones, BM25 first: their order is the order of their
    stages and of the ranks an explanation lists.
    """

    def __init__(self, db: Database, embedder: Embedder, config: PipelineConfig | None = None):
        self.db = db
        self.embedder = embedder
        self.config = config or PipelineConfig()
        known: list[Retriever] = [BM25Retriever(db, self.config.symbols), VectorRetriever(db, embedder)]
        self.retrievers = [r for r in known if r.name in self.config.retrievers]
        # Convex fusion weighs a cosine against a keyword share: one retriever alone is fused by RRF.
        self.fusion: Fusion = (
            ConvexFusion(db, embedder, self.config)
            if self.config.fusion == "convex" and len(self.retrievers) > 1
            else RRFFusion(db, self.config)
        )
        self.no_answer = NoAnswer(db, embedder)

    def run(self, query: str, k: int = 10, filters: Filters | None = None) -> SearchResult:
        """The ``k`` best hits for ``query`` among the items matching ``filters``, and the trace."""
        text = checked_query(query, k)
        depth = self.config.depth or max(50, 3 * k)
        pool_size = self._pool_depth(k)
        passes, earlier_ms = 0, 0.0
        # Counts for the trace (what a search allocates and collects, not what it took).
        collections, objects = _gc_counts()
        # One query for every pass: its embedding, and the retrievers' scores a deeper pass cuts again.
        needs_vector = any(r.needs_vector for r in self.retrievers)
        q = Query(text, self.embedder if needs_vector else None)
        filters, when = self._when(text, filters or Filters())
        while True:
            result, trace = self._run(q, k, filters, depth, pool_size)
            passes += 1
            if result is None:
                # Grouping left fewer than k sources among the candidates taken (a long note
                # fills them) while a retriever may hold more: take deeper.
                earlier_ms += trace.total_ms
                depth, pool_size = depth * 4, depth * 8
                continue
            result.trace.passes, result.trace.earlier_ms = passes, earlier_ms
            result.trace.when = when
            after, objects_after = _gc_counts()
            ran = [b - a for a, b in zip(collections, after, strict=True)]
            result.trace.gc_collections = ran
            result.trace.gc_objects = objects_after - objects if not any(ran) else None
            return result

    def _when(self, text: str, filters: Filters) -> tuple[Filters, dict[str, Any] | None]:
        """``filters`` narrowed to the time the query's own words name, when some item happened
        then (:mod:`nbmemory.search.when`), and what was done, for the trace."""
        if not self.config.time_words:
            return filters, None
        window = when_mod.time_window(text, utcnow())
        if window is None:
            return filters, None
        held = when_mod.happened_in(self.db, filters, window)
        note = {
            "words": window.words,
            "since": window.since.isoformat(sep=" "),
            "until": window.until.isoformat(sep=" "),
            "happened_then": held,
            "narrowed": held > 0,
        }
        return (when_mod.narrowed(filters, window) if held else filters), note

    def _run(
        self, q: Query, k: int, filters: Filters, depth: int, pool_size: int
    ) -> tuple[SearchResult | None, Trace]:
        """One pass of every stage, and its trace; no result when a grouped search found fewer
        than ``k`` sources while more candidates exist than it considered (the caller takes
        deeper: what would only be thrown away, the no-answer flag and hydration, is skipped)."""
        config = self.config
        text = q.text
        trace = Trace(text)
        found = self._retrieve(q, depth, filters, trace)
        # A grouped search may take deeper candidates, when more exist than it considers.
        deeper = config.group and _more_exist(found, depth, pool_size) and depth < MAX_GROUP_DEPTH
        if deeper and few_sources(self.db, found, k, pool_size):
            return None, trace
        evidence, order = self.fusion(q, found, k, trace, pool_size, filters)
        pool = Pool(self.db, [i for i, _ in order], q.vector() if q.embedded else None, q.memo)
        if config.reranker:
            order = rerank_stage(text, order, found, pool, trace, config)
        if config.recency:
            order = recency_stage(order, pool, trace, config.half_life_days, config.recency_weight)
        if config.supersede:
            order = supersede_stage(self.db, order, trace)
        # MMR weighs every candidate against the others: dedup before it reads the whole (bounded)
        # pool, and the walk after it only groups. Without MMR, dedup and group share the walk.
        if config.mmr and config.dedup:
            order = dedup_stage(order, pool, trace, config.dedup_threshold)
        if config.mmr:
            order = mmr_stage(order, pool, k, trace, config.mmr_lambda)
        walk_dedup = config.dedup and not config.mmr
        more: dict[int, list[int]] = {}
        if walk_dedup or config.group:
            order, more = walk(
                order, pool, k, trace, dedup=walk_dedup, group=config.group, threshold=config.dedup_threshold
            )
        order = order[:k]
        if deeper and len(order) < k:
            return None, trace
        rejected, reason = self.no_answer(text, order, found, evidence, trace) if config.reject else (False, "")
        hits = self._hydrate_step(text, order, more, found, pool, trace)
        mark_weak(hits, evidence, reject_mod.thresholds_for(self.embedder.fingerprint))
        self._label(trace, k)
        return SearchResult(text, hits, trace, rejected=rejected, reason=reason), trace

    # -- retrieval, hydration and the trace's labels ----------------------------------------------
    def _retrieve(self, query: Query, depth: int, filters: Filters, trace: Trace) -> dict[str, Retrieved]:
        """Each retriever's ranking, one stage each."""
        found: dict[str, Retrieved] = {}
        for retriever in self.retrievers:
            if isinstance(retriever, VectorRetriever):
                retriever.start(query)  # its int8 screen's product runs while BM25 does
        for retriever in self.retrievers:
            with trace.step(retriever.name) as stage:
                got = retriever.retrieve(query, depth, filters)
                stage.output, stage.scores = got.ids, got.scores
                stage.notes, stage.detail = got.notes, got.detail
            if retriever.needs_vector:
                # Waiting for the embedding counts only where it was not hidden behind BM25.
                stage.notes["search_ms"] = round(stage.ms, 2)
            found[retriever.name] = got
        return found

    def _pool_depth(self, k: int) -> int:
        # Later stages reorder, drop and group: they work on a pool deeper than k (notes average
        # 1.2 chunks, so twice k still fills k groups). Dedup and group read it only down to the
        # k-th group (:func:`~nbmemory.search.group.walk`), so a deeper pool costs only its fusion.
        return max(k + 20, 2 * k, self.config.rerank_depth if self.config.reranker else 0)

    def _label(self, trace: Trace, k: int) -> None:
        """Where each item an explanation of ``k`` hits names is (``Trace.labels``); the rows come
        from the per-file row cache, which the stages before filled."""
        top = max(k, 10)
        ids = {i for stage in trace.stages for i in [*stage.output[:top], *stage.dropped]}
        rows = fetch_rows(self.db, sorted(ids), HitRow)
        trace.labels = {i: place(row) for i, row in rows.items()}

    def _hydrate_step(
        self,
        query: str,
        order: Ranked,
        more: dict[int, list[int]],
        found: dict[str, Retrieved],
        pool: Pool,
        trace: Trace,
    ) -> list[Hit]:
        """Hits with their stored columns, their similarity to the query and relevance tier, and
        (grouped) their source's other chunks."""
        with trace.step("hydrate") as stage:
            hits = hydrate(self.db, order, query, retriever_ranks(found), retriever_scores(found), pool.rows())
            set_tiers(hits, pool, reject_mod.thresholds_for(self.embedder.fingerprint))
            stage.output = [h.id for h in hits]
        for hit in hits:
            hit.more = more.get(hit.id, [])
        return hits
