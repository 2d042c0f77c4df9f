"""What the memory-resident index (:mod:`nbmemory.search.hot`) reads to build and refresh itself:
the chunks' liveness, sequence and filter columns, the vectors, the BM25 postings of the snapshot
and of the delta (:mod:`nbmemory.store.fts`), and the index terms a prefix expands to.

``con`` is a snapshot connection (:meth:`nbmemory.store.db.Database.snapshot`) or the
:class:`~nbmemory.store.db.Database` itself: both run a statement with ``execute``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from nbmemory.store import fts
from nbmemory.store.db import Database


def chunk_columns(con: Any) -> list[str]:
    """The names of the chunks table's columns."""
    return [d[0] for d in con.execute("SELECT * FROM chunks LIMIT 0").description]


def chunk_flags(con: Any, columns: str) -> pa.Table:
    """``id, live, seq`` and the ``columns`` (a select list, each after a comma) of every chunk, by id."""
    return con.execute(
        f"SELECT id, deleted_at IS NULL AS live, seq{columns} FROM chunks ORDER BY id"
    ).to_arrow_table()


def chunk_flags_of(db: Database, columns: str, ids: Sequence[int]) -> pa.Table:
    """:func:`chunk_flags` of the chunks ``ids`` only."""
    return db.execute(
        f"SELECT id, deleted_at IS NULL AS live, seq{columns} FROM chunks "
        "WHERE id IN (SELECT unnest(?::BIGINT[])) ORDER BY id",
        [list(ids)],
    ).to_arrow_table()


def vector_table(con: Any) -> pa.Table:
    """``chunk_id, vec`` of every stored vector."""
    return con.execute("SELECT chunk_id, vec FROM vectors").to_arrow_table()


def terms(con: Any) -> list[tuple[Any, ...]]:
    """``(term, termid, df)`` of the full-text index's dictionary."""
    return con.execute(f"SELECT term, termid, df FROM {fts.FTS_SCHEMA}.dict").fetchall()


def postings(con: Any) -> pa.Table:
    """``termid, chunk_id, tf, len`` of every posting of the snapshot, sorted by (termid, chunk_id)."""
    return con.execute("SELECT termid, chunk_id, tf, len FROM fts_postings").to_arrow_table()


def _only(chunk_ids: Sequence[int] | None) -> tuple[str, list[Any] | None]:
    if chunk_ids is None:
        return "", None
    return " WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))", [list(chunk_ids)]


def delta_postings(con: Any, chunk_ids: Sequence[int] | None) -> pa.Table:
    """``term, chunk_id, tf`` of the delta's postings (of ``chunk_ids``, all when None), a heading's
    terms weighted as the index weighs them, sorted by (term, chunk_id)."""
    where, params = _only(chunk_ids)
    return con.execute(
        f"SELECT term, chunk_id, sum(CASE WHEN field = 0 THEN tf ELSE {fts.HEADING_WEIGHT} * tf END)::DOUBLE "
        f"AS tf FROM fts_delta{where} GROUP BY term, chunk_id ORDER BY term, chunk_id",
        params,
    ).to_arrow_table()


def delta_lengths(con: Any, chunk_ids: Sequence[int] | None) -> pa.Table:
    """``chunk_id, len`` of the delta's documents (of ``chunk_ids``, all when None)."""
    where, params = _only(chunk_ids)
    return con.execute(f"SELECT chunk_id, len FROM fts_delta_docs{where}", params).to_arrow_table()


def live_ids_where(db: Database, where: str, params: Sequence[Any]) -> pa.Table:
    """``id`` of the live chunks meeting ``where`` (a condition on alias ``c``)."""
    return db.execute(
        f"SELECT c.id FROM chunks c WHERE c.deleted_at IS NULL AND ({where})", list(params)
    ).to_arrow_table()


def chunk_count(db: Database) -> int:
    """How many chunks the table holds, forgotten ones included."""
    return int(db.scalar("SELECT count(*) FROM chunks"))


def prefix_terms(db: Database, prefix: str, most: int) -> list[str]:
    """The index terms that begin with ``prefix``, by the number of chunks holding them (snapshot
    and delta together), most first; at most ``most``."""
    rows = db.fetchall(
        "SELECT term, sum(df) AS df FROM ("
        f"  SELECT term, df FROM {fts.FTS_SCHEMA}.dict WHERE starts_with(term, ?)"
        "  UNION ALL"
        "  SELECT term, count(DISTINCT chunk_id) FROM fts_delta WHERE starts_with(term, ?) GROUP BY term"
        ") GROUP BY term ORDER BY df DESC, term LIMIT ?",
        [prefix, prefix, most],
    )
    return [str(r[0]) for r in rows]
