"""A query's own time words ("yesterday", "last week", "in March") as a time filter.

"What did I run yesterday" asks for yesterday's work, not for items holding the word. When a
query names a time relative to now, the search is narrowed to the items that happened then
(their event time, else their last update, as ``since``/``until`` compare), but only when the
memory holds some: a memory of last year's conversations asked about "yesterday" is searched
whole, and the trace says why either way. Dates a question names inside a conversation's own
time ("in June" of a chat held in 2023) are left to :mod:`nbmemory.search.turns`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from nbmemory.search import filter_mask, hot
from nbmemory.search.filters import Filters
from nbmemory.search.turns import MONTHS
from nbmemory.store import search_reads
from nbmemory.store.db import Database

_UNITS = {"day": 1, "week": 7}
_WORDS = re.compile(
    r"""(?xi)
    \b(?P<today>today|this\s+morning|this\s+afternoon|tonight)\b
    | \b(?P<yesterday>yesterday)\b
    | \b(?P<this>this|last|past)\s+(?P<span>week|month|year)\b
    | \b(?:in\s+the\s+)?(?:last|past)\s+(?P<n>\d{1,3})\s+(?P<nunit>day|week)s?\b
    | \b(?P<ago>\d{1,3})\s+(?P<agounit>day|week)s?\s+ago\b
    | \b(?:in|during|since)\s+(?P<month>January|February|March|April|May|June|July|August|September|October|November|December)\b(?!\s+\d)
    """.replace("{months}", "|".join(MONTHS))
)


@dataclass(frozen=True)
class Window:
    """When a query's time words say: ``since`` up to (not including) ``until``, naive UTC, and
    the words as written."""

    since: datetime
    until: datetime
    words: str


def time_window(query: str, now: datetime) -> Window | None:
    """The first time relative to ``now`` that ``query`` names, or None.

    Understood: today (this morning, tonight), yesterday, this/last/past week, month or year, the
    last N days or weeks, N days or weeks ago, and "in <month>" without a year (the latest such
    month that has begun).
    """
    m = _WORDS.search(query)
    if m is None:
        return None
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    words = m.group(0)
    if m.group("today"):
        return Window(day, day + timedelta(days=1), words)
    if m.group("yesterday"):
        return Window(day - timedelta(days=1), day, words)
    if m.group("span"):
        return _span(m.group("this").lower(), m.group("span").lower(), day, now, words)
    if m.group("n"):
        days = int(m.group("n")) * _UNITS[m.group("nunit").lower()]
        return Window(now - timedelta(days=days), now + timedelta(seconds=1), words)
    if m.group("ago"):
        days = int(m.group("ago")) * _UNITS[m.group("agounit").lower()]
        start = day - timedelta(days=days)
        return Window(start, start + timedelta(days=_UNITS[m.group("agounit").lower()]), words)
    month = [name.lower() for name in MONTHS].index(m.group("month").lower()) + 1
    year = now.year if month <= now.month else now.year - 1
    start = datetime(year, month, 1)
    end = datetime(year + (month == 12), month % 12 + 1, 1)
    return Window(start, end, words)


def _span(which: str, span: str, day: datetime, now: datetime, words: str) -> Window:
    if span == "week":
        start = day - timedelta(days=day.weekday())
        if which == "this":
            return Window(start, start + timedelta(days=7), words)
        if which == "past":
            return Window(now - timedelta(days=7), now + timedelta(seconds=1), words)
        return Window(start - timedelta(days=7), start, words)
    if span == "month":
        start = day.replace(day=1)
        if which == "this":
            return Window(start, _next_month(start), words)
        if which == "past":
            return Window(now - timedelta(days=30), now + timedelta(seconds=1), words)
        previous = (start - timedelta(days=1)).replace(day=1)
        return Window(previous, start, words)
    start = day.replace(month=1, day=1)
    if which == "this":
        return Window(start, start.replace(year=start.year + 1), words)
    if which == "past":
        return Window(now - timedelta(days=365), now + timedelta(seconds=1), words)
    return Window(start.replace(year=start.year - 1), start, words)


def _next_month(first: datetime) -> datetime:
    return first.replace(year=first.year + (first.month == 12), month=first.month % 12 + 1)


def narrowed(filters: Filters, window: Window) -> Filters:
    """``filters`` further restricted to ``window`` (within any ``since``/``until`` already set)."""
    since = max(filters.since, window.since) if filters.since is not None else window.since
    until = window.until - timedelta(microseconds=1)
    until = min(filters.until, until) if filters.until is not None else until
    return replace(filters, since=since, until=until)


def happened_in(db: Database, filters: Filters, window: Window) -> int:
    """How many live items matching ``filters`` have an event time inside ``window`` (0 or more:
    counted from the memory-resident index's columns when it serves, else through SQL)."""
    with db.lock:
        index = hot.serving(db)
        if index is not None and "event_at" in index.columns.present:
            said = index.columns.times["event_at"]
            lo, hi = filter_mask.micros(window.since), filter_mask.micros(window.until)
            ok = index.live & (said != filter_mask.NULL_TIME) & (said >= lo) & (said < hi)
            allowed = index.allowed(db, filters)
            if allowed is not None:
                ok &= allowed
            return int(ok.sum())
    return search_reads.count_said_between(db, window.since, window.until, *filters.sql())
