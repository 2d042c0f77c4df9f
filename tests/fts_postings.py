"""Delta postings of some items, then the snapshot's after a rebuild, in one comparable form."""

from __future__ import annotations

from typing import Any

from nbmemory import Memory
from nbmemory.store import fts


def delta_then_snapshot(
    mem: Memory, ids: list[int]
) -> tuple[set[Any], dict[int, int], set[Any], dict[int, int]]:
    """``(delta postings, delta lengths, snapshot postings, snapshot lengths)`` of ``ids``.

    Postings are ``(chunk id, field, term, tf)``; the delta is read first, then the FTS snapshot is
    rebuilt and read the same way.
    """
    delta = set(
        mem.db.fetchall(
            "SELECT chunk_id, field, term, tf FROM fts_delta WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))",
            [ids],
        )
    )
    lens = dict(mem.db.fetchall("SELECT chunk_id, len FROM fts_delta_docs"))
    fts.rebuild(mem.db)
    snapshot = set(
        mem.db.fetchall(
            f"SELECT d.name, t.fieldid, dict.term, count(*)::INTEGER FROM {fts.FTS_SCHEMA}.terms t "
            f"JOIN {fts.FTS_SCHEMA}.docs d USING (docid) JOIN {fts.FTS_SCHEMA}.dict dict USING (termid) "
            "WHERE d.name IN (SELECT unnest(?::BIGINT[])) GROUP BY ALL",
            [ids],
        )
    )
    snapshot_lens = dict(
        mem.db.fetchall(
            f"SELECT name, len FROM {fts.FTS_SCHEMA}.docs WHERE name IN (SELECT unnest(?::BIGINT[]))", [ids]
        )
    )
    return delta, lens, snapshot, snapshot_lens
