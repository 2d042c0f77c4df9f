"""Checks of user input shared by every write and search: Unicode, tags, importance, event times."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime

from nbmemory.errors import ConfigError
from nbmemory.search.filters import Filters, naive_utc, parse_when


def check_unicode(value: str | None, what: str) -> None:
    """Raise ConfigError for a string DuckDB cannot store or compare: one with lone surrogates."""
    if value is None:
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(
            f"{what} is not valid Unicode: lone surrogate U+{ord(value[exc.start]):04X} at position "
            f"{exc.start} (text decoded from bytes that are not UTF-8?); remove or replace it"
        ) from None


def check_fields(**values: str | None) -> None:
    """:func:`check_unicode` on each named value."""
    for what, value in values.items():
        check_unicode(value, what)


def check_importance(importance: float) -> None:
    if not 0.0 <= importance <= 1.0:
        raise ConfigError(f"importance must be between 0 and 1, got {importance}")


def clean_tags(tags: Sequence[str] | str) -> list[str]:
    """Tags stripped and de-duplicated, in order; a string is a comma-separated list."""
    if isinstance(tags, str):
        tags = tags.split(",")
    out: list[str] = []
    for tag in tags:
        check_unicode(tag, "tag")
        tag = tag.strip()
        if tag and tag not in out:
            out.append(tag)
    return out


def event_time(value: str | datetime | date | None, what: str = "at") -> datetime | None:
    """When a remembered thing was said or happened, as the store keeps times: naive UTC.

    Takes a datetime (an aware one is converted to UTC; a naive one is taken as UTC), a date
    (its midnight) or an ISO 8601 string (``2023-05-08``, ``2023-05-08T13:56``,
    ``2023-05-08T13:56:00+02:00``, ``...Z``); None or ``""`` is none. Anything else is a
    ConfigError naming it.
    """
    if value is None or value == "":
        return None
    named = f"{what} {value!r}"
    if isinstance(value, str):
        check_unicode(value, what)
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ConfigError(
                f"{named} is not an ISO 8601 time: use e.g. 2023-05-08, 2023-05-08T13:56 "
                "or 2023-05-08T13:56:00+02:00"
            ) from None
    elif not isinstance(value, datetime) and isinstance(value, date):
        value = datetime(value.year, value.month, value.day)
    if not isinstance(value, datetime):
        raise ConfigError(f"{what} must be a datetime or an ISO 8601 string, got {type(value).__name__}")
    return naive_utc(value, named)


def turn_field(value: object, what: str) -> str | None:
    """A speaker or conversation name as stored: a valid string, or None (``""`` is none)."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{what} must be a string, got {type(value).__name__} {value!r}")
    check_unicode(value, what)
    return value


def check_batch(
    texts: Sequence[str],
    sources: Sequence[str | None] | None,
    headings: Sequence[str] | None,
    **aligned: Sequence[object] | None,
) -> None:
    """Every text non-empty and valid, and one source and heading per text when given; likewise
    one entry per text of each sequence in ``aligned`` (by its argument's name) that is given."""
    for what, values in {"sources": sources, "headings": headings, **aligned}.items():
        if isinstance(values, str):
            raise ConfigError(f"{what} must be a list with one entry per text, not the string {values!r}")
        if values is not None and len(values) != len(texts):
            raise ConfigError(f"{what} has {len(values)} entries for {len(texts)} texts")
    for i, text in enumerate(texts):
        if not text or not text.strip():
            raise ConfigError(f"text {i} is empty: nothing was stored")
        check_unicode(text, f"text {i}")
        check_unicode(headings[i] if headings is not None else None, f"heading {i}")
        check_unicode(sources[i] if sources is not None else None, f"source {i}")


def search_filters(
    query: str,
    namespace: str | None,
    kind: str | Sequence[str] | None,
    path: str | None,
    tags: Sequence[str],
    since: str | datetime | None,
    until: str | datetime | None,
    speaker: str | None = None,
    conversation: str | None = None,
) -> Filters:
    """The filters of one search, after checking the query and every filter value."""
    kinds = (kind,) if isinstance(kind, str) else tuple(kind or ())
    for what, value in (
        ("the query", query),
        ("namespace", namespace),
        ("path", path),
        ("speaker", speaker),
        ("conversation", conversation),
    ):
        check_unicode(value, what)
    for value in (*tags, *kinds):
        check_unicode(value, "filter")
    return Filters(
        namespace=namespace,
        kinds=kinds,
        path=path,
        tags=tuple(tags),
        since=parse_when(since),
        until=parse_when(until),
        speaker=speaker,
        conversation=conversation,
    )
