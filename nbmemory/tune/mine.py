"""Mine training triples from where keyword-heavy and vector-heavy search disagree (vstash).

A personal memory has no query log at first, so queries come from the memory itself:

``title``
    An item's heading (a markdown heading path, a BEIR title): its last two levels, at least
    three words. The positive is the item's text *without* the heading, so the model cannot
    match the query by copying it. Headings shared by more than :data:`MAX_HEADING_SHARE`
    live items ("Setup", "Notes") are skipped: they name no one item.
``first_sentence``
    The first sentence of an item's text (4 to 40 words; code items are skipped). The positive
    is the heading plus the *rest* of the text, again without the query's own words.
``log``
    Queries from the search log. They have no source item: the positive is the best item that
    both runs put in their top 10 (the two retrievers agree on it), the negative as below.

For every query one hybrid search runs; its BM25 and vector rankings are fused twice with RRF
(k=60): keyword-heavy (:data:`KEYWORD_HEAVY`, bm25 0.95 / vector 0.05) and vector-heavy
(:data:`VECTOR_HEAVY`, 0.05 / 0.95), the weights of the vstash paper. The query *disagrees*
when the two top-10 sets differ. Only disagreeing queries give a triple:

* positive: the item the query came from (its text as described above);
* hard negative: the best-ranked item of the vector-heavy top 10 that is missing from the
  keyword-heavy top 10, i.e. what the embedding model likes and the words do not support;
  if there is none, the best-ranked keyword-heavy item missing from the vector-heavy top 10.
  Never the source item, never an item of the same source and heading as the source (a
  sibling chunk of the same section), never an item with the source's text, never a held-out
  item.

Held out from training (for the adoption gate, :mod:`nbmemory.tune.gate`): every query of a
share of the source items, chosen by a seeded hash of the item id, so neither the item nor
any query made from it is trained on. Their judgement is "the source item is relevant".
"""

from __future__ import annotations

import hashlib
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from nbmemory.embed.base import EmbedderProxy
from nbmemory.errors import ConfigError
from nbmemory.search.rrf import rrf
from nbmemory.store import search_log, tuning_rows
from nbmemory.store.chunks import embedding_text

if TYPE_CHECKING:
    from nbmemory.embed.base import Embedder
    from nbmemory.store.db import Database

QUERY_SOURCES = ("title", "first_sentence", "log")
#: RRF weights of the two runs whose disagreement is mined (vstash: 0.95 / 0.05).
KEYWORD_HEAVY = {"bm25": 0.95, "vector": 0.05}
VECTOR_HEAVY = {"bm25": 0.05, "vector": 0.95}
TOP = 10
#: Candidates taken from each retriever before the two fusions.
DEPTH = 50
#: A heading shared by more live items than this is too generic to be a query.
MAX_HEADING_SHARE = 3
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9])")
_HEADING_SEP = " > "

# A function that returns the BM25 and vector rankings (item ids, best first) for a query.
Retrieve = Callable[[str], tuple[list[int], list[int]]]


@dataclass(frozen=True)
class PseudoQuery:
    """A query made from the memory: its text, where it came from, and its positive text."""

    text: str
    kind: str
    source_id: int | None
    positive: str = ""


@dataclass(frozen=True)
class Triple:
    """One training example: ``query`` should be closer to ``positive`` than to ``negative``."""

    query: str
    positive: str
    negative: str
    kind: str
    positive_id: int
    negative_id: int


@dataclass
class MiningReport:
    """What mining found.

    ``queries`` counts the training queries searched (held-out ones are not mined);
    ``disagreements`` those whose two top-10 sets differ; ``overlap`` the mean share of the
    top 10 the two runs have in common; ``source_found`` how often the source item was in the
    keyword-heavy / vector-heavy top 10 (how well the pseudo-queries describe their item);
    ``skipped`` why a disagreeing query gave no triple.
    """

    queries: int = 0
    disagreements: int = 0
    triples: list[Triple] = field(default_factory=list)
    held_out: list[PseudoQuery] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    by_kind: dict[str, dict[str, int]] = field(default_factory=dict)
    candidates: dict[str, int] = field(default_factory=dict)
    overlap_sum: float = 0.0
    source_found: dict[str, int] = field(default_factory=lambda: {"keyword": 0, "vector": 0, "of": 0})
    seconds: float = 0.0

    @property
    def overlap(self) -> float:
        return self.overlap_sum / self.queries if self.queries else 0.0

    @property
    def disagreement_rate(self) -> float:
        return self.disagreements / self.queries if self.queries else 0.0

    def summary(self) -> str:
        kinds = ", ".join(
            f"{k}: {v['queries']} queries, {v['disagreements']} disagree, {v['triples']} triples"
            for k, v in self.by_kind.items()
        )
        return (
            f"mined {self.queries} queries in {self.seconds:.1f} s: {self.disagreements} disagree "
            f"({self.disagreement_rate:.1%}, top-10 overlap {self.overlap:.0%}), {len(self.triples)} triples, {len(self.held_out)} "
            f"held out" + (f" [{kinds}]" if kinds else "")
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "queries": self.queries,
            "disagreements": self.disagreements,
            "disagreement_rate": round(self.disagreement_rate, 4),
            "top10_overlap": round(self.overlap, 4),
            "source_found": dict(self.source_found),
            "triples": len(self.triples),
            "held_out": len(self.held_out),
            "skipped": dict(self.skipped),
            "by_kind": self.by_kind,
            "candidates": self.candidates,
            "seconds": round(self.seconds, 2),
        }


# -- queries ---------------------------------------------------------------------------------
def first_sentence(text: str) -> tuple[str, str]:
    """``(first sentence, rest)`` of a text, whitespace flattened."""
    flat = " ".join(text.split())
    parts = _SENTENCE_END.split(flat, maxsplit=1)
    return (parts[0], parts[1] if len(parts) > 1 else "")


def title_query(heading: str) -> str:
    """The query a heading path gives: its last two levels."""
    return " ".join(p.strip() for p in heading.split(_HEADING_SEP)[-2:] if p.strip())


def _words(text: str) -> int:
    return len(text.split())


def held_out(item_id: int, share: float, seed: int) -> bool:
    """Whether ``item_id`` is held out for the gate (a seeded hash, stable across runs)."""
    if share <= 0:
        return False
    digest = hashlib.blake2b(f"{seed}:{item_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64 < share


@dataclass(frozen=True)
class _Row:
    id: int
    heading: str
    text: str
    kind: str
    group: str  # source or document of the item, for siblings


def _rows(db: Database, namespace: str | None) -> list[_Row]:
    rows = tuning_rows.live_texts(db, namespace)
    return [_Row(int(r[0]), r[1] or "", r[2], r[3], r[4]) for r in rows]


def pseudo_queries(
    db: Database,
    sources: Sequence[str] = ("title", "first_sentence"),
    *,
    namespace: str | None = None,
    log_limit: int = 2000,
) -> list[PseudoQuery]:
    """Every query the memory offers from ``sources`` (see the module docstring), deduplicated."""
    bad = [s for s in sources if s not in QUERY_SOURCES]
    if bad or not sources:
        raise ConfigError(f"query source {bad or sources!r} is not one of {', '.join(QUERY_SOURCES)}")
    rows = _rows(db, namespace)
    out: list[PseudoQuery] = []
    seen: set[str] = set()

    def add(q: PseudoQuery) -> None:
        key = q.text.lower()
        if key not in seen:
            seen.add(key)
            out.append(q)

    if "title" in sources:
        share = Counter(r.heading for r in rows if r.heading)
        for r in rows:
            if not r.heading or share[r.heading] > MAX_HEADING_SHARE:
                continue
            query = title_query(r.heading)
            if _words(query) >= 3 and _words(r.text) >= 5:
                add(PseudoQuery(query, "title", r.id, r.text))
    if "first_sentence" in sources:
        for r in rows:
            if r.kind == "code":
                continue
            sentence, rest = first_sentence(r.text)
            if 4 <= _words(sentence) <= 40 and _words(rest) >= 5:
                add(PseudoQuery(sentence, "first_sentence", r.id, embedding_text(r.heading, rest)))
    if "log" in sources and db.table_exists("search_log"):
        for text in search_log.recent_queries(db, log_limit):
            if _words(text) >= 2:
                add(PseudoQuery(str(text), "log", None))
    return out


# -- mining ----------------------------------------------------------------------------------
def embed_queries(embedder: Embedder, texts: Sequence[str], batch: int = 256) -> dict[str, np.ndarray]:
    """Query vectors for ``texts``, batched when the embedder can (one by one otherwise).

    One query at a time is slow on a busy CPU (torch's threads wait on each other for a tiny
    matrix); a batch of 256 short queries costs about as much as a few single ones.
    """
    many = getattr(embedder, "embed_queries", None)
    out: dict[str, np.ndarray] = {}
    unique = list(dict.fromkeys(texts))
    for start in range(0, len(unique), batch):
        part = unique[start : start + batch]
        vecs = many(part) if callable(many) else np.stack([embedder.embed_query(t) for t in part])
        out.update(zip(part, vecs, strict=True))
    return out


class _KnownQueries(EmbedderProxy):
    """An embedder that answers precomputed queries from a table (documents: the inner one)."""

    def __init__(self, inner: Embedder, table: dict[str, np.ndarray]) -> None:
        super().__init__(inner)
        self.table = table

    def embed_documents(self, texts: Sequence[str], progress: Any = None) -> np.ndarray:
        return self.inner.embed_documents(texts, progress)

    def embed_query(self, text: str) -> np.ndarray:
        vec = self.table.get(text)
        return vec if vec is not None else self.inner.embed_query(text)


class PipelineRetriever:
    """BM25 and vector rankings from one run of the search pipeline (its trace keeps both).

    :meth:`prepare` embeds the queries about to be searched in batches first.
    """

    def __init__(self, db: Database, embedder: Embedder, depth: int = DEPTH) -> None:
        from nbmemory.search.config import PipelineConfig
        from nbmemory.search.pipeline import SearchPipeline

        self.db = db
        self.known = _KnownQueries(embedder, {})
        self.pipeline = SearchPipeline(
            db, self.known, PipelineConfig(retrievers=("bm25", "vector"), depth=depth)
        )

    def prepare(self, queries: Sequence[str]) -> None:
        self.known.table.update(embed_queries(self.known.inner, queries))

    def __call__(self, query: str) -> tuple[list[int], list[int]]:
        trace = self.pipeline.run(query, k=TOP).trace
        bm25, vector = trace.stage("bm25"), trace.stage("vector")
        return (list(bm25.output) if bm25 else [], list(vector.output) if vector else [])

    def similarity(self, query: str, ids: Sequence[int]) -> dict[int, float]:
        """Cosine similarity of the query to stored items, with the current model's vectors."""
        from nbmemory.store import vectors

        qvec = self.known.embed_query(query)
        return {i: float(np.dot(v, qvec)) for i, v in vectors.get(self.db, list(ids)).items()}


def pipeline_retriever(db: Database, embedder: Embedder, depth: int = DEPTH) -> PipelineRetriever:
    """A :class:`PipelineRetriever` over ``db`` with ``embedder``."""
    return PipelineRetriever(db, embedder, depth)


def heavy_runs(bm25: Sequence[int], vector: Sequence[int], rrf_k: int = 60) -> tuple[list[int], list[int]]:
    """Top-10 ids of the keyword-heavy and of the vector-heavy fusion of two rankings."""
    rankings = {"bm25": list(bm25), "vector": list(vector)}
    keyword = [i for i, _ in rrf(rankings, k=rrf_k, weights=KEYWORD_HEAVY)[:TOP]]
    vec = [i for i, _ in rrf(rankings, k=rrf_k, weights=VECTOR_HEAVY)[:TOP]]
    return keyword, vec


def choose_negative(
    keyword: Sequence[int], vector: Sequence[int], excluded: Callable[[int], bool]
) -> tuple[int | None, str]:
    """The hard negative of a disagreeing query (rule in the module docstring) and its origin."""
    keyword_set, vector_set = set(keyword), set(vector)
    for i in vector:
        if i not in keyword_set and not excluded(i):
            return i, "vector_only"
    for i in keyword:
        if i not in vector_set and not excluded(i):
            return i, "keyword_only"
    return None, ""


@dataclass
class _Exclusion:
    """Items a query's hard negative may not be (rule in the module docstring)."""

    source_id: int
    source: tuple[str, str, str]  # heading, text, group
    info: dict[int, tuple[str, str, str]]
    held_ids: set[int | None]
    too_close: set[int] = field(default_factory=set)

    def __call__(self, i: int) -> bool:
        if i == self.source_id or i in self.held_ids or i not in self.info or i in self.too_close:
            return True
        heading, text, group = self.info[i]
        src_heading, src_text, src_group = self.source
        sibling = bool(group) and group == src_group and heading == src_heading
        return sibling or text == src_text


def mine_triples(
    db: Database,
    queries: Iterable[PseudoQuery],
    retrieve: Retrieve,
    *,
    hold_out: float = 0.2,
    max_held_out: int = 300,
    max_queries: int | None = None,
    seed: int = 42,
    rrf_k: int = 60,
    negative_margin: float | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> MiningReport:
    """Search every training query twice over (keyword- and vector-heavy) and keep the disagreements.

    Parameters
    ----------
    db:
        The memory's database (item texts for positives and negatives).
    queries:
        From :func:`pseudo_queries`.
    retrieve:
        ``retrieve(query) -> (bm25 ids, vector ids)``, e.g. :func:`pipeline_retriever`.
    hold_out:
        Share of source items whose queries are kept for the gate and never mined.
    max_held_out:
        At most this many held-out queries are kept (a seeded sample).
    max_queries:
        Mine at most this many training queries (a seeded sample); ``None`` mines all.
    seed:
        Seeds the hold-out split and the samples.
    negative_margin:
        Drop a negative candidate whose similarity to the query is at least this share of the
        positive's (0.95 keeps only clearly less similar ones: a guard against "negatives" that
        are relevant too). ``None`` (default) keeps the rule of the module docstring as it is.
        Needs a ``retrieve`` with a ``similarity(query, ids)`` method.
    progress:
        ``progress(done, total)`` every few queries.

    Returns
    -------
    MiningReport
    """
    started = time.perf_counter()
    rng = random.Random(seed)
    report = MiningReport()
    train: list[PseudoQuery] = []
    held: list[PseudoQuery] = []
    for q in queries:
        if q.source_id is not None and held_out(q.source_id, hold_out, seed):
            held.append(q)
        else:
            train.append(q)
    rng.shuffle(held)
    report.held_out = held[:max_held_out]
    held_ids = {q.source_id for q in held}
    rng.shuffle(train)
    if max_queries is not None:
        train = train[:max_queries]

    prepare = getattr(retrieve, "prepare", None)
    if callable(prepare):
        prepare([q.text for q in train])
    info: dict[int, tuple[str, str, str]] = {}

    def lookup(ids: Iterable[int]) -> None:
        missing = [i for i in ids if i not in info]
        if missing:
            for i, h, t, g in tuning_rows.texts_of(db, missing):
                info[int(i)] = (h or "", t, g)

    for n, q in enumerate(train, start=1):
        stats = report.by_kind.setdefault(q.kind, {"queries": 0, "disagreements": 0, "triples": 0})
        stats["queries"] += 1
        report.queries += 1
        bm25, vector = retrieve(q.text)
        keyword_top, vector_top = heavy_runs(bm25, vector, rrf_k)
        if progress is not None and (n % 25 == 0 or n == len(train)):
            progress(n, len(train))
        report.overlap_sum += len(set(keyword_top) & set(vector_top)) / TOP
        if q.source_id is not None:
            report.source_found["of"] += 1
            report.source_found["keyword"] += q.source_id in keyword_top
            report.source_found["vector"] += q.source_id in vector_top
        if set(keyword_top) == set(vector_top):
            continue
        report.disagreements += 1
        stats["disagreements"] += 1
        lookup([*keyword_top, *vector_top] + ([q.source_id] if q.source_id is not None else []))

        source_id = q.source_id
        positive = q.positive
        if source_id is None:
            # A logged query: the best item both runs rank is its positive.
            both = [i for i in vector_top if i in set(keyword_top)]
            if not both:
                report.skipped["log: no item both runs rank"] += 1
                continue
            source_id = both[0]
            h, t, _ = info[source_id]
            positive = embedding_text(h, t)
        if source_id not in info:
            report.skipped["source item gone"] += 1
            continue

        exclusion = _Exclusion(source_id, info[source_id], info, held_ids)
        if negative_margin is not None:
            sims = retrieve.similarity(q.text, [source_id, *keyword_top, *vector_top])  # type: ignore[attr-defined]
            limit = negative_margin * sims.get(source_id, 0.0)
            exclusion.too_close = {i for i, sim in sims.items() if sim >= limit}
        negative_id, origin = choose_negative(keyword_top, vector_top, exclusion)
        if negative_id is None:
            report.skipped["no negative candidate"] += 1
            continue
        neg_heading, neg_text, _ = info[negative_id]
        negative = neg_text if q.kind == "title" else embedding_text(neg_heading, neg_text)
        report.candidates[origin] = report.candidates.get(origin, 0) + 1
        report.triples.append(Triple(q.text, positive, negative, q.kind, source_id, negative_id))
        stats["triples"] += 1
    report.seconds = time.perf_counter() - started
    return report
