"""Vector retrieval: nearest stored embeddings to the query's (the SQL lives in
:mod:`nbmemory.store.vectors`: exact scan, HNSW, HNSW with a filter, or HNSW falling back to exact).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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

    def retrieve(self, query: Query, depth: int, filters: Filters) -> Retrieved:
        """The ``depth`` items nearest the query, scored by cosine similarity."""
        qvec = query.vector()
        where, params = filters.sql()
        found, plan = vectors.search(
            self.db, qvec, depth, self.embedder.dim, None if filters.empty else where, params, query.memo
        )
        notes: dict[str, Any] = {"method": plan.method, "embed_ms": round(query.embed_ms, 2)}
        if plan.matching_rows is not None:
            notes["matching_rows"] = plan.matching_rows
        return Retrieved([(i, 1.0 - d) for i, d in found], notes=notes)
