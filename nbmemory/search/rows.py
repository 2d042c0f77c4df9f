"""The stored columns a search reads, by name: a hit's columns, and the recency signals."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

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


@dataclass(frozen=True)
class CandidateRow(HitRow):
    """A hit's columns plus what the recency stage weighs."""

    created_at: datetime
    last_retrieved_at: datetime | None
    retrieval_count: int
    pinned: bool


R = TypeVar("R", bound=HitRow)


#: Rows kept per open file: the candidates of recent searches come back search after search.
ROW_CACHE = 20_000


def fetch_rows(db: Database, ids: list[int], row: type[R]) -> dict[int, R]:
    """Id -> ``row`` for each id that is a live chunk; the columns read are ``row``'s fields.

    Rows are read as :class:`CandidateRow` (every field a search uses) and kept in ``db.cache``
    until a write changes them (:meth:`Database.rows_changed`, called by every statement that
    updates chunks): a statement costs 1-2 ms, a cached row nothing.
    """
    cache: dict[int, CandidateRow] = db.cache.setdefault("rows", {})  # type: ignore[assignment]
    missing = [int(i) for i in ids if int(i) not in cache]
    if missing:
        names = [f.name for f in dataclasses.fields(CandidateRow)]
        # Ids inlined (integers): faster than joining an unnested parameter.
        found = db.fetchall(
            f"SELECT {', '.join(names)} FROM chunks WHERE id IN ({', '.join(map(str, missing))}) "
            "AND deleted_at IS NULL"
        )
        if len(cache) + len(found) > ROW_CACHE:
            cache.clear()
        for values in found:
            cache[int(values[0])] = CandidateRow(**dict(zip(names, values, strict=True)))
    out: dict[int, R] = {}
    for i in ids:
        hit = cache.get(int(i))
        if hit is not None:
            out[int(i)] = hit  # type: ignore[assignment]  # a CandidateRow is every row type
    return out
