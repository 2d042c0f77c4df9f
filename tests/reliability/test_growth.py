"""What a long-running owner must not accumulate, and the sharing layer under concurrent threads.

Measured by ``python -m bench.system.load_bench`` (sustained load, RSS and file size over time); these
tests pin the fixes with small limits so that they run in seconds.
"""

from __future__ import annotations

import gc
import threading
import weakref
from datetime import timedelta
from pathlib import Path

import pytest

from nbmemory import Memory
from nbmemory.embed import FakeEmbedder
from nbmemory.remote import connect
from nbmemory.store import search_log as search_log_module
from nbmemory.store import vectors


@pytest.mark.integration
@pytest.mark.usefixtures("sql_path")
def test_the_hnsw_index_is_rebuilt_before_incremental_writes_bloat_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vectors, "REBUILD_MIN_WRITES", 40)
    rebuilds: list[int] = []
    real = vectors.rebuild_index
    monkeypatch.setattr(vectors, "rebuild_index", lambda db: (rebuilds.append(1), real(db))[1])
    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=32)) as mem:
        ids = [mem.remember(f"note {i} about kafka lag {i % 7}").id for i in range(100)]
        for item_id in ids[:30]:
            mem.forget(item_id)  # deletes count as writes too
        # 100 inserts + 30 deletes with rebuilds at >= 40 writes and >= the rows built over.
        assert 2 <= len(rebuilds) <= 4
        assert int(mem.db.cache["hnsw_writes"]) < 100  # type: ignore[call-overload]
        assert vectors.index_exists(mem.db)
        result = mem.search("kafka lag 3", k=5)
        assert result.hits and all(h.id not in ids[:30] for h in result.hits)


def test_search_log_and_request_keys_are_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_log_module, "SEARCH_LOG_KEEP", 50)
    monkeypatch.setattr(search_log_module, "PRUNE_EVERY", 20)
    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=32)) as mem:
        for i in range(300):
            mem.search(f"query number {i}", k=3)
        mem.flush()
        kept = [r[0] for r in mem.db.fetchall("SELECT query FROM search_log ORDER BY id")]
        assert 50 <= len(kept) <= 50 + 20 + search_log_module.LOG_FLUSH_EVERY
        assert kept[-1] == "query number 299"  # the newest stay
        # Request keys past their time to live go; fresh ones stay (a retry still finds them).
        old = mem.remember("first", request_key="k-old")
        mem.db.execute("UPDATE request_keys SET created_at = created_at - INTERVAL 2 DAY WHERE key = 'k-old'")
        for i in range(25):
            mem.remember(f"note {i}", request_key=f"k-{i}")
        mem.get(old.id)  # flushes, and prunes past PRUNE_EVERY rows
        keys = {r[0] for r in mem.db.fetchall("SELECT key FROM request_keys")}
        assert "k-old" not in keys and "k-24" in keys
        assert mem.remember("again", request_key="k-24").text == "note 24"
    assert timedelta(seconds=10 * 60) <= search_log_module.REQUEST_KEY_TTL


def test_a_closed_connection_is_not_kept_alive_by_its_exit_hook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # connect() registers close() to run at exit; close() must drop that reference, or every
    # connection a long-lived process opens stays in memory until it exits.
    monkeypatch.setenv("NBMEMORY_RUNTIME_DIR", str(tmp_path / "run"))
    path = tmp_path / "m.duckdb"
    with connect(path, embedder=FakeEmbedder(dim=32)) as owner:
        refs = []
        for _ in range(20):
            client = connect(path, allow_owner=False)
            refs.append(weakref.ref(client))
            client.close()
        del client
        gc.collect()
        assert [r for r in refs if r() is not None] == []
        assert owner.role == "owner"


def test_threads_sharing_one_client_connection_take_turns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The Jupyter server calls its memory from 4 worker threads; as a client (a kernel owns the
    # file) they share one socket, and without a lock they read each other's replies or hang.
    monkeypatch.setenv("NBMEMORY_RUNTIME_DIR", str(tmp_path / "run"))
    path = tmp_path / "m.duckdb"
    with connect(path, embedder=FakeEmbedder(dim=32)) as owner:
        ids = [owner.remember(f"note {i} about topic {i % 7}").id for i in range(40)]
        with connect(path, allow_owner=False) as client:
            assert client.role == "client"
            problems: list[str] = []

            def work(t: int) -> None:
                for i in range(60):
                    try:
                        if i % 2:
                            want = ids[(t * 7 + i) % len(ids)]
                            got = client.get(want, touch=False).id
                            if got != want:
                                problems.append(f"asked {want}, got {got}")
                        else:
                            result = client.search(f"topic {t}", k=3)
                            if result.query != f"topic {t}":
                                problems.append(f"asked topic {t}, got {result.query}")
                    except Exception as exc:
                        problems.append(repr(exc)[:200])

            threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            assert not any(t.is_alive() for t in threads), "a thread hung on the shared connection"
            assert problems == []
