"""The rows tuning reads and writes: model versions, items as training text, live vectors.

The SQL of :mod:`nbmemory.tune` (its versions, its mining, its gate), kept in the store like all
SQL of the package.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nbmemory.store.db import Database

#: The columns of ``model_versions``, in the order the rows are read and written.
VERSION_COLUMNS = "version, model, base_model, fingerprint, status, active, created_at, scores, note"


def version_rows(db: Database) -> list[tuple[Any, ...]]:
    """Every row of ``model_versions`` (:data:`VERSION_COLUMNS`), oldest first."""
    return db.fetchall(f"SELECT {VERSION_COLUMNS} FROM model_versions ORDER BY created_at, version")


def upsert_version(db: Database, values: Sequence[Any]) -> None:
    """Insert or update a version row: ``values`` are :data:`VERSION_COLUMNS` but ``active``
    (a new row is inactive; an update keeps it)."""
    db.execute(
        f"INSERT INTO model_versions ({VERSION_COLUMNS}) VALUES (?, ?, ?, ?, ?, false, ?, ?, ?) "
        "ON CONFLICT (version) DO UPDATE SET model = excluded.model, base_model = excluded.base_model, "
        "fingerprint = excluded.fingerprint, status = excluded.status, scores = excluded.scores, "
        "note = excluded.note",
        list(values),
    )


def set_active_version(db: Database, version: str) -> None:
    """Make ``version`` the only active row."""
    db.execute("UPDATE model_versions SET active = (version = ?)", [version])


def live_texts(db: Database, namespace: str | None) -> list[tuple[Any, ...]]:
    """``(id, heading, text, kind, group)`` of every live item (of ``namespace``), by id; the
    group is the item's source, else its document."""
    where = "deleted_at IS NULL" + (" AND namespace = ?" if namespace else "")
    return db.fetchall(
        f"SELECT id, heading, text, kind, coalesce(source, CAST(doc_id AS VARCHAR), '') FROM chunks "
        f"WHERE {where} ORDER BY id",
        [namespace] if namespace else None,
    )


def texts_of(db: Database, ids: Sequence[int]) -> list[tuple[Any, ...]]:
    """``(id, heading, text, group)`` of the items ``ids``, live or not."""
    return db.fetchall(
        "SELECT id, heading, text, coalesce(source, CAST(doc_id AS VARCHAR), '') FROM chunks "
        "WHERE id IN (SELECT unnest(?::BIGINT[]))",
        [ids],
    )


def live_vectors(db: Database, table: str) -> list[tuple[Any, ...]]:
    """``(chunk_id, vec)`` of the live items in ``table`` (``vectors`` or a staging table), by id."""
    return db.fetchall(
        f"SELECT v.chunk_id, v.vec FROM {table} v JOIN chunks c ON c.id = v.chunk_id "
        "WHERE c.deleted_at IS NULL ORDER BY v.chunk_id"
    )
