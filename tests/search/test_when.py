"""A query's own time words as a time filter (:mod:`nbmemory.search.when`)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from nbmemory import Memory
from nbmemory.search.config import PipelineConfig
from nbmemory.search.filters import Filters
from nbmemory.search.when import Window, narrowed, time_window
from nbmemory.store.db import utcnow

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


def test_what_did_i_run_yesterday_returns_only_yesterdays_cells(fake_mem: Memory) -> None:
    today = utcnow().replace(hour=12, minute=0, second=0, microsecond=0)
    days = [today - timedelta(days=n) for n in range(7)]  # a week of work, one cell a day
    ids = fake_mem.remember_many(
        [f"ran df.groupby on the sales table, step {n}" for n in range(7)],
        times=days,
        speakers=["user"] * 7,
    )
    result = fake_mem.search("what did I run yesterday on the sales table", k=10)
    assert result.ids == [ids[1]]
    assert result.trace.when is not None and result.trace.when["narrowed"] is True
    assert result.trace.when["happened_then"] == 1 and "[when]" in result.trace.explain()
    # Turned off, every day's cell comes back.
    off = fake_mem.search("what did I run yesterday on the sales table", k=10, config=PipelineConfig(time_words=False))
    assert set(off.ids) == set(ids) and off.trace.when is None


def test_time_words_no_item_matches_do_not_narrow(fake_mem: Memory) -> None:
    # Said long ago (a conversation of 2023), and a note with no event time at all.
    fake_mem.remember("Caroline: I went to the support group yesterday", at="2023-05-08T13:56:00")
    fake_mem.remember("the support group meets on Tuesdays")
    result = fake_mem.search("who went to the support group yesterday", k=5)
    assert len(result.ids) == 2
    assert result.trace.when is not None and result.trace.when["narrowed"] is False
    assert fake_mem.search("support group", k=5).trace.when is None  # no time words: nothing to say
