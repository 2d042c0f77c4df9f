"""Vector retrieval: nearest stored embeddings to the query's, from the memory-resident index
(:mod:`nbmemory.search.hot`) or, until it serves, through SQL (:mod:`nbmemory.store.vectors`:
exact scan, HNSW, HNSW with a filter, or HNSW falling back to exact).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from nbmemory.search import hot
from nbmemory.search.base import Query, Retrieved
from nbmemory.search.filters import Filters
from nbmemory.store import vectors
from nbmemory.store.db import Database

if TYPE_CHECKING:
    from nbmemory.embed.base import Embedder


class VectorRetriever:
    """Cosine-similarity ranking of the live items matching the filters.

    The trace notes say how the search ran (``method``: ``exact``, ``hnsw``, ``hnsw+filter``,
    ``hnsw->exact``), how long the query embedding took and, under a filter, how many rows match.

    Parameters
    ----------
    db:
        The store to search.
    embedder:
        The model whose vectors the store holds (gives the vector size).
    """

    name = "vector"
    needs_vector = True

    def __init__(self, db: Database, embedder: Embedder) -> None:
        self.db = db
        self.embedder = embedder

    def start(self, query: Query) -> None:
        """Begin the part of the scan that can run while BM25 runs (:meth:`HotIndex.start_scan`),
        when the query's vector is ready and a memory-resident index is built. It reads only what
        no write changes, so it does not take the store's lock (a wait for a write, each time)."""
        index = hot.built(self.db)
        if index is not None and query.ready:
            index.start_scan(query.vector(), query.memo)

    def retrieve(self, query: Query, depth: int, filters: Filters) -> Retrieved:
        """The ``depth`` items nearest the query, scored by cosine similarity."""
        qvec = query.vector()
        found, plan = nearest(self.db, qvec, depth, self.embedder.dim, memo=query.memo, filters=filters)
        notes: dict[str, Any] = {"method": plan.method, "embed_ms": round(query.embed_ms, 2)}
        if plan.matching_rows is not None:
            notes["matching_rows"] = plan.matching_rows
        return Retrieved([(i, 1.0 - d) for i, d in found], notes=notes)


def nearest(
    db: Database,
    query: np.ndarray,
    limit: int,
    dim: int,
    where: str | None = None,
    params: list[Any] | None = None,
    memo: dict[Any, Any] | None = None,
    filters: Filters | None = None,
) -> tuple[list[tuple[int, float]], vectors.VectorPlan]:
    """Top ``limit`` (chunk id, cosine distance) among live chunks matching ``where`` (a condition
    on alias ``c``, chunks; ``None``: every live chunk) or ``filters`` (instead of ``where``),
    as :func:`nbmemory.store.vectors.search` ranks them. ``memo``: one search's store, where the
    memory-resident scan is kept for a deeper pass (:meth:`nbmemory.search.hot.HotIndex.nearest`).

    Filters are evaluated on the memory-resident index's columns when it serves (no SQL:
    :meth:`~nbmemory.search.hot.HotIndex.allowed`); a ``where`` through SQL."""
    if filters is not None:
        where, params = (None, []) if filters.empty else filters.sql()
    params = params or []
    with db.lock:
        index = hot.serving(db)
        if index is not None:
            if filters is not None:
                allowed = index.allowed(db, filters)
            else:
                allowed = None if where is None else index.allowed_sql(db, where, params)
            found = index.nearest(query, limit, allowed, memo)
            matching = None if allowed is None else int(allowed.sum())
            return [(i, 1.0 - sim) for i, sim in found], vectors.VectorPlan("memory", len(found), matching)
    return vectors.search(db, query, limit, dim, where, params)


def stored(db: Database, chunk_ids: list[int]) -> Mapping[int, np.ndarray]:
    """The stored vectors of ``chunk_ids``: from the memory-resident index when it serves, else
    from the table (:func:`nbmemory.store.vectors.get`)."""
    if not chunk_ids:
        return {}
    with db.lock:
        index = hot.serving(db)
        if index is not None:
            return index.vectors(chunk_ids)
    return vectors.get(db, chunk_ids)
