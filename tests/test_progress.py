"""The progress of an index run: counts, rate, time left and the line, on a clock the test sets."""

from __future__ import annotations

from typing import Any

import pytest

from nbmemory.progress import IndexMeter, IndexProgress, done_text, fitted


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_counts_rate_and_time_left_while_embedding(clock: Clock) -> None:
    calls: list[tuple[int, int, str, dict[str, Any]]] = []
    meter = IndexMeter(lambda *args: calls.append(args), clock=clock, started=0.0)
    meter.phase("loading the model")
    clock.now = 2.0
    # Two of four files read: 20 chunks and 10 passage windows in them.
    meter.reading(1, 4, "/notes/a.md", 0)
    meter.planned(12, 6)
    meter.reading(2, 4, "/notes/b.md", 0)
    meter.planned(8, 4)
    meter.reused(0)
    meter.phase("embedding chunks")
    clock.now = 4.0
    meter.chunks_step(10, finished=1, path="/notes/a.md")
    snap = IndexProgress.from_dict(calls[-1][3])
    assert calls[-1][:3] == (1, 4, "/notes/a.md")
    assert (snap.files_read, snap.files_total, snap.chunks_done, snap.chunks_total) == (2, 4, 10, 20)
    # 10 chunks in 2 s; the two files not read yet are expected to hold as much as the two read:
    # 40 chunks and 20 passages in all, passages at the chunks' rate until one is measured.
    assert snap.rate == pytest.approx(5.0)
    assert snap.fraction == pytest.approx((0.5 * 2 + 10) / (0.5 * 4 + 60))
    assert snap.seconds_left == pytest.approx((40 - 10) / 5 + 20 / 5)
    assert snap.elapsed == pytest.approx(4.0)
    assert snap.text() == "embedding chunks 10/20 · files 2/4 · 5.0 chunks/s · about 10 s left"
    assert calls[-1][3]["text"] == snap.text()


def test_passages_get_their_own_rate_and_the_total_drops_to_what_needs_a_pass(clock: Clock) -> None:
    meter = IndexMeter(clock=clock, started=0.0)
    meter.reading(1, 1, "/n.md", 0)
    meter.planned(10, 8)
    meter.phase("embedding chunks")
    clock.now = 5.0
    meter.chunks_step(10, finished=1)
    # Two of the eight windows were stored already: six need a pass.
    meter.passages_found(8, 6)
    meter.phase("embedding passages")
    clock.now = 6.0
    meter.passages_step(3)
    snap = meter.snapshot()
    assert (snap.passages_done, snap.passages_total) == (3, 6)
    assert snap.rate == pytest.approx(3.0)  # passages/s, not the chunks' 2/s
    assert snap.seconds_left == pytest.approx(3 / 3.0)
    assert snap.fraction == pytest.approx((0.5 + 13) / (0.5 + 16))
    assert snap.text() == "embedding passages 3/6 · 3.0 passages/s · about 1 s left"


def test_reused_chunks_count_as_done_but_not_towards_the_rate(clock: Clock) -> None:
    meter = IndexMeter(clock=clock, started=0.0)
    meter.reading(1, 1, "/n.md", 0)
    meter.planned(10, 0)
    meter.reused(6)
    meter.phase("embedding chunks")
    clock.now = 2.0
    meter.chunks_step(4)
    snap = meter.snapshot()
    assert snap.chunks_done == 10 and snap.fraction == 1.0  # the one file read, its chunks embedded
    assert snap.rate == pytest.approx(2.0)


def test_phases_without_counts_say_only_their_name(clock: Clock) -> None:
    meter = IndexMeter(clock=clock, started=0.0)
    meter.phase("loading the model")
    clock.now = 7.4
    snap = meter.snapshot()
    assert snap.text() == "loading the model…" and snap.fraction == 0.0 and snap.seconds_left is None
    assert snap.elapsed == 7.4
    meter.reading(3, 53, "/notes/deploy.md", 0)
    assert meter.snapshot().text() == "reading files 3/53 · deploy.md"
    # Unchanged files (nothing to embed) move the bar too, without a jump back once work shows.
    assert meter.snapshot().fraction == pytest.approx(3 / 53)
    meter.planned(10, 0)
    assert meter.snapshot().fraction == pytest.approx(0.5 * 3 / (0.5 * 53 + 10 * 53 / 3))


def test_the_end_says_done_with_the_time_it_is_given(clock: Clock) -> None:
    calls: list[dict[str, Any]] = []
    meter = IndexMeter(lambda *args: calls.append(args[3]), clock=clock, started=0.0)
    meter.reading(2, 2, "/b.md", 1)
    clock.now = 20.0
    meter.phase("updating the search index")
    assert calls[-1]["text"] == "updating the search index…"
    clock.now = 23.4
    meter.finish(files=2, chunks=7, seconds=23.4)
    assert calls[-1]["phase"] == "done" and calls[-1]["fraction"] == 1.0
    assert calls[-1]["text"] == "done — 2 files, 7 chunks in 23.4 s" == done_text(2, 7, 23.4)
    clock.now = 99.0
    assert meter.snapshot().elapsed == 23.4


def test_long_times_left_read_in_minutes(clock: Clock) -> None:
    assert (
        IndexProgress("embedding chunks", 1, 1, 1, 9, seconds_left=754)
        .text()
        .endswith("about 12 min 34 s left")
    )
    assert "1 h 05 min" in IndexProgress("embedding chunks", seconds_left=3900).text()


def test_fitted_passes_a_callback_only_the_arguments_it_takes() -> None:
    seen: list[tuple[Any, ...]] = []

    def three(done: int, total: int, path: str) -> None:
        seen.append((done, total, path))

    def every(*args: Any) -> None:
        seen.append(args)

    fitted(three)(1, 2, "p", {"text": "x"})
    fitted(every)(1, 2, "p", {"text": "x"})
    assert seen == [(1, 2, "p"), (1, 2, "p", {"text": "x"})]
