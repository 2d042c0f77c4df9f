"""Keyword retrieval: BM25 over the full-text index (the SQL lives in :mod:`nbmemory.store.fts`),
and the query's symbols, which that index cannot hold (:mod:`nbmemory.search.symbols`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from functools import partial
from typing import Any

from nbmemory.search import hot, symbols
from nbmemory.search.base import Query, Retrieved, ScoreOf
from nbmemory.search.filters import Filters
from nbmemory.store import fts
from nbmemory.store.db import Database

#: Results whose matched terms the trace shows.
DETAIL_TOP = 5


class BM25Retriever:
    """BM25 ranking of the live items matching the filters; refreshes the index first if stale.

    A symbol of the query (``g??``, ``$0``) is one more term, held where it is written as such.

    Parameters
    ----------
    db:
        The store to search.
    symbols:
        Whether the query's symbols count (off: its words only).
    """

    name = "bm25"
    needs_vector = False

    def __init__(self, db: Database, symbols: bool = True) -> None:
        self.db = db
        self.symbols = symbols

    def retrieve(self, query: Query, depth: int, filters: Filters) -> Retrieved:
        """The top ``depth`` items by BM25, with the query terms each one holds."""
        rebuilt = fts.ensure_fresh(self.db)
        terms = fts.query_terms(self.db, query.text)
        where, params = filters.sql()
        held: Mapping[int, AbstractSet[str]]
        score_of: ScoreOf
        wanted = symbols.of_query(query.text) if self.symbols and fts.index_exists(self.db) else []
        if wanted:
            symbols.prepare(self.db)
        keep: Callable[[list[int]], list[int]] | None = None
        with self.db.lock:
            index = hot.serving(self.db)
            if index is not None:
                allowed = index.allowed(self.db, filters)
                ranked, held, every = index.bm25(self.db, terms, depth, allowed, query.memo)
                score_of = every.of
                if allowed is not None:
                    keep = partial(index.kept, allowed)
            else:
                sql_held: dict[int, set[str]] = {}
                held = sql_held
                ranked = fts.search(self.db, terms, depth, where, params, matched=sql_held)
                score_of = partial(self._score_of, terms)
            symbol_idf: dict[str, tuple[float, int]] = {}
            found: dict[str, int] = {}
            if wanted:
                ranked, held, score_of, symbol_idf, found = self._with_symbols(
                    wanted, ranked, held, score_of, depth, where, params, keep
                )
            # Read now, in this hold of the store: fusion needs them, and a search that takes
            # the lock again waits for any write that began meanwhile.
            idf = _idfs(self.db, index, [t for t in terms if t not in symbol_idf])
        notes: dict[str, object] = {
            "terms": terms,
            "index_rebuilt": rebuilt,
            "method": "memory" if index else "sql",
        }
        if found:
            notes["symbols"] = found
        return Retrieved(
            ranked,
            notes=notes,
            detail={i: "holds " + " ".join(sorted(held.get(i, ()))) for i, _ in ranked[:DETAIL_TOP]},
            terms=terms + list(symbol_idf),
            matched=held,
            score_of=score_of,
            symbol_idf=symbol_idf,
            idf=idf,
        )

    def _with_symbols(
        self,
        wanted: list[str],
        ranked: list[tuple[int, float]],
        held: Mapping[int, AbstractSet[str]],
        score_of: ScoreOf,
        depth: int,
        where: str,
        params: list[Any],
        keep: Callable[[list[int]], list[int]] | None = None,
    ) -> tuple[
        list[tuple[int, float]], Mapping[int, AbstractSet[str]], ScoreOf, dict[str, tuple[float, int]], dict[str, int]
    ]:
        """The ranking with each symbol's IDF added to the chunks holding it (those below the cut
        or holding no word of the query come in with their full score), the terms each holds, the
        scorer of chunks below the cut likewise, each held symbol's (IDF, document frequency),
        and every symbol's document frequency (for the trace).

        A symbol no chunk holds is left out of the terms: unlike a word the memory lacks, it may
        be prose punctuation the parse kept, and it must not count as evidence of no answer.
        ``keep``: those of some chunk ids the filters allow (the memory-resident index's mask),
        instead of reading them through ``where``.
        """
        n = float(fts.corpus_size(self.db))
        symbol_idf: dict[str, tuple[float, int]] = {}
        gain: dict[int, float] = {}
        holds: dict[int, set[str]] = {}
        counted = symbols.holders(self.db, wanted, where, params, keep)
        for name, (ids, df) in counted.items():
            if df == 0:
                continue
            symbol_idf[name] = (fts.idf(n, float(df)), df)
            for i in ids:
                gain[i] = gain.get(i, 0.0) + symbol_idf[name][0]
                holds.setdefault(i, set()).add(name)

        def scored(ids: list[int]) -> tuple[dict[int, float], dict[int, set[str]]]:
            got, got_held = score_of(ids) if ids else ({}, {})
            scores, terms_held = dict(got), {i: set(t) for i, t in got_held.items()}
            for i in ids:
                if i in gain:
                    scores[i] = scores.get(i, 0.0) + gain[i]
                    terms_held.setdefault(i, set()).update(holds[i])
            return scores, terms_held

        found = {name: df for name, (_, df) in counted.items()}
        if not gain:
            return ranked, held, scored, symbol_idf, found
        scores = dict(ranked)
        below, below_held = score_of([i for i in gain if i not in scores])
        scores.update(below)
        matched = {**{i: set(t) for i, t in held.items()}, **{i: set(t) for i, t in below_held.items()}}
        for i, value in gain.items():
            scores[i] = scores.get(i, 0.0) + value
            matched.setdefault(i, set()).update(holds[i])
        top = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:depth]
        return top, {i: matched[i] for i, _ in top if i in matched}, scored, symbol_idf, found

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
        return _idfs(db, hot.serving(db), terms)


def _idfs(
    db: Database, index: hot.HotIndex | None, terms: list[str]
) -> tuple[dict[str, tuple[float, int]], float]:
    """:func:`idfs` with the index already at hand (``None``: it does not serve); the caller
    holds the store's lock. No terms: only the IDF of a term no document holds."""
    if not terms:
        return {}, fts.idf(float(fts.corpus_size(db)), 0.0)
    return index.idfs(db, terms) if index is not None else fts.idfs(db, terms)
