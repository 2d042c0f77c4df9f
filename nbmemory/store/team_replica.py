"""The rows of a local replica of a team lake (:mod:`nbmemory.store.team`).

A replica is an ordinary memory file of its own (never the personal one) whose chunks are the
lake's items: search reads it with the same code as a personal file. Beside the chunks it keeps
which chunk holds which lake item (``team_items``) and the last lake snapshot it applied (the
``meta`` key ``team_snapshot``), in the same transaction as the rows, so a process killed between
two refreshes resumes from the snapshot its file holds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nbmemory.store import chunks as chunk_rows
from nbmemory.store import fts, vectors
from nbmemory.store.chunks import NewChunk
from nbmemory.store.db import Database, utcnow
from nbmemory.store.team import LakeRow

SNAPSHOT_KEY = "team_snapshot"
#: The lake's identity (:meth:`~nbmemory.store.team.TeamLake.identity`) the snapshot belongs to.
IDENTITY_KEY = "team_lake"


def ensure_tables(db: Database) -> None:
    db.execute("CREATE TABLE IF NOT EXISTS team_items (lake_id BIGINT PRIMARY KEY, chunk_id BIGINT NOT NULL)")


def applied_snapshot(db: Database) -> int | None:
    """The last lake snapshot this replica applied; None before its first read."""
    value = db.get_meta(SNAPSHOT_KEY)
    return None if value is None else int(value)


def lake_identity(db: Database) -> str | None:
    """The identity of the lake this replica follows; None before its first read."""
    return db.get_meta(IDENTITY_KEY)


def lake_ids(db: Database, chunk_ids: Sequence[int]) -> dict[int, int]:
    """Lake id by chunk id, for those of ``chunk_ids`` that hold lake items."""
    if not chunk_ids:
        return {}
    rows = db.fetchall(
        "SELECT chunk_id, lake_id FROM team_items WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))",
        [list(map(int, chunk_ids))],
    )
    return {int(c): int(lake) for c, lake in rows}


def present(db: Database, ids: Sequence[int]) -> set[int]:
    """Which of the lake ``ids`` this replica holds."""
    if not ids:
        return set()
    rows = db.fetchall(
        "SELECT lake_id FROM team_items WHERE lake_id IN (SELECT unnest(?::BIGINT[]))", [list(map(int, ids))]
    )
    return {int(r[0]) for r in rows}


def count(db: Database) -> int:
    return int(db.scalar("SELECT count(*) FROM team_items"))


def apply(
    db: Database,
    inserted: Sequence[LakeRow],
    vecs: np.ndarray,
    deleted: Sequence[int],
    snapshot: int,
    reset: bool = False,
    identity: str | None = None,
) -> None:
    """Insert ``inserted`` (with ``vecs``, one row each), remove the lake items ``deleted``, and
    record ``snapshot`` as applied, in one transaction. ``reset``: drop every lake item first
    (a full read); ``identity``: the lake's, recorded with it."""
    rows = [
        NewChunk(
            namespace=r.namespace,
            kind=r.kind,
            text=r.text,
            heading=r.heading,
            source=r.source,
            tags=list(r.tags),
            importance=r.importance,
            event_at=r.event_at,
            speaker=r.speaker,
            conversation=r.conversation,
        )
        for r in inserted
    ]
    postings = fts.postings_of(db, [(r.heading, r.text) for r in rows]) if rows else None
    with db.transaction():
        gone = [int(r[0]) for r in db.fetchall("SELECT chunk_id FROM team_items")] if reset else []
        if deleted and not reset:
            gone = [
                int(r[0])
                for r in db.fetchall(
                    "SELECT chunk_id FROM team_items WHERE lake_id IN (SELECT unnest(?::BIGINT[]))",
                    [list(map(int, deleted))],
                )
            ]
        if gone:
            chunk_rows.purge(db, gone)
            db.execute("DELETE FROM team_items WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))", [gone])
        if rows:
            chunk_ids = chunk_rows.insert(db, rows, vecs, utcnow(), postings)
            import pyarrow as pa

            table = pa.table(
                {
                    "lake_id": pa.array([r.id for r in inserted], pa.int64()),
                    "chunk_id": pa.array(chunk_ids, pa.int64()),
                    "created_at": pa.array([r.created_at for r in inserted], pa.timestamp("us")),
                    "updated_at": pa.array([r.updated_at for r in inserted], pa.timestamp("us")),
                }
            )
            db.with_arrow(
                "_nbm_team_new",
                table,
                "INSERT INTO team_items SELECT lake_id, chunk_id FROM _nbm_team_new; "
                "UPDATE chunks SET created_at = coalesce(t.created_at, chunks.created_at), "
                "updated_at = coalesce(t.updated_at, chunks.updated_at) FROM _nbm_team_new t "
                "WHERE chunks.id = t.chunk_id",
            )
        db.set_meta(SNAPSHOT_KEY, snapshot)
        if identity is not None:
            db.set_meta(IDENTITY_KEY, identity)
    vectors.maybe_rebuild(db)
    if rows:
        fts.ensure_fresh(db)
