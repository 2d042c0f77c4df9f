"""The stored columns a search reads, by name: a hit's columns, and the recency signals."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from nbmemory.store.db import Database


@dataclass(frozen=True)
class HitRow:
    """The columns of a live chunk that a :class:`~nbmemory.items.Hit` shows (named as in ``chunks``)."""

    id: int
    text: str
    source: str | None
    kind: str
    namespace: str
    heading: str
    cell_id: str | None
    cell_index: int | None
    line_start: int | None
    line_end: int | None
    page: int | None
    tags: list[str] | None
    importance: float
    updated_at: datetime
    event_at: datetime | None
    speaker: str | None
    conversation: str | None


@dataclass(frozen=True)
class CandidateRow(HitRow):
    """A hit's columns plus what the recency stage weighs."""

    created_at: datetime
    last_retrieved_at: datetime | None
    retrieval_count: int
    pinned: bool
    #: Keys the chunk's passage vectors (:mod:`nbmemory.store.passages`).
    content_hash: str


R = TypeVar("R", bound=HitRow)


#: Rows kept per open file: the candidates of recent searches come back search after search.
ROW_CACHE = 20_000
#: Up to this many chunks, the memory-resident index (:mod:`nbmemory.search.hot`) also holds every
#: live row, so a search reads no row from the table (each statement has a fixed cost); past it,
#: holding every row's text would cost the process too much memory.
PRELOAD_MAX = 60_000
_COLUMNS = [f.name for f in dataclasses.fields(CandidateRow)]


def read_all(con: Any) -> dict[int, CandidateRow]:
    """Every live chunk's row, read through ``con`` (a DuckDB connection or cursor)."""
    rows = con.execute(f"SELECT {', '.join(_COLUMNS)} FROM chunks WHERE deleted_at IS NULL").fetchall()
    return {int(values[0]): CandidateRow(*values) for values in rows}


def install(db: Database, rows: dict[int, CandidateRow], epoch: int) -> None:
    """Use ``rows`` (read in a snapshot that began at ``epoch`` with no row dirty) for searches."""
    db.cache["preloaded_rows"] = (epoch, rows)


def preloaded(db: Database) -> dict[int, CandidateRow] | None:
    """Every live row as the memory-resident index read it, while no write since then changed
    them all; rows written since are in :attr:`Database.dirty_rows`. None when not held."""
    held = db.cache.get("preloaded_rows")
    return held[1] if isinstance(held, tuple) and held[0] == db.row_epoch else None


def recency_rows(db: Database, ids: Sequence[int]) -> list[tuple[Any, ...]]:
    """``(id, created_at, last_retrieved_at, importance, retrieval_count, pinned)`` of the live
    items among ``ids`` (the ids are written into the statement)."""
    return db.fetchall(
        "SELECT id, created_at, last_retrieved_at, importance, retrieval_count, pinned FROM chunks "
        f"WHERE id IN ({', '.join(str(int(i)) for i in ids)}) AND deleted_at IS NULL"
    )


def fetch_rows(db: Database, ids: list[int], row: type[R]) -> dict[int, R]:
    """Id -> ``row`` for each id that is a live chunk; the columns read are ``row``'s fields.

    Rows are read as :class:`CandidateRow` (every field a search uses): from the rows the
    memory-resident index holds unless written since (:attr:`Database.dirty_rows`), else from
    the table, and kept in ``db.cache`` until a write changes them (:meth:`Database.rows_changed`,
    called by every statement that updates chunks).
    """
    cache: dict[int, CandidateRow] = db.cache.setdefault("rows", {})  # type: ignore[assignment]
    cached, dirty, held = cache.get, db.dirty_rows, (preloaded(db) or {}).get
    out: dict[int, R] = {}
    missing = []
    ids = list(map(int, ids))
    for i in ids:
        got = cached(i)
        if got is None and i not in dirty:
            got = held(i)
        if got is None:
            missing.append(i)
        else:
            out[i] = got  # type: ignore[assignment]  # a CandidateRow is every row type
    if not missing:
        return out  # in the order of ids already
    # Ids inlined (integers): faster than joining an unnested parameter.
    found = db.fetchall(
        f"SELECT {', '.join(_COLUMNS)} FROM chunks WHERE id IN ({', '.join(map(str, missing))}) "
        "AND deleted_at IS NULL"
    )
    if len(cache) + len(found) > ROW_CACHE:
        cache.clear()
    for values in found:
        cache[int(values[0])] = CandidateRow(*values)
        out[int(values[0])] = cache[int(values[0])]  # type: ignore[assignment]
    return {i: out[i] for i in ids if i in out}
