"""Search filters, turned into one SQL condition on the chunks table (alias ``c``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from nbmemory.errors import ConfigError
from nbmemory.items import KINDS

_RELATIVE = re.compile(r"^\s*(\d+)\s*([mhdwy])\s*$")
_UNITS = {
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
    "w": timedelta(weeks=1),
    "y": timedelta(days=365),
}


def parse_when(value: str | datetime | None, now: datetime | None = None) -> datetime | None:
    """``"30d"``, ``"12h"``, ``"2w"`` (that long ago), an ISO date/time, or a datetime; one with a
    time zone is made naive UTC, as the store keeps its times."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return naive_utc(value, f"date {value!r}")
    match = _RELATIVE.match(value)
    if match:
        base = now or datetime.utcnow()
        return base - int(match.group(1)) * _UNITS[match.group(2)]
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ConfigError(
            f"date {value!r} not understood: use an ISO date like 2026-01-31 or an age like 30d, 12h, 2w"
        ) from None
    return naive_utc(when, f"date {value!r}")


def naive_utc(when: datetime, what: str) -> datetime:
    """``when`` as naive UTC, as the store keeps times (a naive one is UTC already); ``what``
    names it in the error of one out of range once converted."""
    if when.tzinfo is None:
        return when
    try:
        return when.astimezone(UTC).replace(tzinfo=None)
    except OverflowError:
        raise ConfigError(f"{what} is out of range once converted to UTC") from None


@dataclass(frozen=True)
class Filters:
    """What a search is restricted to. Empty fields restrict nothing.

    Parameters
    ----------
    namespace:
        One namespace; ``None`` searches all of them.
    kinds:
        Any of ``markdown``, ``notebook``, ``code``, ``text``, ``memory`` (remembered items),
        ``execution`` (cells a kernel ran, :mod:`nbmemory.executions`).
    path:
        A glob on the source path, e.g. ``"*/ops/*.md"``.
    tags:
        Items must carry every one of these tags.
    since, until:
        Range on when the item's content happened: its event time (``event_at``, when a
        conversation turn was said) where it has one, else its last update time.
    speaker:
        Only items said by this speaker (exactly, e.g. ``"user"`` or ``"Caroline"``).
    conversation:
        Only items of this conversation or session (exactly).
    """

    namespace: str | None = None
    kinds: tuple[str, ...] = ()
    path: str | None = None
    tags: tuple[str, ...] = ()
    since: datetime | None = None
    until: datetime | None = None
    speaker: str | None = None
    conversation: str | None = None
    ids: tuple[int, ...] = field(default=())

    def __post_init__(self) -> None:
        for kind in self.kinds:
            if kind not in KINDS:
                raise ConfigError(f"kind {kind!r} is not one of {', '.join(KINDS)}")

    @property
    def empty(self) -> bool:
        return self.sql()[0] == "TRUE"

    def sql(self) -> tuple[str, list[Any]]:
        """SQL condition on alias ``c`` and its parameters."""
        parts: list[str] = []
        params: list[Any] = []
        if self.namespace is not None:
            parts.append("c.namespace = ?")
            params.append(self.namespace)
        if self.kinds:
            ors = []
            for kind in self.kinds:
                ors.append("(c.kind = ? OR starts_with(c.kind, ?))")
                params += [kind, kind + "-"]
            parts.append("(" + " OR ".join(ors) + ")")
        if self.path:
            parts.append("c.source GLOB ?")
            params.append(self.path)
        if self.tags:
            parts.append("list_has_all(c.tags, ?::VARCHAR[])")
            params.append(list(self.tags))
        # When the thing happened where it is known (a conversation turn), else when it was written.
        if self.since is not None:
            parts.append("coalesce(c.event_at, c.updated_at) >= ?")
            params.append(self.since)
        if self.until is not None:
            parts.append("coalesce(c.event_at, c.updated_at) <= ?")
            params.append(self.until)
        if self.speaker is not None:
            parts.append("c.speaker = ?")
            params.append(self.speaker)
        if self.conversation is not None:
            parts.append("c.conversation = ?")
            params.append(self.conversation)
        if self.ids:
            parts.append("c.id IN (SELECT unnest(?::BIGINT[]))")
            params.append(list(self.ids))
        return (" AND ".join(parts) if parts else "TRUE"), params
