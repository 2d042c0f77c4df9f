"""What the search stages read beyond a hit's columns (:mod:`nbmemory.store.rows`): items under a
filter condition, the links that supersede, a conversation's neighbouring turns, the symbols'
holders, the sources' first headings.

A ``where`` is a condition on alias ``c`` (the chunks table) with its ``params``, as
:meth:`nbmemory.search.filters.Filters.sql` makes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from nbmemory.store.db import Database


def allowed_ids(db: Database, ids: Sequence[int], where: str, params: Sequence[Any]) -> list[int]:
    """Those of ``ids`` that are live and meet ``where`` (in no particular order)."""
    rows = db.fetchall(
        f"SELECT c.id FROM chunks c WHERE c.id IN (SELECT unnest(?::BIGINT[])) AND c.deleted_at IS NULL AND ({where})",
        [list(ids), *params],
    )
    return [int(r[0]) for r in rows]


def allowed_sorted(db: Database, ids: Sequence[int], where: str, params: Sequence[Any]) -> list[int]:
    """Those of ``ids`` that are live and meet ``where``, by id (the ids are written into the statement)."""
    rows = db.fetchall(
        f"SELECT c.id FROM chunks c WHERE c.id IN ({', '.join(map(str, ids))}) "
        f"AND c.deleted_at IS NULL AND ({where}) ORDER BY c.id",
        list(params),
    )
    return [int(r[0]) for r in rows]


def count_said_between(
    db: Database, since: datetime, until: datetime, where: str, params: Sequence[Any]
) -> int:
    """How many live items meeting ``where`` were said in ``[since, until)`` (``event_at``)."""
    return int(
        db.scalar(
            f"SELECT count(*) FROM chunks c WHERE c.deleted_at IS NULL AND c.event_at >= ? AND c.event_at < ? AND ({where})",
            [since, until, *params],
        )
    )


def superseding(db: Database, ids: Sequence[int]) -> list[tuple[Any, ...]]:
    """``(old id, newer live id)`` for each ``supersedes`` link onto ``ids``, the oldest newer item first."""
    return db.fetchall(
        "SELECT l.dst, l.src FROM links l JOIN chunks c ON c.id = l.src "
        "WHERE l.type = 'supersedes' AND c.deleted_at IS NULL AND l.dst IN (SELECT unnest(?::BIGINT[])) "
        "ORDER BY c.created_at, l.src",
        [list(ids)],
    )


def any_supersedes_links(db: Database) -> bool:
    """Whether the memory holds a ``supersedes`` link."""
    return bool(db.scalar("SELECT count(*) FROM links WHERE type = 'supersedes'"))


def turn_neighbours(db: Database, ids: Sequence[int]) -> list[tuple[Any, ...]]:
    """``(id, previous id, next id)`` of each of ``ids`` among the live turns of its conversation,
    in the order they were said (``event_at``, then id); None where there is none."""
    return db.fetchall(
        """
        WITH wanted AS (
            SELECT DISTINCT namespace, conversation FROM chunks
            WHERE id IN (SELECT unnest(?::BIGINT[])) AND conversation IS NOT NULL
        )
        SELECT id, prev, next FROM (
            SELECT c.id, lag(c.id) OVER w AS prev, lead(c.id) OVER w AS next
            FROM chunks c JOIN wanted USING (namespace, conversation)
            WHERE c.deleted_at IS NULL
            WINDOW w AS (PARTITION BY c.namespace, c.conversation ORDER BY c.event_at NULLS LAST, c.id)
        ) WHERE id IN (SELECT unnest(?::BIGINT[]))
        """,
        [list(ids), list(ids)],
    )


def text_matches(db: Database, found: str, args: Sequence[Any], where: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """``(id, meets where, heading, text)`` of every live chunk matching the condition ``found``
    (on alias ``c``, with ``args``), by id."""
    return db.fetchall(
        f"SELECT c.id, ({where}) AS allowed, c.heading, c.text FROM chunks c "
        f"WHERE c.deleted_at IS NULL AND ({found}) ORDER BY c.id",
        [*params, *args],
    )


def first_headings(db: Database) -> list[tuple[Any, ...]]:
    """``(source, heading of its first chunk, id of its first chunk)`` for every source of live chunks."""
    return db.fetchall(
        """
        SELECT source, arg_min(heading, ordinal), arg_min(id, ordinal) FROM chunks
        WHERE deleted_at IS NULL AND source IS NOT NULL GROUP BY source
        """
    )
