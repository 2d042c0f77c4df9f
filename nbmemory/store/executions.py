"""Rows of captured runs (:mod:`nbmemory.executions`): the items a run may be again, and the
update that records another run."""

from __future__ import annotations

import numpy as np

from nbmemory.store import chunks as chunk_rows
from nbmemory.store import fts, vectors
from nbmemory.store.chunks import NewChunk
from nbmemory.store.db import Database, utcnow


def candidates(db: Database, row: NewChunk, prefix: str) -> list[tuple[int, str, str]]:
    """``(id, heading, text)`` of the live items of ``row``'s kind, namespace, notebook and cell
    whose text starts with ``prefix`` (the run's stored source), oldest first."""
    return [
        (int(i), heading or "", text)
        for i, heading, text in db.fetchall(
            "SELECT id, heading, text FROM chunks WHERE kind = ? AND deleted_at IS NULL AND namespace = ? "
            "AND source IS NOT DISTINCT FROM ? AND cell_id IS NOT DISTINCT FROM ? AND starts_with(text, ?) "
            "ORDER BY id",
            [row.kind, row.namespace, row.source, row.cell_id, prefix],
        )
    ]


def ran_again(db: Database, item_id: int, row: NewChunk, vector: np.ndarray | None) -> None:
    """Record another run of item ``item_id`` (inside the caller's transaction): its time and
    cell position (kept when the run's is unknown), and, when its output or error changed (``vector`` given), its heading, text,
    vector and postings."""
    db.rows_changed([item_id])
    db.execute(
        "UPDATE chunks SET event_at = ?, cell_index = coalesce(?, cell_index), updated_at = ? WHERE id = ?",
        [row.event_at, row.cell_index, utcnow(), item_id],
    )
    if vector is None:
        return
    db.execute(
        "UPDATE chunks SET heading = ?, text = ?, content_hash = ?, seq = nextval('chunk_seq') WHERE id = ?",
        [row.heading, row.text, chunk_rows.content_hash(row.heading, row.text), item_id],
    )
    vectors.put(db, [item_id], vector.reshape(1, -1))
    fts.add_delta(db, [item_id])
