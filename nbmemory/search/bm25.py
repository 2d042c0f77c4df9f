"""Keyword retrieval: BM25 over the full-text index (the SQL lives in :mod:`nbmemory.store.fts`)."""

from __future__ import annotations

from functools import partial

from nbmemory.search.base import Query, Retrieved, ScoreOf
from nbmemory.search.filters import Filters
from nbmemory.store import fts, hot
from nbmemory.store.db import Database

#: Results whose matched terms the trace shows.
DETAIL_TOP = 5


class BM25Retriever:
    """BM25 ranking of the live items matching the filters; refreshes the index first if stale.

    Parameters
    ----------
    db:
        The store to search.
    """

    name = "bm25"
    needs_vector = False

    def __init__(self, db: Database) -> None:
        self.db = db

    def retrieve(self, query: Query, depth: int, filters: Filters) -> Retrieved:
        """The top ``depth`` items by BM25, with the query terms each one holds."""
        rebuilt = fts.ensure_fresh(self.db)
        terms = fts.query_terms(self.db, query.text)
        where, params = filters.sql()
        held: dict[int, set[str]] = {}
        score_of: ScoreOf
        with self.db.lock:
            index = hot.serving(self.db)
            if index is not None:
                allowed = None if filters.empty else index.allowed(self.db, where, params)
                ranked, held, every = index.bm25(self.db, terms, depth, allowed)
                score_of = every.of
            else:
                ranked = fts.search(self.db, terms, depth, where, params, matched=held)
                score_of = partial(self._score_of, terms)
        return Retrieved(
            ranked,
            notes={"terms": terms, "index_rebuilt": rebuilt, "method": "memory" if index else "sql"},
            detail={i: "holds " + " ".join(sorted(held.get(i, ()))) for i, _ in ranked[:DETAIL_TOP]},
            terms=terms,
            matched=held,
            score_of=score_of,
        )

    def _score_of(self, terms: list[str], ids: list[int]) -> tuple[dict[int, float], dict[int, set[str]]]:
        """BM25 scores of given items (through SQL), and the query terms each holds."""
        if not ids:
            return {}, {}
        held: dict[int, set[str]] = {}
        with self.db.lock:
            ranked = fts.search(self.db, terms, len(ids), "c.id IN (SELECT unnest(?::BIGINT[]))", [ids], held)
        return dict(ranked), held


def idfs(db: Database, terms: list[str]) -> tuple[dict[str, tuple[float, int]], float]:
    """``({term: (IDF, document frequency)}, IDF of a term no document holds)``: the IDFs BM25
    scores with, from the memory-resident index when it serves (:func:`nbmemory.store.fts.idfs`)."""
    with db.lock:
        index = hot.serving(db)
        if index is not None:
            return index.idfs(db, terms)
    return fts.idfs(db, terms)
