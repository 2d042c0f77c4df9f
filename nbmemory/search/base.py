"""The two roles of a search: the retriever (a query in, a ranking of stored items out) and
fusion (the retrievers' rankings in, one ranking out).

:class:`BM25Retriever` (:mod:`nbmemory.search.bm25`) and :class:`VectorRetriever`
(:mod:`nbmemory.search.vector`) fill the first; :class:`ConvexFusion`
(:mod:`nbmemory.search.convex`) and :class:`RRFFusion` (:mod:`nbmemory.search.rrf`) the second.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from nbmemory.search.filters import Filters

if TYPE_CHECKING:
    from nbmemory.embed.base import Embedder
    from nbmemory.search.adaptive import QueryEvidence
    from nbmemory.search.trace import Trace

_EMBED_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nbmemory-embed")
#: With cores to spare the query embedding (torch, outside the GIL) runs while BM25 runs in
#: DuckDB; with 2 cores or fewer the two compete for them, and both finish later than one after the other.
OVERLAP_EMBEDDING = (os.cpu_count() or 1) > 2


def _timed_embed(embedder: Embedder, text: str) -> tuple[np.ndarray, float]:
    started = time.perf_counter()
    vec = embedder.embed_query(text)
    return vec, (time.perf_counter() - started) * 1000


class Query:
    """The text searched for and, when an embedder is given, its embedding.

    The embedding starts when the query is made: in the background where cores allow, so that
    it runs while BM25 runs; :meth:`vector` waits for it.

    Parameters
    ----------
    text:
        The query text.
    embedder:
        Embeds the query for the retrievers that need a vector; ``None`` when none runs.
    """

    def __init__(self, text: str, embedder: Embedder | None = None) -> None:
        self.text = text
        #: How long the embedding took, once :meth:`vector` returned.
        self.embed_ms = 0.0
        #: What retrievers computed for this query before their cut (every row's score), kept
        #: for a deeper pass of the same search, which then only cuts deeper.
        self.memo: dict[Any, Any] = {}
        self._pending: Future[tuple[np.ndarray, float]] | None = None
        if embedder is None:
            return
        if OVERLAP_EMBEDDING:
            self._pending = _EMBED_POOL.submit(_timed_embed, embedder, text)
        else:
            self._pending = Future()
            self._pending.set_result(_timed_embed(embedder, text))

    @property
    def ready(self) -> bool:
        """Whether the embedding is there without waiting."""
        return self._pending is not None and self._pending.done()

    @property
    def embedded(self) -> bool:
        """Whether the query has (or is computing) an embedding."""
        return self._pending is not None

    def vector(self) -> np.ndarray:
        """The query embedding, waiting for it if it is still being computed."""
        if self._pending is None:
            raise ValueError(f"query {self.text[:40]!r} has no embedding: make the Query with an embedder")
        vec, self.embed_ms = self._pending.result()
        return vec


#: Item ids -> (their scores, the query terms each holds), for items a retriever ranked below its cut.
ScoreOf = Callable[[list[int]], tuple[dict[int, float], Mapping[int, AbstractSet[str]]]]


@dataclass
class Retrieved:
    """One retriever's answer to one query.

    Parameters
    ----------
    ranked:
        (item id, score) best first; the score is the retriever's own (BM25 score, cosine
        similarity), higher is better.
    notes:
        What the trace shows about how the retrieval ran.
    detail:
        Per item, a line for the trace (``explain``).
    terms:
        The query terms looked up (a lexical retriever; empty otherwise).
    matched:
        Per returned item, which of ``terms`` it holds: the evidence adaptive fusion weighs.
    score_of:
        The retriever's score of items below its cut (those another retriever found), and the
        terms each holds; ``None`` when it cannot tell.
    symbol_idf:
        The terms of ``terms`` that are symbols (:mod:`nbmemory.search.symbols`), not in the
        index -> (IDF, document frequency) as the retriever counted them.
    idf:
        The other terms -> (IDF, document frequency), and the IDF of a term no item holds, read
        in the same hold of the store as the scores; ``None`` when the retriever did not read
        them (:func:`nbmemory.search.evidence.query_idfs` reads them then).
    """

    ranked: list[tuple[int, float]]
    notes: dict[str, Any] = field(default_factory=dict)
    detail: dict[int, str] = field(default_factory=dict)
    terms: list[str] = field(default_factory=list)
    matched: Mapping[int, AbstractSet[str]] = field(default_factory=dict)
    score_of: ScoreOf | None = None
    symbol_idf: dict[str, tuple[float, int]] = field(default_factory=dict)
    idf: tuple[dict[str, tuple[float, int]], float] | None = None

    # ``ranked`` is not changed once made (``dataclasses.replace`` makes another answer), so its
    # ids and scores are made once: fusion asks for them once per candidate.
    @functools.cached_property
    def ids(self) -> list[int]:
        return [i for i, _ in self.ranked]

    @functools.cached_property
    def scores(self) -> dict[int, float]:
        return dict(self.ranked)

    @functools.cached_property
    def ranks(self) -> dict[int, int]:
        """Item -> its 1-based rank (fusion and hydration both read them)."""
        return dict(zip(self.ids, range(1, len(self.ids) + 1), strict=True))


@runtime_checkable
class Retriever(Protocol):
    """Ranks live stored items for a query.

    ``name`` keys its ranking in fusion and names its stage in the trace; ``needs_vector`` says
    it reads ``query.vector()`` (the pipeline then starts the embedding before any retriever runs).
    """

    name: str
    needs_vector: bool

    def retrieve(self, query: Query, depth: int, filters: Filters) -> Retrieved:
        """The best ``depth`` items matching ``filters``, best first."""
        ...


#: (item id, score) best first: what fusion puts out and every later stage passes on.
Ranked = list[tuple[int, float]]


@runtime_checkable
class Fusion(Protocol):
    """Fuses the retrievers' rankings into one, cut to the pool the later stages read.

    ``name`` names its stage in the trace. The pipeline picks one by ``PipelineConfig.fusion``.
    """

    name: str

    def __call__(
        self,
        query: Query,
        found: dict[str, Retrieved],
        k: int,
        trace: Trace,
        pool_size: int,
        filters: Filters,
    ) -> tuple[QueryEvidence | None, Ranked]:
        """The query's lexical evidence (``None`` without BM25) and the fused ranking, best first,
        at most ``pool_size`` long, recorded as one stage of ``trace``.

        ``found`` is each retriever's answer, by name; ``k`` bounds the items the stage explains
        one by one; ``filters`` are the search's, which candidates a fusion adds (a turn's
        neighbours) must match too.
        """
        ...


def retriever_ranks(found: Mapping[str, Retrieved]) -> dict[str, dict[int, int]]:
    """Retriever -> item -> its 1-based rank there."""
    return {name: got.ranks for name, got in found.items()}


def retriever_scores(found: Mapping[str, Retrieved]) -> dict[str, dict[int, float]]:
    """Retriever -> item -> the retriever's own score."""
    return {name: got.scores for name, got in found.items()}
