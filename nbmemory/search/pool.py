"""The fused candidates' stored data (vectors, rows, recency signals), read once and only when a
stage asks for it, and exact cosines to the query."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from nbmemory.search import decay
from nbmemory.search.vector import stored
from nbmemory.store.chunks import embedding_text
from nbmemory.store.db import Database
from nbmemory.store.rows import CandidateRow, fetch_rows, recency_rows
from nbmemory.store.vectors import Rows


def _unit(v: np.ndarray) -> np.ndarray:
    return v / (float(np.linalg.norm(v)) or 1.0)


def _unit_rows(vecs: Mapping[int, np.ndarray], ids: list[int]) -> tuple[list[int], np.ndarray]:
    """(those of ``ids`` that ``vecs`` holds, their vectors as unit-length rows; a zero vector
    stays zero). Each row is scaled on its own: the same values whatever rows come with it."""
    keys, mat = Rows.of(vecs).take(ids)
    if not keys:
        return keys, np.empty((0, 0), dtype=np.float32)
    norms = np.linalg.norm(mat, axis=1, keepdims=True)
    return keys, mat / np.where(norms > 0, norms, 1.0)


#: Where a search keeps the stored vectors it has read, in its query's memo: (ids asked, their
#: vectors), under this name and the store's count of full rebuilds (a re-embed swap between two
#: passes makes them stale).
_READ = "stored_vectors"


def stored_once(db: Database, ids: list[int], memo: dict[Any, Any] | None) -> Mapping[int, np.ndarray]:
    """The stored vectors of ``ids`` (and of others this search read before); those this search
    (``memo``: its query's store) has not asked for yet are read together (one hold of the
    store's lock when the memory-resident index serves), the others come from the memo. Fusion
    reads the candidates' here and the pool then finds them: a search that takes the lock once
    less waits once less for a write. ``memo`` None: all read now."""
    if memo is None:
        return stored(db, ids)
    key = (_READ, db.rebuilds)
    held: tuple[set[int], Rows] | None = memo.get(key)
    asked, found = held if held is not None else (set(), Rows([], np.empty((0, 0), dtype=np.float32)))
    new = [i for i in ids if i not in asked]
    if new:
        found = found.joined(stored(db, new))
        asked.update(new)
        memo[key] = (asked, found)
    return found


def cosines(
    db: Database,
    qvec: np.ndarray,
    ids: list[int],
    known: Mapping[int, float],
    vectors: Mapping[int, np.ndarray] | None = None,
) -> dict[int, float]:
    """``known`` cosines plus the exact cosine to ``qvec`` of the ``ids`` it lacks (their stored
    vectors taken from ``vectors`` when given, else fetched once), computed in the order of
    ``ids`` whatever order the table returns them in: a float32 product may round the last bit of
    a cosine by its row's place, and the same query must give the same scores on every path."""
    out = dict(known)
    missing = [i for i in ids if i not in out]
    if missing:
        keys, unit = _unit_rows(stored(db, missing) if vectors is None else vectors, missing)
        if keys:
            out.update(zip(keys, (unit @ _unit(qvec)).tolist(), strict=True))
    return out


class Pool:
    """The fused candidates' stored data, fetched only for the candidates a stage reads, once.

    Cost: each read is linear in the ids asked for that were not read before; a stage that
    stops early (the walk of :func:`~nbmemory.search.group.walk`) reads only the head of the pool.
    """

    def __init__(
        self, db: Database, ids: list[int], qvec: np.ndarray | None, memo: dict[Any, Any] | None = None
    ) -> None:
        self.db = db
        self.ids = ids
        self.qvec = qvec
        self.memo = memo  # the query's: vectors fusion read already (:func:`stored_once`)
        self._vectors: dict[int, np.ndarray] = {}
        self._vectors_read: set[int] = set()
        self._rows: dict[int, CandidateRow] = {}
        self._rows_read: set[int] = set()

    def vectors(self, ids: list[int] | None = None) -> dict[int, np.ndarray]:
        """Candidate -> unit-length embedding, for ``ids`` (default: every candidate)."""
        wanted = self.ids if ids is None else ids
        missing = [i for i in wanted if i not in self._vectors_read]
        if missing:
            keys, unit = _unit_rows(stored_once(self.db, missing, self.memo), missing)
            self._vectors.update(zip(keys, unit, strict=True))
            self._vectors_read.update(missing)
        if ids is None:
            return self._vectors
        return {i: self._vectors[i] for i in wanted if i in self._vectors}

    def similarities(self, ids: list[int]) -> dict[int, float]:
        """Exact cosine similarity of each id to the query (ids outside the pool are fetched)."""
        if self.qvec is None:
            return {}
        have = self.vectors(ids)
        q = _unit(self.qvec)
        known = {i: float(have[i] @ q) for i in ids if i in have}
        return cosines(self.db, self.qvec, ids, known)

    def rows(self, ids: list[int] | None = None) -> dict[int, CandidateRow]:
        """The live row of each of ``ids`` (default: every candidate): a hit's columns, then the
        recency signals."""
        wanted = self.ids if ids is None else ids
        missing = [i for i in wanted if i not in self._rows_read]
        if missing:
            self._rows.update(fetch_rows(self.db, missing, CandidateRow))
            self._rows_read.update(missing)
        if ids is None:
            return self._rows
        return {i: self._rows[i] for i in wanted if i in self._rows}

    @property
    def read(self) -> dict[str, int]:
        """How many candidates' rows and vectors were read: what the trace reports."""
        return {"rows": len(self._rows_read), "vectors": len(self._vectors_read)}

    def meta(self) -> dict[int, decay.ItemSignals]:
        """The recency signals, read afresh: retrieval counters change with every search log flush,
        which does not invalidate the rows held for searches."""
        if not self.ids:
            return {}
        found = recency_rows(self.db, self.ids)
        return {
            int(i): decay.ItemSignals(created, retrieved, float(importance), int(count), bool(pinned))
            for i, created, retrieved, importance, count, pinned in found
        }

    def texts(self, ids: list[int]) -> dict[int, str]:
        """What dedup and the reranker read of each of ``ids``: the heading, then the text."""
        rows = self.rows(ids)
        return {i: _text_of(row) for i, row in rows.items()}


#: The heading and text of each content (by content hash) as one string: the same object search
#: after search, so dedup's cache of words (:func:`nbmemory.search.dedup.words`) finds it by a
#: hash computed once, not by hashing the text again (notebook cells: kilobytes each).
_TEXTS: dict[str, str] = {}
#: Contents held at most (as many as dedup's cache of words; emptied when full).
TEXTS_MAX = 20_000


def _text_of(row: CandidateRow) -> str:
    text = _TEXTS.get(row.content_hash)
    if text is None:
        if len(_TEXTS) >= TEXTS_MAX:
            _TEXTS.clear()
        text = _TEXTS[row.content_hash] = embedding_text(row.heading, row.text)
    return text
