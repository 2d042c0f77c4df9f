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


def fetch_rows(db: Database, ids: list[int], row: type[R]) -> dict[int, R]:
    """Id -> ``row`` for each id that is a live chunk; the columns read are ``row``'s fields."""
    if not ids:
        return {}
    names = [f.name for f in dataclasses.fields(row)]
    # Ids inlined (integers): an IN list over the primary key is read through its index, about
    # twice as fast as joining an unnested parameter.
    found = db.fetchall(
        f"SELECT {', '.join(names)} FROM chunks "
        f"WHERE id IN ({', '.join(str(int(i)) for i in ids)}) AND deleted_at IS NULL"
    )
    return {int(values[0]): row(**dict(zip(names, values, strict=True))) for values in found}
