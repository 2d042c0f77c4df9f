"""Reads and small writes of the ``documents`` table and of each document's chunks: what
indexing reads to tell which files changed, and what it removes when a file is gone.
(Writing a document with its chunks is :func:`nbmemory.store.chunks.write_documents`.)"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nbmemory.store.db import Database


def known(db: Database, namespace: str, paths: Sequence[str] | None = None) -> list[tuple[Any, ...]]:
    """``(id, path, content_hash, mtime, size, forgotten_at)`` of the documents of ``namespace``
    (only those at ``paths`` when given)."""
    sql = "SELECT id, path, content_hash, mtime, size, forgotten_at FROM documents WHERE namespace = ?"
    params: list[object] = [namespace]
    if paths is not None:
        sql += " AND path IN (SELECT unnest(?::VARCHAR[]))"
        params.append(list(paths))
    return db.fetchall(sql, params)


def current(db: Database, namespace: str, paths: Sequence[str]) -> list[tuple[Any, ...]]:
    """``(id, path, content_hash, mtime, forgotten_at)`` of the documents at ``paths``, as stored now."""
    return db.fetchall(
        "SELECT id, path, content_hash, mtime, forgotten_at FROM documents "
        "WHERE namespace = ? AND path IN (SELECT unnest(?::VARCHAR[]))",
        [namespace, list(paths)],
    )


def touch(db: Database, doc_id: int, mtime: float, size: int) -> None:
    """Record a file's new ``mtime`` and ``size`` (its content unchanged)."""
    db.execute("UPDATE documents SET mtime = ?, size = ? WHERE id = ?", [mtime, size, doc_id])


def chunks_of(db: Database, doc_ids: Sequence[int]) -> list[tuple[Any, ...]]:
    """``(id, doc_id, content_hash)`` of every chunk of the documents, by id."""
    return db.fetchall(
        "SELECT id, doc_id, content_hash FROM chunks WHERE doc_id IN (SELECT unnest(?::BIGINT[])) ORDER BY id",
        [list(doc_ids)],
    )


def chunk_ids_of(db: Database, doc_ids: Sequence[int]) -> list[int]:
    """The ids of every chunk of the documents."""
    rows = db.fetchall("SELECT id FROM chunks WHERE doc_id IN (SELECT unnest(?::BIGINT[]))", [list(doc_ids)])
    return [int(r[0]) for r in rows]


def delete(db: Database, doc_ids: Sequence[int]) -> None:
    """Delete the document rows (their chunks are purged first: :func:`nbmemory.store.chunks.purge`)."""
    db.execute("DELETE FROM documents WHERE id IN (SELECT unnest(?::BIGINT[]))", [list(doc_ids)])


def vector_of_each(db: Database, hashes: Sequence[str]) -> list[tuple[Any, ...]]:
    """``(content_hash, vec)``: a stored vector of each text among ``hashes`` that some chunk holds."""
    return db.fetchall(
        "SELECT c.content_hash, any_value(v.vec) FROM chunks c JOIN vectors v "
        "ON v.chunk_id = c.id WHERE c.content_hash IN (SELECT unnest(?::VARCHAR[])) "
        "GROUP BY c.content_hash",
        [list(hashes)],
    )
