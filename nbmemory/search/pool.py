"""The fused candidates' stored data (vectors, rows, recency signals), read once and only when a
stage asks for it, and exact cosines to the query."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from nbmemory.search import decay
from nbmemory.store import vectors
from nbmemory.store.db import Database
from nbmemory.store.rows import CandidateRow, fetch_rows


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


class Pool:
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
