"""Reads and small writes of items by id or path, links, counts and export."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nbmemory import private
from nbmemory.errors import ConfigError, NotFoundError
from nbmemory.items import ITEM_COLUMNS, Item
from nbmemory.store import chunks as chunk_rows
from nbmemory.store import fts, vectors
from nbmemory.store.db import Database, utcnow
from nbmemory.store.migrations import LINK_TYPES

#: What a conversation turn records besides its text: when it was said, by whom, in which conversation.
EVENT_COLUMNS = ("event_at", "speaker", "conversation")
EXPORT_FORMATS = {".parquet": "PARQUET", ".csv": "CSV, HEADER", ".jsonl": "JSON", ".json": "JSON"}


def get(db: Database, item_id: int, *, touch: bool, include_forgotten: bool) -> Item:
    """One item; ``touch`` counts it as an access."""
    row = db.fetchone(f"SELECT {ITEM_COLUMNS} FROM chunks WHERE id = ?", [int(item_id)])
    item = None if row is None else Item.from_row(row)
    if item is None or (item.deleted_at is not None and not include_forgotten):
        raise NotFoundError(f"no item with id {item_id}" + (" (it was forgotten)" if item else ""))
    if touch:
        db.execute(
            "UPDATE chunks SET access_count = access_count + 1, last_accessed_at = ? WHERE id = ?",
            [utcnow(), int(item_id)],
        )
    return item


def update(
    db: Database,
    item: Item,
    tags: list[str] | None,
    importance: float | None,
    pinned: bool | None,
    new_text: tuple[str, np.ndarray] | None,
    event: Mapping[str, Any] | None = None,
) -> None:
    """Change what is given (inside the caller's transaction); new text comes with its vector.
    ``event``: new values of ``event_at``, ``speaker`` and ``conversation`` by name (None clears one)."""
    now = utcnow()
    db.rows_changed([item.id])
    for column, value in (event or {}).items():
        if column not in EVENT_COLUMNS:
            raise ValueError(f"{column!r} is not one of {', '.join(EVENT_COLUMNS)}")
        db.execute(f"UPDATE chunks SET {column} = ?, updated_at = ? WHERE id = ?", [value, now, item.id])
    if tags is not None:
        db.execute("UPDATE chunks SET tags = ?, updated_at = ? WHERE id = ?", [tags, now, item.id])
    if importance is not None:
        db.execute(
            "UPDATE chunks SET importance = ?, updated_at = ? WHERE id = ?", [importance, now, item.id]
        )
    if pinned is not None:
        db.execute("UPDATE chunks SET pinned = ? WHERE id = ?", [pinned, item.id])
    if new_text is not None:
        text, vec = new_text
        db.execute(
            "UPDATE chunks SET text = ?, content_hash = ?, updated_at = ?, seq = nextval('chunk_seq') WHERE id = ?",
            [text, chunk_rows.content_hash(item.heading, text), now, item.id],
        )
        vectors.put(db, [item.id], vec)
        fts.add_delta(db, [item.id])


def require_ids(db: Database, item_id: int | Iterable[int]) -> list[int]:
    """The ids asked for (one, or several), as a list; :class:`NotFoundError` naming those not stored."""
    ids = [int(item_id)] if isinstance(item_id, (int, np.integer)) else [int(i) for i in item_id]
    # An id outside BIGINT cannot exist (and would fail the cast below).
    missing = set(ids) - {
        int(r[0])
        for r in db.fetchall(
            "SELECT id FROM chunks WHERE id IN (SELECT unnest(?::BIGINT[]))",
            [[i for i in ids if -(2**63) <= i < 2**63]],
        )
    }
    if missing:
        raise NotFoundError(f"no item with id {', '.join(map(str, sorted(missing)))}")
    return ids


def path_pattern(path: str) -> str:
    """A file path made absolute; a glob is kept as it is."""
    return str(Path(path).expanduser().absolute()) if not any(c in path for c in "*?[") else path


def live_ids_under(
    db: Database,
    pattern: str | None,
    namespace: str | None,
    condition: tuple[str, Sequence[Any]] = ("TRUE", ()),
) -> list[int]:
    """Live items from ``pattern`` (a path or glob; None: any source) in ``namespace`` (None:
    any) that ``condition`` also selects (SQL on alias ``c`` and its parameters, e.g. a search's
    ``Filters.sql()``)."""
    where = [condition[0]]
    params = list(condition[1])
    if pattern is not None:
        where.append("(c.source = ? OR c.source GLOB ?)")
        params += [pattern, pattern]
    if namespace is not None:
        where.append("c.namespace = ?")
        params.append(namespace)
    return [
        int(r[0])
        for r in db.fetchall(
            f"SELECT c.id FROM chunks c WHERE {' AND '.join(where)} AND c.deleted_at IS NULL", params
        )
    ]


def forget_files(db: Database, pattern: str, namespace: str | None) -> None:
    """Mark files forgotten so they are not re-indexed; only in ``namespace`` when given."""
    db.execute(
        "UPDATE documents SET forgotten_at = ? WHERE (path = ? OR path GLOB ?)"
        + (" AND namespace = ?" if namespace is not None else ""),
        [utcnow(), pattern, pattern, *([namespace] if namespace is not None else [])],
    )


def check_link(src: int, dst: int, type: str) -> None:
    if type not in LINK_TYPES:
        raise ConfigError(f"link type {type!r} is not one of {', '.join(LINK_TYPES)}")
    if src == dst:
        raise ConfigError("an item cannot link to itself")


def add_link(db: Database, src: int, dst: int, type: str, note: str | None) -> None:
    (link_id,) = chunk_rows.allocate(db, "link_ids", 1)
    db.cache.pop("supersedes_links", None)
    db.execute(
        "INSERT INTO links VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        [link_id, src, dst, type, note, utcnow()],
    )


def links(db: Database, item_id: int) -> list[dict[str, Any]]:
    rows = db.fetchall(
        "SELECT src, dst, type, note, created_at FROM links WHERE src = ? OR dst = ? ORDER BY created_at",
        [item_id, item_id],
    )
    return [dict(zip(("src", "dst", "type", "note", "created_at"), r, strict=True)) for r in rows]


def live_count(db: Database) -> int:
    """How many items are live (not forgotten)."""
    return int(db.scalar("SELECT count(*) FROM chunks WHERE deleted_at IS NULL"))


def stats(db: Database, path: Path) -> dict[str, Any]:
    """Counts, sizes and index state."""
    live = "FROM chunks WHERE deleted_at IS NULL"
    # The write-ahead log holds what is not yet checkpointed into the file: both are the memory.
    size = sum(f.stat().st_size for f in (path, path.with_name(path.name + ".wal")) if f.exists())
    return {
        "path": str(path),
        "file_mb": round(size / 1e6, 2),
        "schema_version": db.schema_version(),
        "model": db.get_meta("model_name"),
        "model_fingerprint": db.get_meta("model_fingerprint"),
        "dim": int(db.get_meta("model_dim") or 0) or None,
        "documents": int(db.scalar("SELECT count(*) FROM documents WHERE forgotten_at IS NULL")),
        "items": int(db.scalar(f"SELECT count(*) {live}")),
        "forgotten": int(db.scalar("SELECT count(*) FROM chunks WHERE deleted_at IS NOT NULL")),
        "vectors": int(db.scalar("SELECT count(*) FROM vectors")) if db.table_exists("vectors") else 0,
        "links": int(db.scalar("SELECT count(*) FROM links")),
        "searches": int(db.scalar("SELECT count(*) FROM search_log")),
        "by_kind": dict(db.fetchall(f"SELECT kind, count(*) {live} GROUP BY kind ORDER BY kind")),
        "by_namespace": dict(
            db.fetchall(f"SELECT namespace, count(*) {live} GROUP BY namespace ORDER BY namespace")
        ),
        "fts_pending": fts.delta_size(db),
        "hnsw_index": vectors.index_exists(db),
    }


def export(db: Database, target: Path, include_forgotten: bool) -> int:
    """Write items (no vectors) to Parquet, CSV or JSON lines, chosen by the file suffix."""
    fmt = EXPORT_FORMATS.get(target.suffix.lower())
    if fmt is None:
        raise ConfigError(f"cannot export to {target.name!r}: use a .parquet, .csv or .jsonl file")
    where = "" if include_forgotten else "WHERE deleted_at IS NULL"
    count = int(db.scalar(f"SELECT count(*) FROM chunks {where}"))
    escaped = str(target).replace("'", "''")
    db.execute(
        f"COPY (SELECT {ITEM_COLUMNS}, last_accessed_at, last_retrieved_at FROM chunks {where} "
        f"ORDER BY id) TO '{escaped}' (FORMAT {fmt})"
    )
    # COPY writes a new file with the umask's mode: an export holds the memory's text.
    private.narrow(target)
    return count
