"""Re-embedding every item with another model, resumably, without mixing models in a search.

Vectors for the new model are staged in ``vectors_new`` batch by batch (each batch committed,
keyed by the item's content hash), so a killed run resumes where it stopped. The live ``vectors``
table serves searches until :func:`swap` replaces it in one transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nbmemory.embed.base import Embedder
from nbmemory.store import chunks as chunk_rows
from nbmemory.store import vectors
from nbmemory.store.db import Database

#: Called as ``(done, total)`` while staging.
Progress = Callable[[int, int], None]
#: Below this many unstaged items, the final catch-up runs under the database lock.
CATCH_UP_UNDER_LOCK = 64


def staged_target(db: Database) -> str | None:
    """Fingerprint of the model whose vectors are staged, if a re-embed is under way."""
    return db.get_meta("reembed_target") if db.table_exists("vectors_new") else None


def _staging_dim(db: Database) -> int | None:
    row = db.fetchone(
        "SELECT data_type FROM duckdb_columns() WHERE database_name = 'mem' AND "
        "table_name = 'vectors_new' AND column_name = 'vec'"
    )
    return None if row is None else int(str(row[0]).split("[")[-1].rstrip("]"))


def unstaged(db: Database) -> list[tuple[Any, ...]]:
    """Live items with no staged vector for their current text (new or edited since staging)."""
    return db.fetchall(
        "SELECT c.id, c.heading, c.text, c.content_hash FROM chunks c "
        "LEFT JOIN vectors_new n ON n.chunk_id = c.id AND n.content_hash = c.content_hash "
        "WHERE c.deleted_at IS NULL AND n.chunk_id IS NULL ORDER BY c.id"
    )


def stage(db: Database, embedder: Embedder, progress: Progress | None = None, batch: int = 256) -> int:
    """Embed every live item not yet staged for ``embedder`` into ``vectors_new``.

    Each batch is committed, so a killed run resumes: rows staged for the same model
    fingerprint and the item's current text (content hash) are kept. Returns how many were
    embedded now. The live ``vectors`` table is not touched.
    """
    import pyarrow as pa

    if staged_target(db) != embedder.fingerprint or _staging_dim(db) != embedder.dim:
        with db.transaction():
            db.execute("DROP TABLE IF EXISTS vectors_new")
            db.execute(
                "CREATE TABLE vectors_new (chunk_id BIGINT PRIMARY KEY, content_hash VARCHAR, "
                f"vec FLOAT[{embedder.dim}])"
            )
            db.set_meta("reembed_target", embedder.fingerprint)
    rows = unstaged(db)
    total = int(db.scalar("SELECT count(*) FROM chunks WHERE deleted_at IS NULL"))
    if progress is not None:
        progress(total - len(rows), total)
    for start in range(0, len(rows), batch):
        part = rows[start : start + batch]
        vecs = embedder.embed_documents([chunk_rows.embedding_text(h or "", t) for _, h, t, _ in part])
        ids = [int(r[0]) for r in part]
        table = pa.table(
            {
                "chunk_id": pa.array(ids, pa.int64()),
                "content_hash": pa.array([r[3] for r in part], pa.string()),
                "vec": pa.FixedSizeListArray.from_arrays(
                    pa.array(vecs.astype(np.float32).reshape(-1)), embedder.dim
                ),
            }
        )
        with db.transaction():
            db.execute("DELETE FROM vectors_new WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))", [ids])
            db.with_arrow("_nbm_re", table, "INSERT INTO vectors_new SELECT * FROM _nbm_re")
        if progress is not None:
            progress(total - len(rows) + start + len(part), total)
    return len(rows)


def swap(
    db: Database,
    embedder: Embedder,
    on_swapped: Callable[[Embedder], None],
    progress: Progress | None = None,
    also: Callable[[], None] | None = None,
) -> int:
    """Stage what was written meanwhile, then swap the staged vectors in, in one transaction.

    ``also`` runs inside that transaction (a model version made active with its vectors: a
    kill leaves both or neither).

    The database lock is held from the last catch-up to the swap, and ``on_swapped`` (which
    switches the caller's embedder) runs in the same step, so a search uses the old model with
    the old vectors or the new model with the new ones, never a mix. A write from another thread
    whose embedding began before the swap would still store an old-model vector; nbmemory's own
    callers never overlap calls on one Memory (the owner serializes its clients, a kernel runs
    one cell at a time). Returns the number of vectors now live.
    """
    # Catch up without the lock while much is missing, so searches are blocked only briefly.
    for _ in range(3):
        if len(unstaged(db)) <= CATCH_UP_UNDER_LOCK:
            break
        stage(db, embedder, progress)
    with db.lock:
        stage(db, embedder, progress)
        # The swap is one transaction: a reader sees all old vectors or all new ones.
        with db.transaction():
            vectors.drop_index(db)
            db.execute(
                "DELETE FROM vectors_new WHERE chunk_id NOT IN (SELECT id FROM chunks WHERE deleted_at IS NULL)"
            )
            db.execute("DROP TABLE IF EXISTS vectors")
            db.execute("ALTER TABLE vectors_new RENAME TO vectors")
            db.execute("ALTER TABLE vectors DROP COLUMN content_hash")
            db.execute("DELETE FROM meta WHERE key = 'reembed_target'")
            db.set_meta("model_fingerprint", embedder.fingerprint)
            db.set_meta("model_name", embedder.name)
            db.set_meta("model_dim", embedder.dim)
            if also is not None:
                also()
        db.rebuilds += 1  # every vector changed
        on_swapped(embedder)
        vectors.create_index(db)
        return int(db.scalar("SELECT count(*) FROM vectors"))


def drop_staging(db: Database) -> None:
    """Forget a staged re-embed (a refused tuning, or one for a model no longer wanted)."""
    with db.transaction():
        db.execute("DROP TABLE IF EXISTS vectors_new")
        db.execute("DELETE FROM meta WHERE key = 'reembed_target'")
