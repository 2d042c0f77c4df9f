"""The model-use lock: writes share it, a swap waits for the writes under way and goes before new ones."""

from __future__ import annotations

import threading
import time

from nbmemory.model_use import ModelUse


def _until(condition, limit: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.001)


def test_writes_share_it() -> None:
    lock = ModelUse()
    both_inside = threading.Barrier(2, timeout=10)

    def write() -> None:
        with lock.writing():
            both_inside.wait()  # breaks (and raises) unless both writes are inside at once

    threads = [threading.Thread(target=write) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not both_inside.broken


def test_a_swap_waits_for_the_write_under_way_and_goes_before_the_next() -> None:
    lock = ModelUse()
    order: list[str] = []
    release_first = threading.Event()

    def first_write() -> None:
        with lock.writing():
            order.append("first write in")
            release_first.wait(10)
            order.append("first write out")

    def swap() -> None:
        with lock.swapping():
            order.append("swap")

    def next_write() -> None:
        with lock.writing():
            order.append("next write")

    writer = threading.Thread(target=first_write)
    writer.start()
    _until(lambda: order == ["first write in"])
    swapper = threading.Thread(target=swap)
    swapper.start()
    _until(lambda: lock._swaps_waiting == 1)
    follower = threading.Thread(target=next_write)
    follower.start()
    release_first.set()
    for t in (writer, swapper, follower):
        t.join(10)
    assert order == ["first write in", "first write out", "swap", "next write"]
