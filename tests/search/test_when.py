"""A query's own time words as a time filter (:mod:`nbmemory.search.when`)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from nbmemory.search.filters import Filters
from nbmemory.search.when import Window, narrowed, time_window

NOW = datetime(2026, 12, 2, 15, 30)  # a Wednesday


@pytest.mark.parametrize(
    ("query", "since", "until"),
    [
        ("what did I run yesterday", datetime(2026, 12, 1), datetime(2026, 12, 2)),
        ("errors today", datetime(2026, 12, 2), datetime(2026, 12, 3)),
        ("what broke last week?", datetime(2026, 11, 23), datetime(2026, 11, 30)),
        ("cells this week", datetime(2026, 11, 30), datetime(2026, 12, 7)),
        ("notes from last month", datetime(2026, 11, 1), datetime(2026, 12, 1)),
        ("what did I change in March", datetime(2026, 3, 1), datetime(2026, 4, 1)),
        ("what did I change in December", datetime(2026, 12, 1), datetime(2027, 1, 1)),
        ("plots 3 days ago", datetime(2026, 11, 29), datetime(2026, 11, 30)),
        ("in the last 2 weeks", NOW - timedelta(days=14), NOW + timedelta(seconds=1)),
        ("last year", datetime(2025, 1, 1), datetime(2026, 1, 1)),
    ],
)
def test_time_words_name_a_window_relative_to_now(query: str, since: datetime, until: datetime) -> None:
    window = time_window(query, NOW)
    assert window is not None and (window.since, window.until) == (since, until), window


@pytest.mark.parametrize(
    "query", ["how do I rotate the token", "in March 2023", "May I ask", "the week of the launch", "lastweek"]
)
def test_no_time_words_no_window(query: str) -> None:
    assert time_window(query, NOW) is None


def test_a_window_narrows_within_the_filters_already_set() -> None:
    window = Window(datetime(2026, 12, 1), datetime(2026, 12, 2), "yesterday")
    plain = narrowed(Filters(namespace="work"), window)
    assert plain.namespace == "work" and plain.since == datetime(2026, 12, 1)
    assert plain.until == datetime(2026, 12, 2) - timedelta(microseconds=1)  # until is inclusive
    inner = narrowed(Filters(since=datetime(2026, 12, 1, 12)), window)
    assert inner.since == datetime(2026, 12, 1, 12)
