"""Checks of user input shared by every write and search: Unicode, tags, importance."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from nbmemory.errors import ConfigError
from nbmemory.search.filters import Filters, parse_when


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


def check_batch(
    texts: Sequence[str], sources: Sequence[str | None] | None, headings: Sequence[str] | None
) -> None:
    """Every text non-empty and valid, and one source and heading per text when given."""
    if sources is not None and len(sources) != len(texts):
        raise ConfigError(f"sources has {len(sources)} entries for {len(texts)} texts")
    if headings is not None and len(headings) != len(texts):
        raise ConfigError(f"headings has {len(headings)} entries for {len(texts)} texts")
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
) -> Filters:
    """The filters of one search, after checking the query and every filter value."""
    kinds = (kind,) if isinstance(kind, str) else tuple(kind or ())
    for what, value in (("the query", query), ("namespace", namespace), ("path", path)):
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
    )
