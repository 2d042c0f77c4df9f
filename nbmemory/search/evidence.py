"""What BM25's answer says about a query: its terms' IDFs and the lexical evidence that sets the
fusion weights (:mod:`nbmemory.search.adaptive`) and feeds the no-answer flag."""

from __future__ import annotations

from nbmemory.search import adaptive
from nbmemory.search.adaptive import QueryEvidence
from nbmemory.search.base import Retrieved
from nbmemory.search.bm25 import idfs as bm25_idfs
from nbmemory.store import fts
from nbmemory.store.db import Database


def query_idfs(db: Database, bm25: Retrieved) -> tuple[dict[str, tuple[float, int]], float]:
    """BM25's query terms -> (IDF, document frequency), symbols as the retriever counted
    them, and the IDF of a term no item holds."""
    # Read by the retriever with its scores; else now (symbols are not in the index).
    idf, unseen = bm25.idf or bm25_idfs(db, [t for t in bm25.terms if t not in bm25.symbol_idf])
    return {**idf, **bm25.symbol_idf}, unseen


def lexical_evidence(db: Database, query: str, bm25: Retrieved | None, strength: float) -> QueryEvidence | None:
    """Lexical evidence and adaptive weights; None when BM25 did not run."""
    if bm25 is None:
        return None
    idf, unseen = query_idfs(db, bm25) if bm25.terms else ({}, 0.0)
    term_of = {name: fts.query_terms(db, name) for name in adaptive.identifiers(query)}
    # A symbol is an identifier too (an embedding cannot see it), with itself among its terms.
    term_of.update({name: [*fts.query_terms(db, name), name] for name in bm25.symbol_idf})
    top = bm25.ids[:5]
    return adaptive.fusion_weights(
        query,
        idf,
        unseen,
        [bm25.matched.get(i, set()) for i in top],
        term_of,
        strength=strength,
    )
