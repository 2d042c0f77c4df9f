"""Checks of user input shared by every write and search: Unicode, tags, importance."""

from __future__ import annotations

from collections.abc import Sequence

from nbmemory.errors import ConfigError


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
