"""Memory-resident copies of what a search reads: the vectors as one matrix, BM25 postings as arrays.

DuckDB stays the store of record, and its ``fts`` extension builds the index these postings come
from (:mod:`nbmemory.store.fts`). A search through SQL pays a fixed cost per statement and scores
BM25 with a join that grows with the memory; the same scores from arrays held in the process, and
an exact cosine scan of the vectors as one matrix, cost a small fraction of that. So a search is
served from here once the copies are built, and through SQL until then (and when
``NBMEMORY_HOT=0``): both give the same rankings (``tests/search/test_hot.py``).

Keeping in step: only this process writes the file (DuckDB's lock). Every write path tells the
store which chunks it wrote or deleted (:meth:`~nbmemory.store.db.Database.chunks_written`), and
the store tells the index held in ``db.cache`` (:meth:`HotIndex.chunks_written`); the next search re-reads those chunks'
vectors, liveness and BM25 delta postings before it runs (its cost follows the chunks written,
not the delta's size). A change of everything (an FTS
snapshot rebuild, a re-embed swap, a rolled-back transaction, which clears ``db.cache``) drops
the copies; they are rebuilt in a background thread while searches use SQL, so no search or
write waits for a rebuild.

Filters are evaluated on columns held here too (namespace, kind, source, tags, times, speaker,
conversation: :mod:`nbmemory.search.filter_mask`), so a filtered search reads no row through SQL
either; they follow the writes the same way, and :meth:`~nbmemory.store.db.Database.rows_changed`
(every statement that updates chunks calls it) names the chunks whose columns alone changed.

Scores are those of :func:`nbmemory.store.fts.search` (BM25 over the snapshot for chunks written
before its watermark, over the delta for later ones, IDFs over both) and exact cosine similarity.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np

from nbmemory import long_lived
from nbmemory.search import filter_mask
from nbmemory.search import screen as screen_mod
from nbmemory.search.filters import Filters
from nbmemory.store import fts, index_reads, vectors
from nbmemory.store import rows as row_store
from nbmemory.store.db import INDEX_KEY as _KEY
from nbmemory.store.db import Database
from nbmemory.store.vectors import cosine64

#: Up to this many chunks the copies are built in the search that first needs them (a few
#: tens of milliseconds); above it in a background thread while SQL serves.
SYNC_BUILD_ROWS = 20_000


@dataclass
class _Delta:
    """The BM25 delta as the search reads it: per term, the rows holding it and their weighted tf
    (with the length of each), and per term the chunks holding it (purged ones too, as in SQL)."""

    postings: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)
    df: dict[str, int] = field(default_factory=dict)
    #: The terms of each chunk in the delta: what a write of it takes out again.
    of_chunk: dict[int, list[str]] = field(default_factory=dict)


#: Query terms up to which :meth:`BM25Scores.matched` codes each row's terms as bits of an int64.
_MAX_CODED_TERMS = 62


@dataclass
class BM25Scores:
    """One query's BM25 score of every row of a :class:`HotIndex` (0 where a row holds no query
    term or is not allowed), kept after the cut to the top so that fusion can read the score of
    a candidate only the vector side found. It holds the index's arrays as they were when
    scored: later writes, which replace those arrays, do not change it."""

    ids: np.ndarray
    scores: np.ndarray
    holds: np.ndarray
    term_rows: dict[str, np.ndarray]
    #: Per row, the query terms it holds as bits (``term_rows``' order): made at the first
    #: :meth:`matched`, once per query, so that each later one reads only its rows.
    _codes: np.ndarray | None = field(default=None, repr=False)

    @classmethod
    def empty(cls) -> BM25Scores:
        return cls(np.empty(0, dtype=np.int64), np.empty(0), np.empty(0, dtype=bool), {})

    def matched(self, rows: np.ndarray) -> dict[int, frozenset[str]]:
        """Chunk id -> the query terms it holds, for ``rows`` that hold any. Rows holding the
        same terms share one (immutable) set: each row's terms are bits of one integer, and a
        set is made per distinct integer (a few per query), not per row. Cost: linear in
        ``rows`` (and, once per query, in the postings of its terms)."""
        terms = list(self.term_rows)
        if len(terms) > _MAX_CODED_TERMS:
            return self._matched_by_term(rows)
        if self._codes is None:
            self._codes = np.zeros(len(self.ids), dtype=np.int64)
            for bit, held in enumerate(self.term_rows.values()):
                self._codes[held] |= np.int64(1) << bit
        codes = self._codes[rows]
        holding = codes != 0
        codes = codes[holding]
        sets = {c: frozenset(t for bit, t in enumerate(terms) if c >> bit & 1) for c in set(codes.tolist())}
        return dict(zip(self.ids[rows[holding]].tolist(), map(sets.__getitem__, codes.tolist()), strict=True))

    def _matched_by_term(self, rows: np.ndarray) -> dict[int, frozenset[str]]:
        """:meth:`matched` one term at a time (a query of more terms than an integer's bits)."""
        matched: dict[int, set[str]] = {}
        flags = np.zeros(len(self.ids), dtype=bool)
        for term, held in self.term_rows.items():
            flags[held] = True
            for chunk_id in self.ids[rows[flags[rows]]].tolist():
                matched.setdefault(chunk_id, set()).add(term)
            flags[held] = False
        return {i: frozenset(t) for i, t in matched.items()}

    def of(self, chunk_ids: list[int]) -> tuple[dict[int, float], dict[int, frozenset[str]]]:
        """The score of each of ``chunk_ids`` that holds a query term, and the terms it holds."""
        if len(self.ids) == 0 or not chunk_ids:
            return {}, {}
        wanted = np.asarray(chunk_ids, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.ids, wanted), len(self.ids) - 1)
        rows = at[(self.ids[at] == wanted) & self.holds[at]]
        return dict(zip(self.ids[rows].tolist(), self.scores[rows].tolist(), strict=True)), self.matched(rows)


class HotIndex:
    """Arrays over every chunk (live or not), row ``r`` holding chunk ``ids[r]``; ids ascend.

    Built by :meth:`build` from the store; kept in step by :meth:`sync`; read by :meth:`bm25`,
    :meth:`nearest` and :meth:`vectors`. Callers hold ``db.lock``.
    """

    def __init__(self) -> None:
        self.ready = False
        self.rebuilds = -1  # db.rebuilds when built: a later rebuild of everything makes this stale
        self.error: str | None = None
        self.build_ms = 0.0
        self.pending: set[int] = set()
        #: Chunks whose other columns changed (tags, times: :meth:`rows_changed`): the next
        #: :meth:`sync` reads their filter columns again; ``all_rows_changed``: every chunk's.
        self.pending_rows: set[int] = set()
        self.all_rows_changed = False
        #: The vectors of chunks in ``pending`` as their writer gave them (:meth:`chunks_written`): a sync
        #: takes them from here instead of reading the table.
        self.pending_vectors: dict[int, np.ndarray] = {}
        self.ids = np.empty(0, dtype=np.int64)
        self.live = np.empty(0, dtype=bool)
        self.snapshot = np.empty(0, dtype=bool)  # scored from the FTS snapshot (seq <= watermark)
        self.mat = np.empty((0, 0), dtype=np.float32)
        #: The matrix's buffer: ``mat`` is its first ``n`` rows; the rest are zeros for new chunks.
        self._mat_rows = self.mat
        self.inv_norm = np.empty(0, dtype=np.float32)  # 0 where a chunk has no vector (or a zero one)
        self.has_vec = np.empty(0, dtype=bool)
        self.n = 0
        self.terms: dict[str, tuple[int, int]] = {}  # snapshot term -> (term id, df)
        self.offsets = np.zeros(1, dtype=np.int64)
        self.post_rows = np.empty(0, dtype=np.int64)
        self.post_tf = np.empty(0, dtype=np.float64)
        self.post_len = np.empty(0, dtype=np.float64)
        self.delta = _Delta()
        #: What filters read, per row (:mod:`nbmemory.search.filter_mask`).
        self.columns = filter_mask.Columns()
        self.ivf: _Ivf | None = None
        self.screen: screen_mod.Screen | None = None
        #: Rows written while the screen is built in the background (:meth:`_start_screen`).
        self._screen_touched: set[int] | None = None

    # -- building ---------------------------------------------------------------------------
    def build(self, db: Database, late_screen: bool = False) -> None:
        """Read everything: chunks, vectors, snapshot postings, delta, and (for a memory of up
        to :data:`~nbmemory.store.rows.PRELOAD_MAX` chunks) every live row.

        ``late_screen``: the int8 screen (from :data:`~nbmemory.search.screen.MIN_ROWS` rows) is
        built afterwards on a thread of its own (:meth:`_start_screen`), not here: for a build
        inside a search, which would wait for it.

        The reads run in a transaction of their own cursor, begun under the store's lock (no
        write in flight: writers hold it for their whole transaction), so searches and writes go
        on while it reads; writes committed after its start are noted and applied by :meth:`sync`.
        """
        started = time.perf_counter()
        with db.lock:
            self.pending.clear()
            self.pending_vectors.clear()
            self.pending_rows.clear()
            self.all_rows_changed = False
            self.rebuilds = db.rebuilds
            mark = fts.watermark(db)
            has_fts = fts.index_exists(db)
            has_delta = has_fts and fts.corpus_stats(db)[2] > 0
            has_vectors = db.table_exists("vectors")
            epoch = db.row_epoch
            db.cache.pop("preloaded_rows", None)
            db.dirty_rows.clear()
            con = db.snapshot()
        try:
            self.columns = filter_mask.Columns(filter_mask.Columns.present_in(con))
            chunks = index_reads.chunk_flags(con, self.columns.select())
            self.ids = chunks.column("id").to_numpy().astype(np.int64)
            self.n = len(self.ids)
            self.live = chunks.column("live").to_numpy(zero_copy_only=False).astype(bool)
            seq = chunks.column("seq").to_numpy(zero_copy_only=False)
            self.snapshot = (seq <= mark) & self.live
            self.columns.read(chunks)
            self._read_vectors(con, has_vectors)
            self.ivf = _Ivf.build(self) if self.n > ANN_MIN_ROWS else None
            screened = screen_mod.ENABLED and screen_mod.MIN_ROWS <= self.n <= ANN_MIN_ROWS
            self.screen = screen_mod.Screen.build(self.mat, self.inv_norm) if screened and not late_screen else None
            self._read_postings(con, has_fts)
            self._read_delta(con, has_delta)
            preloaded = row_store.read_all(con) if self.n <= row_store.PRELOAD_MAX else None
        finally:
            con.close()
        if preloaded is not None:
            row_store.install(db, preloaded, epoch)
        filter_mask.prepare()
        self.build_ms = (time.perf_counter() - started) * 1000
        self.ready = True
        if screened and late_screen:
            self._start_screen(db)
        long_lived.settle()  # the terms and rows just read: no full collection walks them again

    def _read_vectors(self, con: Any, has_vectors: bool) -> None:
        self.mat = self._mat_rows = np.zeros((self.n, 0), dtype=np.float32)
        self.inv_norm = np.zeros(self.n, dtype=np.float32)
        self.has_vec = np.zeros(self.n, dtype=bool)
        if not has_vectors:
            return
        table = index_reads.vector_table(con)
        dim = int(table.schema.field("vec").type.list_size)
        self.mat = self._mat_rows = np.zeros((self.n, dim), dtype=np.float32)
        if table.num_rows == 0 or self.n == 0:
            return
        ids = table.column("chunk_id").to_numpy()
        flat = table.column("vec").combine_chunks().flatten().to_numpy(zero_copy_only=False)
        vecs = flat.astype(np.float32, copy=False).reshape(table.num_rows, dim)
        rows, found = self.rows_of(ids)
        self._put_vectors(rows[found], vecs[found])

    def _put_vectors(self, rows: np.ndarray, vecs: np.ndarray) -> None:
        self.mat[rows] = vecs
        self.has_vec[rows] = True
        norms = np.linalg.norm(vecs, axis=1)
        self.inv_norm[rows] = np.where(norms > 0, 1.0 / np.maximum(norms, 1e-30), 0.0)

    def _read_postings(self, con: Any, has_fts: bool) -> None:
        self.terms, self.offsets = {}, np.zeros(1, dtype=np.int64)
        self.post_rows = np.empty(0, dtype=np.int64)
        if not has_fts:
            return
        self.terms = {
            str(term): (int(tid), int(df))
            for term, tid, df in index_reads.terms(con)
        }
        # fts_postings is sorted by (termid, chunk_id): one CSR row per term id.
        post = index_reads.postings(con)
        termids = post.column("termid").to_numpy()
        rows, found = self.rows_of(post.column("chunk_id").to_numpy())
        size = (max(tid for tid, _ in self.terms.values()) + 1) if self.terms else 0
        size = max(size, int(termids.max()) + 1 if len(termids) else 0)
        self.offsets = np.zeros(size + 1, dtype=np.int64)
        np.cumsum(np.bincount(termids, minlength=size), out=self.offsets[1:])
        # A chunk purged since the snapshot keeps its postings there: row -1, never scored.
        self.post_rows = np.where(found, rows, -1)
        self.post_tf = post.column("tf").to_numpy().astype(np.float64)
        self.post_len = post.column("len").to_numpy().astype(np.float64)

    def _read_delta(self, con: Any, has_delta: bool) -> None:
        self.delta = _Delta()
        if has_delta:
            self._add_delta(con, None)

    def _add_delta(self, con: Any, chunk_ids: list[int] | None) -> None:
        """Add the delta postings of ``chunk_ids`` (all when None) as the table holds them now.
        Linear in the postings read."""
        table = index_reads.delta_postings(con, chunk_ids)
        if not table.num_rows:
            return
        # One string object per term, shared by every posting's entry in ``of_chunk``.
        terms = [sys.intern(t) for t in table.column("term").to_pylist()]
        chunks = table.column("chunk_id").to_numpy()
        rows, found = self.rows_of(chunks)
        tfs = table.column("tf").to_numpy()
        lengths = index_reads.delta_lengths(con, chunk_ids)
        length = np.zeros(len(chunks), dtype=np.float64)
        by_chunk = dict(zip(lengths.column("chunk_id").to_pylist(), lengths.column("len").to_pylist(), strict=True))
        length[:] = [by_chunk.get(c, 0) for c in chunks.tolist()]
        delta = self.delta
        for term, chunk in zip(terms, chunks.tolist(), strict=True):
            delta.of_chunk.setdefault(chunk, []).append(term)
        start = 0
        for end in range(1, len(terms) + 1):
            if end == len(terms) or terms[end] != terms[start]:
                keep = found[start:end]
                add = (rows[start:end][keep], tfs[start:end][keep], length[start:end][keep])
                term = terms[start]
                held = delta.postings.get(term)
                if held is not None:
                    add = (
                        np.concatenate([held[0], add[0]]),
                        np.concatenate([held[1], add[1]]),
                        np.concatenate([held[2], add[2]]),
                    )
                delta.postings[term] = add
                delta.df[term] = delta.df.get(term, 0) + end - start
                start = end

    def _drop_delta(self, chunk_ids: list[int]) -> None:
        """Take the delta postings of ``chunk_ids`` out (one filter per term they hold)."""
        delta = self.delta
        gone: dict[str, list[int]] = {}
        for chunk in chunk_ids:
            for term in delta.of_chunk.pop(chunk, ()):
                gone.setdefault(term, []).append(chunk)
        for term, chunks in gone.items():
            left = delta.df[term] - len(chunks)
            if left <= 0:
                delta.postings.pop(term, None)
                delta.df.pop(term, None)
                continue
            delta.df[term] = left
            held = delta.postings.get(term)
            if held is not None:
                at, found = self.rows_of(np.asarray(chunks, dtype=np.int64))
                keep = ~np.isin(held[0], at[found])
                delta.postings[term] = (held[0][keep], held[1][keep], held[2][keep])

    def _start_screen(self, db: Database) -> None:
        """Build the screen in the background; the float32 scan serves meanwhile. The rows that
        writes change during the build (:meth:`sync` notes them in ``_screen_touched``) may be
        read half written: once it is built they are marked stale, i.e. scanned exactly."""
        touched: set[int] = set()
        self._screen_touched = touched
        mat, inv_norm = self.mat, self.inv_norm

        def run() -> None:
            try:
                built = screen_mod.Screen.build(mat, inv_norm)
            except Exception:  # an optimisation: the float32 scan keeps serving
                built = None
            with db.lock:
                if self._screen_touched is not touched:
                    return
                self._screen_touched = None
                if built is not None:
                    built.stale[[r for r in touched if r < built.n]] = True
                    self.screen = built

        threading.Thread(target=run, name="nbmemory-screen-build", daemon=True).start()

    # -- keeping in step --------------------------------------------------------------------
    def sync(self, db: Database) -> bool:
        """Apply the writes noted since the last search. False when they need a rebuild instead."""
        if self.all_rows_changed:
            return False
        if not self.pending and not self.pending_rows:
            return True
        changed = np.array(sorted(self.pending), dtype=np.int64)
        # Chunks whose filter columns alone changed are read in the same statement.
        also = sorted(self.pending_rows - self.pending)
        self.pending.clear()
        self.pending_rows.clear()
        self.columns.masks.clear()  # liveness or the filter columns change below
        self.columns.derived.clear()
        table = index_reads.chunk_flags_of(db, self.columns.select(), changed.tolist() + also)
        read_ids = table.column("id").to_numpy().astype(np.int64)
        state = dict(
            zip(
                read_ids.tolist(),
                zip(table.column("live").to_pylist(), table.column("seq").to_pylist(), strict=True),
                strict=True,
            )
        )
        new = np.array(sorted(i for i in changed.tolist() if i in state and i > (self.ids[-1] if self.n else -1)))
        if len(new):
            self._grow(new.astype(np.int64))
        at_read, found_read = self.rows_of(read_ids)
        if not found_read.all():
            return False  # a chunk this index never saw (below the newest one, or not written through it)
        self.columns.put(at_read, table)
        if not len(changed):
            return True  # only filter columns changed: no vector, liveness or posting to read
        at, found = self.rows_of(changed)
        mark = fts.watermark(db)
        for chunk_id, row, ok in zip(changed.tolist(), at.tolist(), found.tolist(), strict=True):
            if not ok:
                continue
            live, seq = state.get(chunk_id, (False, 0))
            self.live[row] = live
            self.snapshot[row] = live and seq <= mark
        if self.ivf is not None:
            self.ivf.stale[at[found & (at < len(self.ivf.stale))]] = True
            if self.ivf.drift(self.n) > IVF_MAX_DRIFT:
                return False
        if self.screen is not None:
            self.screen.stale[at[found & (at < self.screen.n)]] = True
            if self.screen.drift(self.n) > screen_mod.MAX_DRIFT:
                return False
        if self._screen_touched is not None:
            self._screen_touched.update(at[found].tolist())
        # A deleted or forgotten chunk has no vector: only live ones are read, those their writer
        # gave from memory, the rest from the table.
        live_ids = [i for i in changed.tolist() if state.get(i, (False, 0))[0]]
        given = {i: self.pending_vectors[i] for i in live_ids if i in self.pending_vectors}
        self.pending_vectors.clear()
        fresh = vectors.get(db, [i for i in live_ids if i not in given])
        fresh.update(given)
        self.inv_norm[at[found]] = 0.0  # a forgotten chunk's vector is deleted with it
        self.has_vec[at[found]] = False
        if fresh:
            got = np.array(list(fresh), dtype=np.int64)
            at_got, ok_got = self.rows_of(got)
            if self.mat.shape[1] == 0 or not ok_got.all():
                return False
            self._put_vectors(at_got, np.stack([fresh[int(i)] for i in got]))
        # The delta: only the changed chunks' postings are read again. Should that fail half
        # done, the copies are built again from the store (False) rather than kept short.
        try:
            self._drop_delta(changed.tolist())
            if fts.index_exists(db) and fts.corpus_stats(db)[2] > 0:
                self._add_delta(db.con, changed.tolist())
        except duckdb.Error:
            return False
        return True

    def _grow(self, new_ids: np.ndarray) -> None:
        count = len(new_ids)
        self.ids = np.concatenate([self.ids, new_ids])
        self.columns.grow(count)
        self.live = np.concatenate([self.live, np.zeros(count, dtype=bool)])
        self.snapshot = np.concatenate([self.snapshot, np.zeros(count, dtype=bool)])
        # The matrix grows into spare rows (zeros), so a write of a few chunks does not copy it.
        n, spare = self.n + count, self._mat_rows
        if spare.shape[0] < n or spare.shape[1] != self.mat.shape[1]:
            spare = np.zeros((n + n // 4 + 1024, self.mat.shape[1]), dtype=np.float32)
            spare[: self.n] = self.mat
            self._mat_rows = spare
        self.mat = spare[:n]
        self.inv_norm = np.concatenate([self.inv_norm, np.zeros(count, dtype=np.float32)])
        self.has_vec = np.concatenate([self.has_vec, np.zeros(count, dtype=bool)])
        self.n = len(self.ids)

    def rows_of(self, chunk_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row of each chunk id, whether this index holds it)."""
        ids = np.asarray(chunk_ids, dtype=np.int64)
        if self.n == 0:
            return np.zeros(len(ids), dtype=np.int64), np.zeros(len(ids), dtype=bool)
        at = np.searchsorted(self.ids, ids)
        at = np.minimum(at, self.n - 1)
        return at, self.ids[at] == ids

    # -- reading ----------------------------------------------------------------------------
    def allowed(self, db: Database, filters: Filters) -> np.ndarray | None:
        """Mask of the live rows matching ``filters`` (read-only), None when they restrict
        nothing: from the index's columns (:mod:`~nbmemory.search.filter_mask`; made once
        until a write changes the rows), or where those cannot evaluate them through SQL."""
        if filters.empty:
            return None
        got = filter_mask.mask(filters, self.columns, self.live, self._rows_held)
        if got is not None:
            return got
        return self.allowed_sql(db, *filters.sql())

    def kept(self, allowed: np.ndarray, chunk_ids: list[int]) -> list[int]:
        """Those of ``chunk_ids`` (in their order) whose rows ``allowed`` holds."""
        at, found = self.rows_of(np.asarray(chunk_ids, dtype=np.int64))
        found[found] = allowed[at[found]]
        return [i for i, ok in zip(chunk_ids, found.tolist(), strict=True) if ok]

    def _rows_held(self, chunk_ids: np.ndarray) -> np.ndarray:
        at, found = self.rows_of(chunk_ids)
        return at[found]

    def allowed_sql(self, db: Database, where: str, params: list[Any]) -> np.ndarray:
        """Mask of the live rows matching a condition on alias ``c`` (the chunks table), read
        through SQL."""
        mask = np.zeros(self.n, dtype=bool)
        table = index_reads.live_ids_where(db, where, params)
        at, found = self.rows_of(table.column("id").to_numpy())
        mask[at[found]] = True
        return mask & self.live

    def bm25(
        self,
        db: Database,
        terms: list[str],
        limit: int,
        allowed: np.ndarray | None,
        memo: dict[Any, Any] | None = None,
    ) -> tuple[list[tuple[int, float]], dict[int, frozenset[str]], BM25Scores]:
        """Top ``limit`` (chunk id, BM25 score), best first, ties by id; the terms each holds;
        and every allowed chunk's score, for chunks another retriever found below the cut.

        The scores of :func:`nbmemory.store.fts.search`, computed from the arrays. ``memo``:
        one search's store (:attr:`nbmemory.search.base.Query.memo`): a deeper pass of the same
        search cuts the scores computed by the first instead of computing them again.
        """
        if not terms or not fts.index_exists(db) or self.n == 0:
            return [], {}, BM25Scores.empty()
        key = ("bm25", id(self), tuple(terms))
        every = memo.get(key) if memo is not None else None
        if every is None:
            every = self._bm25_scores(db, terms, allowed)
            if memo is not None:
                memo[key] = every
        candidates = np.flatnonzero(every.holds)
        top = _top(candidates, every.scores[candidates], every.ids, limit)
        ranked = list(zip(every.ids[top].tolist(), every.scores[top].tolist(), strict=True))
        return ranked, every.matched(top), every

    def _bm25_scores(self, db: Database, terms: list[str], allowed: np.ndarray | None) -> BM25Scores:
        """Every row's BM25 score for ``terms`` (0 where not allowed or holding none)."""
        n_idx, avgdl_idx, n_delta, len_delta = fts.corpus_stats(db)
        n = float(n_idx) + float(n_delta)
        avgdl = max((float(n_idx) * float(avgdl_idx) + float(len_delta)) / max(n, 1.0), 1.0)
        scores = np.zeros(self.n, dtype=np.float64)
        holds = np.zeros(self.n, dtype=bool)
        snapshot_ok = self.snapshot if allowed is None else self.snapshot & allowed
        delta_ok = self.live if allowed is None else allowed
        term_rows: dict[str, np.ndarray] = {}
        for term in terms:
            tid, df_idx = self.terms.get(term, (None, 0))
            idf = fts.idf(n, float(df_idx) + float(self.delta.df.get(term, 0)))
            parts = []
            if tid is not None and tid + 1 < len(self.offsets):
                lo, hi = self.offsets[tid], self.offsets[tid + 1]
                rows = self.post_rows[lo:hi]
                keep = rows >= 0
                keep[keep] = snapshot_ok[rows[keep]]
                rows, tf, length = rows[keep], self.post_tf[lo:hi][keep], self.post_len[lo:hi][keep]
                scores[rows] += _bm25(idf, tf, length, avgdl)
                parts.append(rows)
            if term in self.delta.postings:
                rows, tf, length = self.delta.postings[term]
                keep = delta_ok[rows]
                rows, tf, length = rows[keep], tf[keep], length[keep]
                scores[rows] += _bm25(idf, tf, length, avgdl)
                parts.append(rows)
            if parts:
                held = np.concatenate(parts)
                holds[held] = True
                term_rows[term] = held
        return BM25Scores(self.ids, scores, holds, term_rows)

    def idfs(self, db: Database, terms: list[str]) -> tuple[dict[str, tuple[float, int]], float]:
        """:func:`nbmemory.store.fts.idfs` from the arrays: ({term: (IDF, df)}, IDF of an unseen term)."""
        n_idx, _, n_delta, _ = fts.corpus_stats(db)
        n = float(n_idx) + float(n_delta)
        table = {}
        for term in terms:
            df = self.terms.get(term, (None, 0))[1] + self.delta.df.get(term, 0)
            table[term] = (fts.idf(n, float(df)), int(df))
        return table, fts.idf(n, 0.0)

    def nearest(
        self, query: np.ndarray, limit: int, allowed: np.ndarray | None, memo: dict[Any, Any] | None = None
    ) -> list[tuple[int, float]]:
        """Top ``limit`` (chunk id, cosine similarity), best first, ties by id: an exact scan
        (from :data:`~nbmemory.search.screen.MIN_ROWS` rows through the int8 screen, which gives
        the same rows), or for an unfiltered search of a large memory the partitions nearest the
        query (:class:`_Ivf`).

        ``memo``: one search's store (as in :meth:`bm25`): a deeper pass cuts the first pass's scan.
        """
        if self.n == 0:
            return []
        key = self._scan_key(allowed is None)
        scanned = memo.get(key) if memo is not None else None
        if scanned is None:
            scanned = (self.ids, self.mat, self._scan(query, allowed, memo))
            if memo is not None:
                memo[key] = scanned
        ids, mat, scan = scanned
        rows, scores = scan(limit + RESCORE_MARGIN)
        # The scan's float32 BLAS may round two equal vectors differently: the best few are
        # scored again in float64, row by row (equal vectors, equal scores; ties by id).
        head = _top(rows, scores, ids, limit + RESCORE_MARGIN)
        exact = cosine64(mat[head], query)
        order = _top(np.arange(len(head)), exact, ids[head], limit)
        return list(zip(ids[head[order]].tolist(), exact[order].tolist(), strict=True))

    def _scan_key(self, unfiltered: bool) -> tuple[str, int, bool]:
        """Where one search's memo keeps this index's scan (:meth:`nearest`)."""
        return ("nearest", id(self), unfiltered)

    def start_scan(self, query: np.ndarray, memo: dict[Any, Any]) -> None:
        """Begin what of :meth:`nearest`'s scan can run in the background (the int8 screen's
        product), for the same search (``memo``) to take up."""
        scanned = self._scan_key(True) in memo or self._scan_key(False) in memo
        if self.screen is not None and not scanned:
            self.screen.start(_unit32(query), memo)

    def _scan(self, query: np.ndarray, allowed: np.ndarray | None, memo: dict[Any, Any] | None) -> screen_mod.Scan:
        """A function of ``L``: candidate rows, among them the ``L`` best, and their float32
        cosines to ``query``. Exact (every row, or the int8 screen's candidates: the same ``L``
        best), or for an unfiltered search above :data:`ANN_MIN_ROWS` the probed partitions."""
        q = _unit32(query)
        if self.ivf is not None and allowed is None:
            found = self.ivf.search(q, self)
            return lambda _limit: found
        ok = self.live & (self.inv_norm > 0)
        if allowed is not None:
            ok &= allowed
        if self.screen is not None:
            return self.screen.scan(q, self.mat, self.inv_norm, ok, memo)
        rows = np.flatnonzero(ok)
        scores = _cosines32(self.mat, self.inv_norm, rows, q)
        return lambda _limit: (rows, scores)

    def vectors(self, chunk_ids: Iterable[int]) -> vectors.Rows:
        """The stored vectors of those chunk ids this index holds (copies)."""
        ids = np.fromiter(chunk_ids, dtype=np.int64)
        at, found = self.rows_of(ids)
        if self.n:
            found &= self.has_vec[at]
        return vectors.Rows(ids[found].tolist(), self.mat[at[found]])  # one copy, not rows of the index

    def rows_changed(self, chunk_ids: list[int] | None) -> None:
        """Chunks whose columns changed (inside the writer's transaction; None: every chunk):
        the next :meth:`sync` reads their filter columns again (every one: a rebuild)."""
        if chunk_ids is None:
            self.all_rows_changed = True
        else:
            self.pending_rows.update(chunk_ids)

    def chunks_written(self, chunk_ids: list[int], vecs: np.ndarray | None) -> None:
        """Chunks written or deleted (inside the writer's transaction): the next :meth:`sync`
        re-reads them. ``vecs``: their new vectors (one row each), which it then need not read
        back; at most :data:`PENDING_VECTORS_MAX` wait, past that the sync reads the table."""
        self.pending.update(chunk_ids)
        held = self.pending_vectors
        if vecs is not None and len(held) + len(chunk_ids) <= PENDING_VECTORS_MAX:
            held.update(zip(chunk_ids, np.array(vecs, dtype=np.float32), strict=True))
        else:
            for i in chunk_ids:
                held.pop(i, None)



def _bm25(idf: float, tf: np.ndarray, length: np.ndarray, avgdl: float) -> np.ndarray:
    return idf * tf * ((fts.K1 + 1) / (tf + fts.K1 * (1 - fts.B + fts.B * length / avgdl)))


#: Candidates beyond the limit whose float32 score is checked again in float64.
RESCORE_MARGIN = 16
#: Vectors the writers may leave for the next sync (about 30 MB at 384 dimensions).
PENDING_VECTORS_MAX = 20_000
#: Above this many chunks an unfiltered vector search scans the partitions nearest the query
#: instead of every vector: below it an exact scan is fast enough and finds every true neighbour.
ANN_MIN_ROWS = 200_000
#: Partitions scanned per query, and the share of rows written since the partitions were made
#: (scanned exactly meanwhile) past which they are made again.
IVF_PROBES = 32
IVF_MAX_DRIFT = 0.1


class _Ivf:
    """An inverted-file partition of the vectors (spherical k-means, ``sqrt(n)`` partitions).

    ``vecs`` holds the unit vectors partition by partition, so a probe is one contiguous slice.
    Rows written after the build (``stale`` or beyond it) are scanned exactly; approximate like
    HNSW: a relevant item in an unprobed partition is missed.
    """

    def __init__(
        self, centroids: np.ndarray, offsets: np.ndarray, rows: np.ndarray, vecs: np.ndarray, n: int
    ):
        self.centroids, self.offsets, self.rows, self.vecs = centroids, offsets, rows, vecs
        self.stale = np.zeros(n, dtype=bool)

    @classmethod
    def build(cls, index: HotIndex, seed: int = 0) -> _Ivf:
        rows = np.flatnonzero(index.live & (index.inv_norm > 0))
        unit = index.mat[rows] * index.inv_norm[rows, None]
        lists = max(16, int(math.sqrt(len(rows))))
        rng = np.random.default_rng(seed)
        sample = unit[rng.choice(len(unit), size=min(len(unit), 40 * lists), replace=False)]
        centroids = sample[rng.choice(len(sample), size=lists, replace=False)].copy()
        for _ in range(8):
            assign = np.argmax(sample @ centroids.T, axis=1)
            sums = np.zeros_like(centroids)
            np.add.at(sums, assign, sample)
            empty = np.bincount(assign, minlength=lists) == 0
            sums[empty] = sample[rng.choice(len(sample), size=int(empty.sum()))]
            centroids = sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)
        assign = np.concatenate(
            [np.argmax(unit[i : i + 65536] @ centroids.T, axis=1) for i in range(0, len(unit), 65536)]
        )
        order = np.argsort(assign, kind="stable")
        offsets = np.zeros(lists + 1, dtype=np.int64)
        np.cumsum(np.bincount(assign, minlength=lists), out=offsets[1:])
        return cls(centroids.astype(np.float32), offsets, rows[order], unit[order], index.n)

    def drift(self, n: int) -> float:
        return (int(self.stale.sum()) + n - len(self.stale)) / max(len(self.rows), 1)

    def search(self, q: np.ndarray, index: HotIndex) -> tuple[np.ndarray, np.ndarray]:
        """Candidate rows and their float32 cosines: the probed partitions, then every row
        written since the build."""
        probes = np.argpartition(-(self.centroids @ q), min(IVF_PROBES, len(self.centroids)) - 1)
        parts_rows, parts_scores = [], []
        for p in probes[:IVF_PROBES]:
            lo, hi = self.offsets[p], self.offsets[p + 1]
            if hi > lo:
                parts_rows.append(self.rows[lo:hi])
                parts_scores.append(self.vecs[lo:hi] @ q)
        rows = np.concatenate(parts_rows) if parts_rows else np.empty(0, dtype=np.int64)
        scores = np.concatenate(parts_scores) if parts_scores else np.empty(0, dtype=np.float32)
        keep = index.live[rows] & ~self.stale[rows]
        rows, scores = rows[keep], scores[keep]
        tail = np.concatenate([np.flatnonzero(self.stale), np.arange(len(self.stale), index.n)])
        tail = tail[index.live[tail] & (index.inv_norm[tail] > 0)]
        if len(tail):
            rows = np.concatenate([rows, tail])
            scores = np.concatenate([scores, (index.mat[tail] @ q) * index.inv_norm[tail]])
        return rows, scores



def _cosines32(mat: np.ndarray, inv_norm: np.ndarray, rows: np.ndarray, q: np.ndarray) -> np.ndarray:
    """float32 cosines of ``rows`` of ``mat`` to the unit query ``q``: only those rows' products
    when they are under half of them (a filter's), each row summed by ``einsum`` on its own.
    Not BLAS below :data:`ANN_MIN_ROWS` rows: it splits a product this small over its threads
    and then waits for one that the OS put aside, which on busy cores costs far more than the
    product itself."""
    part = mat[rows] if len(rows) < len(mat) // 2 else mat
    dots = part @ q if len(part) > ANN_MIN_ROWS else np.einsum("ij,j->i", part, q)
    return (dots if part is not mat else dots[rows]) * inv_norm[rows]


def _unit32(query: np.ndarray) -> np.ndarray:
    q = np.asarray(query, dtype=np.float32)
    norm = float(np.linalg.norm(q))
    return q / norm if norm > 0 else q


def _top(rows: np.ndarray, scores: np.ndarray, ids: np.ndarray, limit: int) -> np.ndarray:
    """Rows of the ``limit`` best scores, best first, equal scores by ascending chunk id."""
    if len(rows) > limit:
        # Everything tied with the limit-th score stays in, so the id tie-break is exact.
        cut = np.partition(-scores, limit - 1)[limit - 1]
        keep = -scores <= cut
        rows, scores = rows[keep], scores[keep]
    order = np.lexsort((ids[rows], -scores))[:limit]
    return rows[order]


# -- one index per open file -----------------------------------------------------------------


def serving(db: Database) -> HotIndex | None:
    """The index, in step with the store, when it is ready; otherwise None (and a build starts).

    Call with ``db.lock`` held.
    """
    if not vectors.IN_MEMORY or db.read_only:
        return None
    index = db.cache.get(_KEY)
    if not isinstance(index, HotIndex):
        index = HotIndex()
        db.cache[_KEY] = index
        if index_reads.chunk_count(db) > SYNC_BUILD_ROWS:
            _start_build(db, index)
            return None
        index.build(db, late_screen=True)
    if not index.ready:
        return None
    if index.rebuilds != db.rebuilds or not index.sync(db):
        reset(db)
        return None
    return index


def built(db: Database) -> HotIndex | None:
    """The index if one is built, without the store's lock and without keeping it in step: for
    work that reads only what writes leave alone (:meth:`HotIndex.start_scan`)."""
    index = db.cache.get(_KEY)
    return index if isinstance(index, HotIndex) and index.ready else None


def _start_build(db: Database, index: HotIndex) -> None:
    def run() -> None:
        try:
            index.build(db)
        except Exception as exc:  # a closed file, a concurrent schema change: SQL keeps serving
            index.error = f"{type(exc).__name__}: {exc}"
            with db.lock:
                if db.cache.get(_KEY) is index:
                    db.cache.pop(_KEY, None)

    threading.Thread(target=run, name="nbmemory-hot-index", daemon=True).start()


def ensure(db: Database) -> HotIndex | None:
    """The serving index, built now (blocking) if it is not ready; None when disabled."""
    if not vectors.IN_MEMORY or db.read_only:
        return None
    with db.lock:
        index = db.cache.get(_KEY)
        if not (isinstance(index, HotIndex) and index.ready):
            index = HotIndex()
            index.build(db)
            db.cache[_KEY] = index
        return serving(db)


def state(db: Database) -> str:
    """``serving``, ``building``, ``off`` or ``not built``: for ``doctor`` and the trace."""
    if not vectors.IN_MEMORY:
        return "off"
    index = db.cache.get(_KEY)
    if not isinstance(index, HotIndex):
        return "not built"
    return "serving" if index.ready else "building"


def describe(db: Database, live_vectors: int) -> str:
    """What the memory-resident index is doing: derived data, never a failure while it builds."""
    now = state(db)
    if now == "building":
        return (
            f"in memory, being built in the background from the {live_vectors} stored vectors "
            "(searches go through SQL until it is ready)"
        )
    if now == "serving":
        index = serving(db)
        if index is not None:
            held = int(index.live.sum())
            return f"in memory: {held} live items, {live_vectors} vectors (built in {index.build_ms:.0f} ms)"
    return f"in memory, built at the first search from the {live_vectors} stored vectors"


def reset(db: Database) -> None:
    """Everything changed (FTS snapshot rebuilt, vectors swapped): drop the copies; the next
    search starts a background rebuild and runs through SQL meanwhile."""
    db.cache.pop(_KEY, None)
