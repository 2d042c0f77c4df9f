"""Writing chunk rows: inserts with pre-allocated ids, deletes of derived data."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from nbmemory.store import fts, vectors
from nbmemory.store.db import Database


def content_hash(heading: str, text: str) -> str:
    return hashlib.sha256(f"{heading}\x00{text}".encode()).hexdigest()[:32]


def embedding_text(heading: str, text: str) -> str:
    """What the embedder sees: the heading path as context, then the text."""
    return f"{heading}\n{text}" if heading else text


@dataclass
class NewChunk:
    """A chunk row about to be inserted."""

    namespace: str
    kind: str
    text: str
    heading: str = ""
    source: str | None = None
    doc_id: int | None = None
    ordinal: int = 0
    cell_id: str | None = None
    cell_index: int | None = None
    line_start: int | None = None
    line_end: int | None = None
    page: int | None = None
    tags: list[str] = field(default_factory=list)
    importance: float = 0.5
    #: A conversation turn's: when it was said (naive UTC), by whom, in which conversation.
    event_at: datetime | None = None
    speaker: str | None = None
    conversation: str | None = None

    @property
    def hash(self) -> str:
        return content_hash(self.heading, self.text)


def allocate(db: Database, sequence: str, n: int) -> list[int]:
    if n == 0:
        return []
    return [int(r[0]) for r in db.fetchall(f"SELECT nextval('{sequence}') FROM range(?)", [n])]


def insert(
    db: Database, rows: list[NewChunk], vecs: np.ndarray, now: datetime, postings: Any = None
) -> list[int]:
    """Insert chunks, their vectors and their FTS delta postings (caller holds a transaction).
    ``postings``: :func:`nbmemory.store.fts.postings_of` the rows, made before the transaction."""
    if not rows:
        return []
    import pyarrow as pa

    ids = allocate(db, "chunk_ids", len(rows))
    seqs = allocate(db, "chunk_seq", len(rows))
    cols: dict[str, list[Any]] = {
        "id": ids,
        "doc_id": [r.doc_id for r in rows],
        "namespace": [r.namespace for r in rows],
        "kind": [r.kind for r in rows],
        "source": [r.source for r in rows],
        "ordinal": [r.ordinal for r in rows],
        "text": [r.text for r in rows],
        "heading": [r.heading for r in rows],
        "cell_id": [r.cell_id for r in rows],
        "cell_index": [r.cell_index for r in rows],
        "line_start": [r.line_start for r in rows],
        "line_end": [r.line_end for r in rows],
        "page": [r.page for r in rows],
        "content_hash": [r.hash for r in rows],
        "tags": [list(r.tags) for r in rows],
        "importance": [float(r.importance) for r in rows],
        "event_at": [r.event_at for r in rows],
        "speaker": [r.speaker for r in rows],
        "conversation": [r.conversation for r in rows],
        "seq": seqs,
    }
    table = pa.table(
        cols,
        schema=pa.schema(
            [
                ("id", pa.int64()),
                ("doc_id", pa.int64()),
                ("namespace", pa.string()),
                ("kind", pa.string()),
                ("source", pa.string()),
                ("ordinal", pa.int32()),
                ("text", pa.string()),
                ("heading", pa.string()),
                ("cell_id", pa.string()),
                ("cell_index", pa.int32()),
                ("line_start", pa.int32()),
                ("line_end", pa.int32()),
                ("page", pa.int32()),
                ("content_hash", pa.string()),
                ("tags", pa.list_(pa.string())),
                ("importance", pa.float64()),
                ("event_at", pa.timestamp("us")),
                ("speaker", pa.string()),
                ("conversation", pa.string()),
                ("seq", pa.int64()),
            ]
        ),
    )
    db.with_arrow(
        "_nbm_new_chunks",
        table,
        """
        INSERT INTO chunks (id, doc_id, namespace, kind, source, ordinal, text, heading,
            cell_id, cell_index, line_start, line_end, page, content_hash, tags, importance,
            event_at, speaker, conversation, created_at, updated_at, seq)
        SELECT id, doc_id, namespace, kind, source, ordinal, text, heading, cell_id,
            cell_index, line_start, line_end, page, content_hash, tags, importance,
            event_at, speaker, conversation, ?, ?, seq
        FROM _nbm_new_chunks
        """,
        [now, now],
    )
    vectors.put(db, ids, vecs, fresh=True)
    fts.add_delta(db, ids, postings, fresh=True)
    return ids


def write_documents(
    db: Database,
    docs: list[tuple[int, str, str, str, str, float, int]],
    new_ids: set[int],
    now: datetime,
) -> None:
    """Insert new document rows and update changed ones, one statement each (caller's transaction).

    ``docs`` holds (id, namespace, path, kind, content hash, mtime, size).
    """
    import pyarrow as pa

    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("namespace", pa.string()),
            ("path", pa.string()),
            ("kind", pa.string()),
            ("content_hash", pa.string()),
            ("mtime", pa.float64()),
            ("size", pa.int64()),
        ]
    )
    for is_new in (True, False):
        part = [d for d in docs if (d[0] in new_ids) == is_new]
        if not part:
            continue
        table = pa.Table.from_pylist([dict(zip(schema.names, d, strict=True)) for d in part], schema=schema)
        if is_new:
            sql = (
                "INSERT INTO documents (id, namespace, path, kind, content_hash, mtime, size, indexed_at) "
                "SELECT id, namespace, path, kind, content_hash, mtime, size, ? FROM _nbm_docs"
            )
        else:
            sql = (
                "UPDATE documents SET content_hash = t.content_hash, mtime = t.mtime, size = t.size, "
                "kind = t.kind, indexed_at = ? FROM _nbm_docs t WHERE documents.id = t.id"
            )
        db.with_arrow("_nbm_docs", table, sql, [now])


def update_positions(db: Database, keep: list[tuple[int, NewChunk]]) -> None:
    """Move kept chunks to their new place in the file (ordinal, cell, line range, page)."""
    if not keep:
        return
    import pyarrow as pa

    table = pa.table(
        {
            "id": pa.array([cid for cid, _ in keep], pa.int64()),
            "ordinal": pa.array([r.ordinal for _, r in keep], pa.int32()),
            "cell_id": pa.array([r.cell_id for _, r in keep], pa.string()),
            "cell_index": pa.array([r.cell_index for _, r in keep], pa.int32()),
            "line_start": pa.array([r.line_start for _, r in keep], pa.int32()),
            "line_end": pa.array([r.line_end for _, r in keep], pa.int32()),
            "page": pa.array([r.page for _, r in keep], pa.int32()),
        }
    )
    db.with_arrow(
        "_nbm_pos",
        table,
        "UPDATE chunks SET ordinal = t.ordinal, cell_id = t.cell_id, cell_index = t.cell_index, "
        "line_start = t.line_start, line_end = t.line_end, page = t.page FROM _nbm_pos t "
        "WHERE chunks.id = t.id",
    )
    db.rows_changed(cid for cid, _ in keep)


def purge(db: Database, chunk_ids: list[int]) -> None:
    """Hard-delete chunks (replaced file content) with their vectors, postings and links."""
    if not chunk_ids:
        return
    db.cache.pop("fts_corpus", None)  # the delta's size is cached by the BM25 retriever
    db.chunks_written(chunk_ids)
    for table, column in (
        ("vectors", "chunk_id"),
        ("fts_delta", "chunk_id"),
        ("fts_delta_docs", "chunk_id"),
        ("links", "src"),
        ("links", "dst"),
        ("chunks", "id"),
    ):
        db.execute(f"DELETE FROM {table} WHERE {column} IN (SELECT unnest(?::BIGINT[]))", [chunk_ids])


def soft_delete(db: Database, chunk_ids: list[int], reason: str, now: datetime) -> int:
    """Mark chunks forgotten and drop their derived search data; the text row is kept."""
    if not chunk_ids:
        return 0
    live = [
        int(r[0])
        for r in db.fetchall(
            "SELECT id FROM chunks WHERE id IN (SELECT unnest(?::BIGINT[])) AND deleted_at IS NULL",
            [chunk_ids],
        )
    ]
    if not live:
        return 0
    db.execute(
        "UPDATE chunks SET deleted_at = ?, deleted_reason = ? WHERE id IN (SELECT unnest(?::BIGINT[]))",
        [now, reason, live],
    )
    db.cache.pop("fts_corpus", None)  # the delta's size is cached by the BM25 retriever
    for table in ("vectors", "fts_delta", "fts_delta_docs"):
        db.execute(f"DELETE FROM {table} WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))", [live])
    db.chunks_written(live)
    return len(live)


def forgotten(db: Database, chunk_ids: list[int]) -> list[tuple[int, str, str, str, str]]:
    """``(id, heading, text, kind, content hash)`` of the chunks among ``chunk_ids`` that are forgotten."""
    rows = db.fetchall(
        "SELECT id, coalesce(heading, ''), text, kind, content_hash FROM chunks "
        "WHERE id IN (SELECT unnest(?::BIGINT[])) AND deleted_at IS NOT NULL ORDER BY id",
        [chunk_ids],
    )
    return [(int(r[0]), r[1], r[2], r[3], r[4]) for r in rows]


def backdate(db: Database, ids: Sequence[int], when: Sequence[datetime]) -> None:
    """Set the items' ``created_at`` and ``updated_at`` to ``when`` (an evaluation's timeline), in
    one transaction."""
    import pyarrow as pa

    table = pa.table({"id": pa.array(list(ids), pa.int64()), "at": pa.array(when, pa.timestamp("us"))})
    with db.transaction():
        db.with_arrow(
            "_nbm_ages",
            table,
            "UPDATE chunks SET created_at = t.at, updated_at = t.at FROM _nbm_ages t WHERE chunks.id = t.id",
        )
        db.rows_changed(ids)


def restore(db: Database, chunk_ids: list[int], vecs: np.ndarray) -> None:
    """Bring forgotten chunks back with their vectors (inside the caller's transaction): the
    mark is cleared, their postings are written again where the FTS snapshot lacks them, and
    their files may be indexed again."""
    if not chunk_ids:
        return
    db.execute(
        "UPDATE chunks SET deleted_at = NULL, deleted_reason = NULL WHERE id IN (SELECT unnest(?::BIGINT[]))",
        [chunk_ids],
    )
    db.execute(
        "UPDATE documents SET forgotten_at = NULL WHERE id IN "
        "(SELECT doc_id FROM chunks WHERE id IN (SELECT unnest(?::BIGINT[])))",
        [chunk_ids],
    )
    vectors.put(db, chunk_ids, vecs)
    # The snapshot indexes every chunk, forgotten or not: only those written after it need delta
    # postings again (soft_delete dropped them).
    later = [
        int(r[0])
        for r in db.fetchall(
            "SELECT id FROM chunks WHERE id IN (SELECT unnest(?::BIGINT[])) AND seq > ?",
            [chunk_ids, fts.watermark(db)],
        )
    ]
    fts.add_delta(db, later)
    db.cache.pop("fts_corpus", None)
    db.chunks_written(chunk_ids)
