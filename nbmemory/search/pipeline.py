"""The hybrid search pipeline: BM25 and vector retrieval, RRF fusion, the optional stages,
hydration.

Each stage is a named step (:meth:`Trace.step`) that records what it did into the trace.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from nbmemory.errors import ConfigError
from nbmemory.items import Hit
from nbmemory.search import adaptive, decay, nearmiss
from nbmemory.search import dedup as dedup_mod
from nbmemory.search import mmr as mmr_mod
from nbmemory.search import reject as reject_mod
from nbmemory.search import rerank as rerank_mod
from nbmemory.search import supersede as supersede_mod
from nbmemory.search.adaptive import QueryEvidence
from nbmemory.search.base import Query, Retrieved, Retriever
from nbmemory.search.bm25 import BM25Retriever
from nbmemory.search.bm25 import idfs as bm25_idfs
from nbmemory.search.convex import convex, scale_bm25
from nbmemory.search.filters import Filters
from nbmemory.search.fusion import rrf
from nbmemory.search.group import group_by_source
from nbmemory.search.trace import Stage, Trace
from nbmemory.search.vector import VectorRetriever
from nbmemory.store import fts, passages, vectors
from nbmemory.store.db import Database, utcnow
from nbmemory.store.rows import CandidateRow, HitRow, fetch_rows

if TYPE_CHECKING:
    import polars as pl

    from nbmemory.embed.base import Embedder

RETRIEVERS = ("bm25", "vector")
FUSIONS = ("convex", "rrf")
#: A hit matching less than this share of the query's IDF mass has no keyword support.
WEAK_LEXICAL = 0.5
#: ... and one scoring under this share of the best hit is part of a weak tail.
WEAK_SHARE = 0.75
#: Grouped searches take deeper candidates, up to this many per retriever, to fill k sources.
MAX_GROUP_DEPTH = 20_000
SNIPPET_CHARS = 240
MAX_QUERY_CHARS = 4000
#: The largest k: ranks and the search log's k are 32-bit.
MAX_K = 2**31 - 1


@dataclass
class PipelineConfig:
    """Knobs of the search pipeline. Every boolean is one stage, on or off.

    Stages run in this order: retrieval (``retrievers``), fusion (``fusion``: convex
    combination of scores or RRF; ``adaptive`` weights), ``reranker`` (gated cross-encoder),
    ``recency``, ``supersede``, ``dedup``, ``mmr``, ``group`` (one result per source), the cut
    to ``k``, ``reject`` (the no-answer flag) and the relevance tiers. Why that order: see README
    "Search pipeline".

    Parameters
    ----------
    retrievers:
        Which retrievers run; one alone gives a single-retriever search (for evaluation).
    depth:
        Candidates taken from each retriever; ``None`` means ``max(50, 3 * k)``.
    fusion:
        ``"convex"``: ``vector_weight * cosine + (1 - vector_weight) * BM25 / query IDF mass``
        (scores on absolute scales, so a weak best match stays weak); ``"rrf"``: Reciprocal
        Rank Fusion of the two rankings.
    passages:
        In convex fusion, a candidate's cosine is the best of its own and its passages' (windows
        of consecutive sentences, :mod:`nbmemory.store.passages`): the one sentence a question is
        about is not diluted by the rest of a long chunk. Off: chunk vectors only.
    vector_weight:
        The vector side's weight in the convex combination. MiniLM's cosines of relevant notes
        spread over about a third of the range BM25's share of the query spans, so 0.8 gives
        both sides a similar say; an identifier the corpus holds moves it towards BM25.
    fill_bm25:
        In convex fusion, a candidate only the vector side found gets its BM25 score too (as one
        only BM25 found gets its cosine). Off, such a candidate counts 0 on the keyword side
        whatever words it holds, so the ranking depends on how deep BM25 was read (on ``k``).
    literal:
        In convex fusion, an identifier of the query (``NEXT_PUBLIC_``, ``INC-2307``) counts for
        a candidate only where it is written as such, when some candidate has it so; BM25 alone
        also matches its pieces scattered over a note.
    symbols:
        A query token made of punctuation more than letters (``g??``, ``$0``, ``:/``), which the
        full-text index drops, is one more keyword term, held where it is written as such
        (:mod:`nbmemory.search.symbols`).
    rrf_k:
        RRF constant.
    weights:
        Per-retriever RRF weights when ``adaptive`` is off.
    adaptive:
        Per-query weights from the lexical evidence (:mod:`nbmemory.search.adaptive`).
    adaptive_strength:
        How far adaptive weights may move from 1 (0.8: from 1.8/0.2 to 0.2/1.8).
    reranker:
        A sentence-transformers CrossEncoder name or folder; ``None`` turns reranking off.
    rerank_depth:
        Fused candidates the cross-encoder scores when the gate lets it run.
    rerank_gate:
        The gate: the cross-encoder runs only when the fused top is ambiguous (the top score
        leads the next four by at most this share, and the retrievers disagree on #1);
        ``None`` runs it on every query.
    recency:
        Multiply fused scores by a bounded recency/importance/frequency factor.
    half_life_days, recency_weight:
        Decay half-life, and the factor's range ``[1 - w, 1 + w]``. RRF scores of neighbouring
        ranks differ by 2-3 %, so 0.05 lets age move an item a few places among near-ties, and
        no further (0.05 was chosen on the scenario benchmark's seed 11; 0.1 already cost
        paraphrase and procedure questions there).
    supersede:
        An item another item supersedes (a ``supersedes`` link) ranks right below it, or at
        the end when the newer one is not among the results.
    dedup:
        Collapse exact and near-duplicate results (cosine >= ``dedup_threshold``).
    mmr:
        Maximal Marginal Relevance with ``mmr_lambda`` (1.0 = relevance only).
    group:
        One result per source (note, notebook, file): its best chunk, with the others in
        ``Hit.more``; off gives the flat list of chunks.
    reject:
        Flag "no confident answer" (``SearchResult.rejected``, hits kept) when neither signal
        supports the best hit (:mod:`nbmemory.search.reject`).
    """

    retrievers: tuple[str, ...] = RETRIEVERS
    depth: int | None = None
    fusion: str = "convex"
    passages: bool = True
    vector_weight: float = 0.8
    fill_bm25: bool = True
    literal: bool = True
    symbols: bool = True
    rrf_k: int = 60
    weights: dict[str, float] = field(default_factory=lambda: {"bm25": 1.0, "vector": 1.0})
    adaptive: bool = True
    adaptive_strength: float = 0.8
    reranker: str | None = None
    rerank_depth: int = 20
    rerank_gate: float | None = 0.15
    recency: bool = False
    half_life_days: float = 30.0
    recency_weight: float = 0.05
    supersede: bool = True
    dedup: bool = True
    dedup_threshold: float = 0.95
    mmr: bool = False
    mmr_lambda: float = 0.7
    group: bool = True
    reject: bool = True

    def __post_init__(self) -> None:
        if not self.retrievers:
            raise ConfigError("at least one retriever is needed: bm25, vector or both")
        for name in self.retrievers:
            if name not in RETRIEVERS:
                raise ConfigError(f"retriever {name!r} is not one of {', '.join(RETRIEVERS)}")
        if self.depth is not None and self.depth <= 0:
            raise ConfigError(f"depth must be greater than 0, got {self.depth}")
        if self.rrf_k <= 0:
            raise ConfigError(f"rrf_k must be greater than 0, got {self.rrf_k}")
        if not 0.0 <= self.adaptive_strength < 1.0:
            raise ConfigError(f"adaptive_strength must be in [0, 1), got {self.adaptive_strength}")
        if self.rerank_depth <= 1:
            raise ConfigError(f"rerank_depth must be at least 2, got {self.rerank_depth}")
        if self.half_life_days <= 0:
            raise ConfigError(f"half_life_days must be greater than 0, got {self.half_life_days}")
        if not 0.0 <= self.recency_weight < 1.0:
            raise ConfigError(f"recency_weight must be in [0, 1), got {self.recency_weight}")
        if not 0.0 < self.dedup_threshold <= 1.0:
            raise ConfigError(f"dedup_threshold must be in (0, 1], got {self.dedup_threshold}")
        if self.fusion not in FUSIONS:
            raise ConfigError(f"fusion must be one of {', '.join(FUSIONS)}, got {self.fusion!r}")
        if not 0.0 <= self.vector_weight <= 1.0:
            raise ConfigError(f"vector_weight must be between 0 and 1, got {self.vector_weight}")
        if not 0.0 <= self.mmr_lambda <= 1.0:
            raise ConfigError(f"mmr_lambda must be between 0 and 1, got {self.mmr_lambda}")

    @classmethod
    def plain(cls, retrievers: tuple[str, ...] = RETRIEVERS, **changes: Any) -> PipelineConfig:
        """Retrieval and equal-weight RRF only: every optional stage off (the evaluation baselines)."""
        off: dict[str, Any] = {f.name: False for f in dataclasses.fields(cls) if isinstance(f.default, bool)}
        return cls(retrievers=retrievers, **{**off, "fusion": "rrf", **changes})


@dataclass
class SearchResult:
    """Hits, best first, plus the trace of how they were ranked."""

    query: str
    hits: list[Hit]
    trace: Trace
    rejected: bool = False
    reason: str = ""

    @property
    def fusion(self) -> Stage | None:
        """The fusion stage of the trace (``convex`` or ``rrf``), None for one retriever."""
        return self.trace.stage("convex") or self.trace.stage("rrf")

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.hits)

    def __len__(self) -> int:
        return len(self.hits)

    def __getitem__(self, i: int) -> Hit:
        return self.hits[i]

    @property
    def ids(self) -> list[int]:
        return [h.id for h in self.hits]

    def explain(self, top: int = 10) -> str:
        return self.trace.explain(top)

    def to_polars(self) -> pl.DataFrame:
        import polars as pl

        rows = []
        for rank, h in enumerate(self.hits, start=1):
            rows.append(
                {
                    "rank": rank,
                    "id": h.id,
                    "score": h.score,
                    "bm25_rank": h.ranks.get("bm25"),
                    "vector_rank": h.ranks.get("vector"),
                    "source": h.source,
                    "location": h.location,
                    "heading": h.heading,
                    "kind": h.kind,
                    "namespace": h.namespace,
                    "tags": h.tags,
                    "snippet": h.snippet,
                    "text": h.text,
                }
            )
        schema: dict[str, Any] = {
            "rank": pl.Int64,
            "id": pl.Int64,
            "score": pl.Float64,
            "bm25_rank": pl.Int64,
            "vector_rank": pl.Int64,
            "source": pl.Utf8,
            "location": pl.Utf8,
            "heading": pl.Utf8,
            "kind": pl.Utf8,
            "namespace": pl.Utf8,
            "tags": pl.List(pl.Utf8),
            "snippet": pl.Utf8,
            "text": pl.Utf8,
        }
        return pl.DataFrame(rows, schema=schema)


def snippet(text: str, query: str, width: int = SNIPPET_CHARS) -> str:
    """A window of ``text`` around the first query word it contains."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    words = [w for w in re.findall(r"\w{3,}", query.lower())]
    lower = flat.lower()
    positions = [p for p in (lower.find(w) for w in words) if p >= 0]
    start = max(0, min(positions) - width // 4) if positions else 0
    piece = flat[start : start + width]
    return ("…" if start > 0 else "") + piece + ("…" if start + width < len(flat) else "")


Ranked = list[tuple[int, float]]


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


def _ranks(found: Mapping[str, Retrieved]) -> dict[str, dict[int, int]]:
    """Retriever -> item -> its 1-based rank there."""
    return {name: {doc: r for r, doc in enumerate(got.ids, start=1)} for name, got in found.items()}


def _scores(found: Mapping[str, Retrieved]) -> dict[str, dict[int, float]]:
    """Retriever -> item -> the retriever's own score."""
    return {name: got.scores for name, got in found.items()}


def _unit(v: np.ndarray) -> np.ndarray:
    return v / (float(np.linalg.norm(v)) or 1.0)


def _unit_rows(vecs: dict[int, np.ndarray]) -> tuple[list[int], np.ndarray]:
    """(ids, their vectors as unit-length rows; a zero vector stays zero)."""
    keys = list(vecs)
    if not keys:
        return keys, np.empty((0, 0), dtype=np.float32)
    mat = np.stack([vecs[i] for i in keys])
    norms = np.linalg.norm(mat, axis=1, keepdims=True)
    return keys, mat / np.where(norms > 0, norms, 1.0)


def cosines(db: Database, qvec: np.ndarray, ids: list[int], known: Mapping[int, float]) -> dict[int, float]:
    """``known`` cosines plus the exact cosine to ``qvec`` of the ``ids`` it lacks (vectors fetched once)."""
    out = dict(known)
    missing = [i for i in ids if i not in out]
    if missing:
        keys, unit = _unit_rows(vectors.get_many(db, missing))
        if keys:
            out.update(zip(keys, (unit @ _unit(qvec)).tolist(), strict=True))
    return out


class _Pool:
    """The fused candidates' stored data, fetched once and only when a stage asks for it."""

    def __init__(self, db: Database, ids: list[int], qvec: np.ndarray | None) -> None:
        self.db = db
        self.ids = ids
        self.qvec = qvec
        self._vectors: dict[int, np.ndarray] | None = None
        self._rows: dict[int, CandidateRow] | None = None

    def vectors(self) -> dict[int, np.ndarray]:
        """Candidate -> unit-length embedding."""
        if self._vectors is None:
            keys, unit = _unit_rows(vectors.get_many(self.db, self.ids))
            self._vectors = dict(zip(keys, unit, strict=True))
        return self._vectors

    def similarities(self, ids: list[int]) -> dict[int, float]:
        """Exact cosine similarity of each id to the query (ids outside the pool are fetched)."""
        if self.qvec is None:
            return {}
        have = self.vectors()
        q = _unit(self.qvec)
        known = {i: float(have[i] @ q) for i in ids if i in have}
        return cosines(self.db, self.qvec, ids, known)

    def rows(self) -> dict[int, CandidateRow]:
        """Every candidate's live row: the columns of a hit, then the recency signals."""
        if self._rows is None:
            self._rows = fetch_rows(self.db, self.ids, CandidateRow)
        return self._rows

    def meta(self) -> dict[int, decay.ItemSignals]:
        """The recency signals, read afresh: retrieval counters change with every search log flush,
        which does not invalidate the rows held for searches."""
        if not self.ids:
            return {}
        found = self.db.fetchall(
            "SELECT id, created_at, last_retrieved_at, importance, retrieval_count, pinned FROM chunks "
            f"WHERE id IN ({', '.join(str(int(i)) for i in self.ids)}) AND deleted_at IS NULL"
        )
        return {
            int(i): decay.ItemSignals(created, retrieved, float(importance), int(count), bool(pinned))
            for i, created, retrieved, importance, count, pinned in found
        }

    def texts(self, ids: list[int]) -> dict[int, str]:
        rows = self.rows()
        return {
            i: (f"{rows[i].heading}\n{rows[i].text}" if rows[i].heading else str(rows[i].text))
            for i in ids
            if i in rows
        }


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

    def run(self, query: str, k: int = 10, filters: Filters | None = None) -> SearchResult:
        """The ``k`` best hits for ``query`` among the items matching ``filters``, and the trace."""
        text = checked_query(query, k)
        depth = self.config.depth or max(50, 3 * k)
        pool_size = self._pool_depth(k)
        while True:
            result, saturated = self._run(text, k, filters or Filters(), depth, pool_size)
            # Grouping can leave fewer than k sources among the candidates taken (a long note
            # fills them): take deeper while a retriever may hold more.
            if not (self.config.group and len(result.hits) < k and saturated and depth < MAX_GROUP_DEPTH):
                return result
            depth, pool_size = depth * 4, depth * 8

    def _run(
        self, text: str, k: int, filters: Filters, depth: int, pool_size: int
    ) -> tuple[SearchResult, bool]:
        """One pass of every stage; also whether more candidates exist than this pass considered."""
        config = self.config
        trace = Trace(text)
        needs_vector = any(r.needs_vector for r in self.retrievers)
        q = Query(text, self.embedder if needs_vector else None)
        found = self._retrieve(q, depth, filters, trace)
        # More candidates exist when a retriever returned all it was asked for, or when the
        # fused pool below cuts some of those it returned.
        candidates = len({i for got in found.values() for i in got.ids})
        saturated = candidates > pool_size or any(len(got.ranked) >= depth for got in found.values())
        evidence, order = self._fuse(q, found, k, trace, pool_size)
        pool = _Pool(self.db, [i for i, _ in order], q.vector() if q.embedded else None)
        if config.reranker:
            order = self._rerank(text, order, found, pool, trace)
        if config.recency:
            order = self._recency(order, pool, trace)
        if config.supersede:
            order = self._supersede(order, trace)
        if config.dedup:
            order = self._dedup(order, pool, trace)
        if config.mmr:
            order = self._mmr(order, pool, k, trace)
        more: dict[int, list[int]] = {}
        if config.group:
            order, more = self._group(order, pool, k, trace)
        order = order[:k]
        rejected, reason = False, ""
        if config.reject and evidence is not None and "vector" in found:
            rejected, reason = self._reject(text, order, found, evidence, trace)
        hits = self._hydrate_step(text, order, found, pool, trace)
        for hit in hits:
            hit.more = more.get(hit.id, [])
        self._support(hits, evidence)
        return SearchResult(text, hits, trace, rejected=rejected, reason=reason), saturated

    # -- stages ---------------------------------------------------------------------------------
    def _retrieve(self, query: Query, depth: int, filters: Filters, trace: Trace) -> dict[str, Retrieved]:
        """Each retriever's ranking, one stage each."""
        found: dict[str, Retrieved] = {}
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

    def _fuse(
        self, query: Query, found: dict[str, Retrieved], k: int, trace: Trace, pool_size: int
    ) -> tuple[QueryEvidence | None, Ranked]:
        """Fuse the rankings (convex or RRF, weights from the query's evidence), cut to ``pool_size``."""
        if self.config.fusion == "convex" and len(found) > 1:
            return self._convex(query, found, k, trace, pool_size)
        return self._rrf(query.text, found, k, trace, pool_size)

    def _pool_depth(self, k: int) -> int:
        # Later stages reorder, drop and group: they work on a pool deeper than k (notes average
        # 1.2 chunks, so twice k still fills k groups; a deeper pool costs dedup quadratically).
        return max(k + 20, 2 * k, self.config.rerank_depth if self.config.reranker else 0)

    def _convex(
        self, query: Query, found: dict[str, Retrieved], k: int, trace: Trace, pool_size: int
    ) -> tuple[QueryEvidence | None, Ranked]:
        """Convex combination of the cosine and the BM25 share of the query, for every candidate."""
        config = self.config
        ranks = _ranks(found)
        with trace.step("convex") as stage:
            evidence = self._evidence(query.text, found.get("bm25"))
            alpha = config.vector_weight
            why = "fixed weights"
            if evidence is not None and config.adaptive and evidence.lean > 0:
                # Identifiers the corpus holds are what an embedding cannot see.
                alpha = config.vector_weight * (1.0 - 0.5 * evidence.lean)
                why = evidence.reason
            elif evidence is not None and config.adaptive:
                why = "cosine and keyword share on their own scales"
            weights = {"bm25": 1.0 - alpha, "vector": alpha}
            candidates = list(dict.fromkeys(i for got in found.values() for i in got.ids))
            exact = self._cosines(query, found["vector"], candidates)
            # In candidate order, whichever way the cosines were read: ties break by first seen.
            cosine = {i: exact[i] for i in candidates if i in exact}
            rescored = None
            if config.passages:
                cosine, rescored = self._passage_cosines(query, cosine)
            bm25, filled = found["bm25"], 0
            if config.fill_bm25:
                bm25, filled = self._fill_bm25(bm25, candidates)
            lexical = self._lexical(bm25, evidence)
            fused = convex({"bm25": lexical, "vector": cosine}, weights)[:pool_size]
            stage.notes = {"weights": {n: round(w, 3) for n, w in weights.items()}, "why": why}
            if filled:
                stage.notes["bm25_filled"] = filled
            if rescored is not None:
                stage.notes["with_passages"] = rescored
            if cosine:
                # What the no-answer flag compares with the memory's near-miss cosine.
                stage.notes["best_cosine"] = round(max(cosine.values()), 4)
            if evidence is not None:
                stage.notes.update(evidence=round(evidence.evidence, 3), mass=round(evidence.mass, 3))
            stage.output = [i for i, _ in fused]
            stage.scores = dict(fused)
            stage.detail = {
                doc: ", ".join(
                    (f"{name} #{ranks[name][doc]}" if doc in ranks[name] else f"{name} -")
                    + f" ({(cosine if name == 'vector' else lexical).get(doc, 0.0):.3f})"
                    for name in found
                )
                for doc in stage.output[:k]
            }
        return evidence, list(fused)

    @staticmethod
    def _fill_bm25(bm25: Retrieved, candidates: list[int]) -> tuple[Retrieved, int]:
        """BM25's answer with the scores of the candidates it ranked below its cut (found by the
        vector side) added after its own, and how many of them hold a query term."""
        known = bm25.scores
        below = [i for i in candidates if i not in known]
        if not below or bm25.score_of is None:
            return bm25, 0
        scores, held = bm25.score_of(below)
        ranked = bm25.ranked + [(i, scores[i]) for i in below if i in scores]
        return replace(bm25, ranked=ranked, matched={**bm25.matched, **held}), len(scores)

    def _lexical(self, bm25: Retrieved, evidence: QueryEvidence | None) -> dict[int, float]:
        """The keyword side on the convex scale: the BM25 score as a share of the query's IDF mass,
        at least the share of that mass the item holds (tf and length aside), so an item holding
        a rare query word is not sunk by BM25's length normalisation."""
        mass = evidence.mass if evidence is not None else 0.0
        scaled = scale_bm25(bm25.scores, mass)
        if mass <= 0 or not bm25.terms:
            return scaled
        idf, _ = self._idfs(bm25)
        for item, terms in bm25.matched.items():
            if item in scaled:
                held = sum(idf[t][0] for t in terms if t in idf) / mass
                scaled[item] = max(scaled[item], held)
        if self.config.literal and evidence is not None and evidence.identifiers:
            self._literal_identifiers(scaled, bm25, evidence, idf)
        return scaled

    def _literal_identifiers(
        self,
        scaled: dict[int, float],
        bm25: Retrieved,
        evidence: QueryEvidence,
        idf: dict[str, tuple[float, int]],
    ) -> None:
        """An identifier counts where it is written, not where its pieces are scattered.

        BM25 splits ``NEXT_PUBLIC_`` into ``next`` and ``public``, and a note about the ``public``
        schema that mentions what comes next matches it as well as the note that uses the
        prefix. When some candidate holds an identifier of the query as written (case aside), a
        candidate that holds only its pieces loses the share of its BM25 score those pieces gave.
        """
        rows = fetch_rows(self.db, list(scaled), HitRow)
        texts = {i: f"{row.heading}\n{row.text}".lower() for i, row in rows.items()}
        for name in evidence.identifiers:
            if name in bm25.symbol_idf:
                # The retriever found where a symbol is written as such: ``:/`` is not in ``https://``.
                written = {item for item in texts if name in bm25.matched.get(item, ())}
            else:
                written = {item for item, text in texts.items() if name.lower() in text}
            if not written:
                continue
            pieces = set(evidence.pieces[name])
            for item in texts:
                if item in written:
                    continue
                terms = bm25.matched.get(item, set())
                held = sum(idf[t][0] for t in terms if t in idf)
                lost = sum(idf[t][0] for t in terms & pieces if t in idf)
                if held > 0 and lost > 0:
                    scaled[item] *= 1.0 - lost / held

    def _cosines(self, query: Query, got: Retrieved, ids: list[int]) -> dict[int, float]:
        """Cosine similarity to the query of every candidate (the vector side's own, else exact)."""
        if all(i in got.scores for i in ids):
            return dict(got.scores)
        return cosines(self.db, query.vector(), ids, got.scores)

    def _passage_cosines(self, query: Query, cosine: dict[int, float]) -> tuple[dict[int, float], int]:
        """Each candidate's cosine raised to its best passage's (:mod:`nbmemory.store.passages`),
        and how many candidates had passages."""
        if passages.none_stored(self.db, self.embedder.fingerprint):
            return cosine, 0  # reading the candidates' content hashes costs ~0.15 ms at 10k
        rows = fetch_rows(self.db, list(cosine), CandidateRow)
        hashes = {i: row.content_hash for i, row in rows.items()}
        best = passages.best(self.db, self.embedder.fingerprint, query.vector(), hashes)
        return {i: max(c, best.get(i, c)) for i, c in cosine.items()}, len(best)

    def _rrf(
        self, query: str, found: dict[str, Retrieved], k: int, trace: Trace, pool_size: int
    ) -> tuple[QueryEvidence | None, Ranked]:
        """RRF over the rankings (adaptive weights from the lexical evidence), cut to a pool deeper than k."""
        config = self.config
        rankings = {name: got.ids for name, got in found.items()}
        ranks = _ranks(found)
        with trace.step("rrf") as stage:
            evidence = self._evidence(query, found.get("bm25"))
            weights = dict(config.weights)
            ks: dict[str, float] = {}
            if evidence is not None and config.adaptive and len(rankings) > 1:
                weights = evidence.weights
                # A trusted retriever's ranks are also sharper: its constant shrinks with its weight.
                ks = {n: config.rrf_k / w for n, w in weights.items()}
                stage.notes = {
                    "weights": {n: round(w, 3) for n, w in weights.items()},
                    "ks": {n: round(kr, 1) for n, kr in ks.items()},
                    "evidence": round(evidence.evidence, 3),
                    "why": evidence.reason,
                }
            else:
                stage.notes = {"weights": weights}
                if evidence is not None:
                    stage.notes["evidence"] = round(evidence.evidence, 3)
            stage.notes["k"] = config.rrf_k
            fused = rrf(rankings, k=config.rrf_k, weights=weights, ks=ks)[:pool_size]
            stage.output = [i for i, _ in fused]
            stage.scores = dict(fused)
            stage.detail = {
                doc: ", ".join(
                    f"{name} #{ranks[name][doc]}" if doc in ranks[name] else f"{name} -" for name in rankings
                )
                for doc in stage.output[:k]
            }
        return evidence, list(fused)

    def _idfs(self, bm25: Retrieved) -> tuple[dict[str, tuple[float, int]], float]:
        """BM25's query terms -> (IDF, document frequency), symbols as the retriever counted
        them, and the IDF of a term no item holds."""
        words = [t for t in bm25.terms if t not in bm25.symbol_idf]
        if words:
            idf, unseen = bm25_idfs(self.db, words)
        else:
            idf, unseen = {}, fts.idf(float(fts.corpus_size(self.db)), 0.0)
        return {**idf, **bm25.symbol_idf}, unseen

    def _evidence(self, query: str, bm25: Retrieved | None) -> QueryEvidence | None:
        """Lexical evidence and adaptive weights; None when BM25 did not run."""
        if bm25 is None:
            return None
        idf, unseen = self._idfs(bm25) if bm25.terms else ({}, 0.0)
        term_of = {name: fts.query_terms(self.db, name) for name in adaptive.identifiers(query)}
        # A symbol is an identifier too (an embedding cannot see it), with itself among its terms.
        term_of.update({name: [*fts.query_terms(self.db, name), name] for name in bm25.symbol_idf})
        top = bm25.ids[:5]
        return adaptive.fusion_weights(
            query,
            idf,
            unseen,
            [bm25.matched.get(i, set()) for i in top],
            term_of,
            strength=self.config.adaptive_strength,
        )

    def _rerank(
        self, query: str, order: Ranked, found: dict[str, Retrieved], pool: _Pool, trace: Trace
    ) -> Ranked:
        config = self.config
        firsts = {name: (got.ids[0] if got.ranked else None) for name, got in found.items()}
        with trace.step("rerank", compare=True) as stage:
            # The gate reads how clearly the rankings agree on a leader, on the rank scale it was
            # set on (RRF), whichever fusion ordered the candidates.
            by_rank = rrf({name: got.ids for name, got in found.items()}, k=config.rrf_k)
            decision = (
                rerank_mod.gate(by_rank, firsts, config.rerank_gate)
                if config.rerank_gate is not None
                else rerank_mod.GateDecision(True, "gate off", 0.0)
            )
            stage.notes = {"ran": decision.run, "why": decision.reason, "model": config.reranker}
            if decision.run:
                head = [i for i, _ in order[: config.rerank_depth]]
                texts = pool.texts(head)
                model = rerank_mod.load_reranker(str(config.reranker))
                scores = model.score(query, [texts.get(i, "") for i in head])
                ce = {i: float(sc) for i, sc in zip(head, scores, strict=True)}
                order = rerank_mod.blend([i for i, _ in order], ce, k=config.rrf_k)
                by_ce = sorted(head, key=lambda i: -ce[i])
                stage.detail = {i: f"cross-encoder #{by_ce.index(i) + 1} ({ce[i]:.3f})" for i in head}
            stage.output = [i for i, _ in order]
            stage.scores = dict(order)
        return order

    def _recency(self, order: Ranked, pool: _Pool, trace: Trace) -> Ranked:
        config = self.config
        with trace.step("recency", compare=True) as stage:
            meta = pool.meta()
            now = utcnow()
            scored = []
            for i, score in order:
                signals = meta.get(i)
                if signals is None:
                    scored.append((i, score))
                    continue
                factor, why = decay.recency_factor(signals, now, config.half_life_days, config.recency_weight)
                scored.append((i, score * factor))
                stage.detail[i] = f"x{factor:.3f}: {why}"
            scored.sort(key=lambda kv: -kv[1])
            stage.output = [i for i, _ in scored]
            stage.scores = dict(scored)
            stage.notes = {"half_life_days": config.half_life_days, "weight": config.recency_weight}
        return scored

    def _supersede(self, order: Ranked, trace: Trace) -> Ranked:
        with trace.step("supersede", compare=True) as stage:
            newer = supersede_mod.superseded_by(self.db, [i for i, _ in order])
            if not newer:
                trace.discard(stage)
                return order
            moved = supersede_mod.demote(order, newer)
            for old, new in newer.items():
                stage.detail[old] = f"superseded by #{new}"
            stage.output = [i for i, _ in moved]
            stage.scores = dict(moved)
            stage.notes = {"superseded": len(newer)}
        return moved

    def _dedup(self, order: Ranked, pool: _Pool, trace: Trace) -> Ranked:
        with trace.step("dedup", compare=True) as stage:
            ids = [i for i, _ in order]
            kept, dropped = dedup_mod.dedup(ids, pool.texts(ids), pool.vectors(), self.config.dedup_threshold)
            if not dropped:
                trace.discard(stage)
                return order
            stage.dropped = {
                d: f"duplicate of #{keep} (cosine {sim:.3f})" for d, (keep, sim) in dropped.items()
            }
            scores = dict(order)
            out = [(i, scores[i]) for i in kept]
            stage.output = kept
            stage.scores = dict(out)
            stage.notes = {"collapsed": len(dropped), "threshold": self.config.dedup_threshold}
        return out

    def _mmr(self, order: Ranked, pool: _Pool, k: int, trace: Trace) -> Ranked:
        lam = self.config.mmr_lambda
        with trace.step("mmr", compare=True) as stage:
            ids = [i for i, _ in order]
            picked = mmr_mod.mmr(ids, dict(order), pool.vectors(), lam, k=min(len(ids), k))
            rest = [(i, s) for i, s in order if i not in {p for p, _, _ in picked}]
            stage.notes = {"lambda": lam}
            floor = min((s for _, s, _ in picked), default=0.0)
            out = [(i, s) for i, s, _ in picked] + [(i, floor - 1.0 - n) for n, (i, _) in enumerate(rest)]
            for i, _, near in picked:
                if near is not None:
                    stage.detail[i] = f"most like #{near}"
            stage.output = [i for i, _ in out]
            stage.scores = dict(out)
        return out

    def _reject(
        self, query: str, order: Ranked, found: dict[str, Retrieved], evidence: QueryEvidence, trace: Trace
    ) -> tuple[bool, str]:
        """The no-answer flag: hits are kept (an interactive search never shows an empty screen)."""
        with trace.step("reject", compare=True) as stage:
            stage.output = [i for i, _ in order]
            thresholds = reject_mod.thresholds_for(self.embedder.fingerprint)
            if thresholds is None:
                stage.notes = {"rejected": False, "why": "no thresholds derived for this model"}
                return False, ""
            top_sim = max(found["vector"].scores.values(), default=None)
            missing = reject_mod.unseen(query, evidence.mass, evidence.unseen_idf, evidence.missing_terms)
            rejected, reason, numbers = thresholds.should_reject(top_sim, missing, evidence.evidence)
            fusion = trace.stage("convex")
            best = fusion.notes.get("best_cosine") if fusion is not None else None
            weak_words = evidence.mass > 0 and evidence.evidence < reject_mod.KEYWORD_HALF
            if not rejected and best is not None and weak_words:
                # Two retrievers that pick the same source on their own are evidence it answers.
                if self._first_sources_agree(found):
                    numbers += "; BM25 and the vector side put the same source first"
                # Only then is the memory's near-miss cosine read (measured once per memory state).
                elif (near := nearmiss.near_miss(self.db, self.embedder)) is not None:
                    # The first hit's fused score as fusion gave it (later stages rescale scores).
                    top = fusion.scores.get(order[0][0]) if fusion is not None and order else None
                    rejected, reason, more = reject_mod.far_from_everything(
                        best, near.cosine, evidence.evidence, top
                    )
                    numbers += f"; {more}"
            stage.notes = {"rejected": rejected, "why": numbers}
        return rejected, reason

    def _first_sources_agree(self, found: dict[str, Retrieved]) -> bool:
        firsts = [got.ids[0] for got in found.values() if got.ids]
        if len(firsts) < 2:
            return False
        rows = fetch_rows(self.db, firsts, HitRow)
        sources = {rows[i].source if i in rows and rows[i].source else i for i in firsts}
        return len(sources) == 1

    def _group(self, order: Ranked, pool: _Pool, k: int, trace: Trace) -> tuple[Ranked, dict[int, list[int]]]:
        """One result per source: its best chunk leads, the others ride along in ``Hit.more``."""
        with trace.step("group", compare=True) as stage:
            rows = pool.rows()
            sources = {i: (rows[i].source if i in rows else None) for i, _ in order}
            leaders, more = group_by_source(order, sources, k)
            stage.output = [i for i, _ in leaders]
            stage.scores = dict(leaders)
            stage.notes = {"groups": len(leaders), "chunks": len(order)}
            for leader, others in more.items():
                if others:
                    stage.detail[leader] = f"+{len(others)} more in this source"
                    for other in others:
                        stage.dropped[other] = f"in the same source as #{leader}"
        return leaders, more

    def _support(self, hits: list[Hit], evidence: QueryEvidence | None) -> None:
        """Mark the tail no retriever supports: below the lowest cosine tier, matching under half
        of the query's IDF mass, and scoring under :data:`WEAK_SHARE` of the best hit. They keep
        their place; front ends show them as weaker matches."""
        if not hits or reject_mod.thresholds_for(self.embedder.fingerprint) is None:
            return  # no tiers for this model: no way to call a cosine weak
        mass = evidence.mass if evidence is not None else 0.0
        best = hits[0].score
        for hit in hits:
            lexical = hit.retriever_scores.get("bm25", 0.0) / mass if mass > 0 else 0.0
            semantic = hit.tier != "none" or (hit.similarity is None and "vector" not in hit.ranks)
            hit.weak = not semantic and lexical < WEAK_LEXICAL and hit.score < WEAK_SHARE * best

    def _hydrate_step(
        self, query: str, order: Ranked, found: dict[str, Retrieved], pool: _Pool, trace: Trace
    ) -> list[Hit]:
        """Hits with their stored columns, their similarity to the query and relevance tier."""
        with trace.step("hydrate") as stage:
            hits = self.hydrate(order, query, _ranks(found), _scores(found), pool.rows())
            self._tier(hits, pool)
            stage.output = [h.id for h in hits]
        return hits

    def _tier(self, hits: list[Hit], pool: _Pool) -> None:
        thresholds = reject_mod.thresholds_for(self.embedder.fingerprint)
        if hits and pool.qvec is not None:
            sims = pool.similarities([h.id for h in hits])
            for h in hits:
                h.similarity = sims.get(h.id)
                if thresholds is not None:
                    h.tier = thresholds.tier(None if h.similarity is None else 1.0 - h.similarity)

    # -- hydration ------------------------------------------------------------------------------
    def hydrate(
        self,
        ranked: Sequence[tuple[int, float]],
        query: str,
        ranks: Mapping[str, Mapping[int, int]],
        scores: Mapping[str, Mapping[int, float]],
        rows: Mapping[int, HitRow] | None = None,
    ) -> list[Hit]:
        """Hits for ``ranked`` in its order, from the items' live rows (deleted items are left out).

        Parameters
        ----------
        ranked:
            (item id, score) best first.
        query:
            The text the snippets are cut around.
        ranks, scores:
            Retriever -> item -> its rank there, and its score there (``Hit.ranks``,
            ``Hit.retriever_scores``).
        rows:
            Rows already read (a pipeline's candidates); the others are fetched.
        """
        if not ranked:
            return []
        by_id: dict[int, HitRow] = dict(rows) if rows is not None else {}
        missing = [i for i, _ in ranked if i not in by_id]
        if missing:
            by_id.update(fetch_rows(self.db, missing, HitRow))
        hits = []
        for doc, score in ranked:
            row = by_id.get(doc)
            if row is None:
                continue
            hits.append(
                Hit(
                    id=doc,
                    score=score,
                    text=row.text,
                    snippet=snippet(row.text, query),
                    source=row.source,
                    kind=row.kind,
                    namespace=row.namespace,
                    heading=row.heading or "",
                    cell_id=row.cell_id,
                    cell_index=row.cell_index,
                    line_start=row.line_start,
                    line_end=row.line_end,
                    page=row.page,
                    tags=list(row.tags or []),
                    importance=float(row.importance),
                    updated_at=row.updated_at,
                    ranks={n: r[doc] for n, r in ranks.items() if doc in r},
                    retriever_scores={n: s[doc] for n, s in scores.items() if doc in s},
                )
            )
        return hits
