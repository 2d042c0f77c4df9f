"""How often one search takes the store's lock: each time is a chance to wait for a whole write
transaction of the live indexer beside it (docs/guide/live.md). Fusion's IDFs come with BM25's
scores, and the candidates' stored vectors are read once for fusion and the pool."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest

from nbmemory import Memory
from nbmemory.search import pool
from nbmemory.search.base import Query
from nbmemory.search.bm25 import BM25Retriever
from nbmemory.search.bm25 import idfs as bm25_idfs
from nbmemory.search.evidence import query_idfs
from nbmemory.search.filters import Filters
from nbmemory.store import db as store_db
from nbmemory.store import vectors

QUERIES = ["kafka consumer lag", "how do I deploy to staging", "INC-2307 s3 export 403", "rotate the aws key"]


class CountingLock:
    """The store's lock, counting the outermost acquisitions made while :attr:`on`."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = 0
        self._owner = 0
        self.on = False
        self.taken = 0

    def acquire(self, *args: Any) -> bool:
        self._lock.acquire(*args)
        if self._depth == 0 and self.on:
            self.taken += 1
        self._depth += 1
        self._owner = threading.get_ident()
        return True

    def release(self) -> None:
        self._depth -= 1
        self._lock.release()

    def held(self) -> bool:  # what the store asks of its lock before a transaction
        return self._depth > 0 and self._owner == threading.get_ident()

    __enter__ = acquire

    def __exit__(self, *exc: object) -> None:
        self.release()


@pytest.fixture
def sample_mem(fake_mem: Memory, monkeypatch: pytest.MonkeyPatch) -> Memory:
    # The memory-resident index serves (the default), whatever the environment says.
    monkeypatch.setattr(vectors, "IN_MEMORY", True)
    monkeypatch.delenv("NBMEMORY_HOT", raising=False)
    fake_mem.index(Path(str(files("nbmemory") / "sample_corpus")))
    for query in QUERIES:  # the memory-resident index and the passages are read by the first ones
        fake_mem.search(query, log=False)
    return fake_mem


def test_a_search_takes_the_store_lock_once_per_retriever_and_once_for_vectors(
    sample_mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = CountingLock()
    monkeypatch.setattr(sample_mem.db, "lock", lock)
    reads: list[int] = []
    stored = pool.stored
    monkeypatch.setattr(pool, "stored", lambda db, ids: reads.append(len(ids)) or stored(db, ids))
    for query in QUERIES:
        lock.on, lock.taken, reads[:] = True, 0, []
        result = sample_mem.search(query, log=False)
        lock.on = False
        passes = result.trace.passes
        assert result.hits
        # BM25 (its IDFs in the same hold), the vector scan, the candidates' vectors: per pass.
        assert lock.taken <= 3 * passes, (query, lock.taken, passes)
        assert len(reads) <= passes, (query, reads)


def test_the_idfs_read_with_bm25s_scores_equal_those_read_afresh(sample_mem: Memory) -> None:
    for text in [*QUERIES, "nothing like this zzyzx", "the"]:
        got = BM25Retriever(sample_mem.db).retrieve(Query(text, None), 50, Filters())
        assert got.idf is not None
        words = [t for t in got.terms if t not in got.symbol_idf]
        afresh = bm25_idfs(sample_mem.db, words) if words else None
        if afresh is not None:
            assert got.idf == afresh, text
        assert query_idfs(sample_mem.db, got) == query_idfs(sample_mem.db, replace(got, idf=None)), text


def test_a_search_during_back_to_back_writes_waits_for_the_one_under_way_only(
    sample_mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A writer that commits transaction after transaction (the live indexer in a burst) takes the
    # lock again as soon as it lets go: without its turn, a search waits for one transaction per
    # hold, or more. With it, no transaction begins while a search of another thread runs, but
    # the one that had passed its turn just before the search began.
    db = sample_mem.db
    monkeypatch.setattr(store_db, "YIELD_S", 60.0)  # however slow the search on a busy machine
    stop = threading.Event()
    # The transactions the writer began, counted: the ones a search saw begin are those counted
    # between its start and its end.
    begun: list[int] = []

    def write() -> None:
        while not stop.is_set():
            with db.transaction() as con:
                begun.append(len(begun))
                con.execute("SELECT count(*) FROM chunks").fetchall()
                time.sleep(0.005)  # a write's work, with the lock held

    writer = threading.Thread(target=write)
    writer.start()
    try:
        during: list[int] = []
        deadline = time.monotonic() + 120
        for i in range(40):
            while len(begun) < 2 * (i + 1):  # the writer has gone on meanwhile: it is not starved
                assert time.monotonic() < deadline, f"the writer began {len(begun)} transactions"
                time.sleep(0.001)
            before = len(begun)
            sample_mem.search(QUERIES[i % len(QUERIES)], log=False)
            during.append(len(begun) - before)
    finally:
        stop.set()
        writer.join()
    assert max(during) <= 1, during
