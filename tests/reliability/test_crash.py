"""Crash safety: writers SIGKILLed at chosen and at random points, then the store is checked.

The harness (``tests/reliability/crash_harness.py``) says what is checked after each kill. The
default run kills one child per workload at points picked to land in the risky windows (a WAL
left behind, HNSW persistence at CHECKPOINT, an HNSW rebuild, a re-embed, an FTS rebuild, a bulk
load with the index dropped, passages written after their chunks, the memory-resident index
building, the change queue mid-batch, the owner mid-request, a tuned model's adoption); the slow
run draws 210 kills at random (15 per workload):

    make test-slow                      # or: pytest -m slow tests/reliability/test_crash.py -s
    python -m tests.reliability.crash_harness --runs 50 --seed 1 -v   # standalone, prints JSON figures

``NBMEMORY_CRASH_RUNS`` and ``NBMEMORY_CRASH_SEED`` change the slow run's size and seed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nbmemory import Memory
from nbmemory.embed import FakeEmbedder
from nbmemory.store import vectors
from tests.reliability.crash_harness import PHASES, Kill, ranking_difference, run_campaign

# The kills land inside HNSW persistence and rebuilds: the SQL path's machinery, which the
# memory-resident index (the default) does without; tests/search/test_hot.py covers a crash there.
# Every test kills real processes.
pytestmark = [pytest.mark.usefixtures("sql_path"), pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]

# One kill per workload, each aimed at a window where a crash used to do, or could do, damage.
CI_PLAN: list[tuple[str, Kill, Kill | None]] = [
    # A log left behind, then a second kill while recovery runs doctor.
    ("wal", Kill("mark", "wal-ready:1:0"), Kill("mark", "op:doctor:1:5")),
    ("checkpoint", Kill("mark", "checkpoint:2:6"), None),  # inside HNSW persistence
    ("hnsw", Kill("mark", "hnsw-create:2:40"), None),  # inside an HNSW rebuild
    ("reembed", Kill("mark", "reembed-batch:3:2"), Kill("mark", "checkpoint:1:10")),
    ("fts", Kill("mark", "fts-build:2:20"), None),  # inside an FTS rebuild
    ("remember", Kill("mark", "committed:15:0"), None),  # committed, never acknowledged
    ("remember_many", Kill("mark", "hnsw-drop:1:0"), None),  # a bulk load with the index dropped
    ("index", Kill("timer", delay_s=1.2), None),
    ("forget", Kill("timer", delay_s=1.0), None),
    ("passages", Kill("mark", "passages-insert:2:1"), None),  # chunks committed, passages not all
    ("hot", Kill("mark", "op:search:3:20"), None),  # the memory-resident index building
    ("queue", Kill("mark", "op:queue:2:40"), None),  # the change queue mid-batch
    ("owner", Kill("mark", "commit:10:1"), None),  # the owner mid-request
    # A tuned model's adoption: inside the swap with its version record, then in recovery.
    ("adopt", Kill("mark", "reembed-swap:1:0"), Kill("mark", "op:doctor:1:5")),
]


def test_a_kill_in_every_workload_loses_nothing_acknowledged(tmp_path: Path) -> None:
    summary = run_campaign(len(CI_PLAN), seed=8, workdir=tmp_path, plan=CI_PLAN)
    print(summary.line())
    assert summary.failures == [], "\n\n".join(summary.failures)
    assert set(summary.kills_by_phase) == set(PHASES)
    assert summary.recoveries == summary.runs == len(CI_PLAN)
    assert summary.wal_replays >= 1 and summary.items_verified > 0


@pytest.mark.slow
def test_random_kills_many_times(tmp_path: Path) -> None:
    runs = int(os.environ.get("NBMEMORY_CRASH_RUNS", "210"))
    seed = int(os.environ.get("NBMEMORY_CRASH_SEED", "1"))
    summary = run_campaign(runs, seed=seed, workdir=tmp_path, log=lambda m: print(m, flush=True))
    print(summary.line())
    assert summary.failures == [], "\n\n".join(summary.failures)
    assert summary.runs == runs and set(summary.kills_by_phase) == set(PHASES)


WAL_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    from nbmemory import Memory
    from nbmemory.embed import FakeEmbedder
    path = sys.argv[1]
    with Memory(path, embedder=FakeEmbedder(dim=32)) as mem:
        ids = [mem.remember(f"walseed{i} a note about caching").id for i in range(30)]
    # Reopened, the HNSW index is loaded from the file; then deletes followed by inserts that
    # only the write-ahead log holds: replaying those corrupts the index (duckdb-vss#81).
    mem = Memory(path, embedder=FakeEmbedder(dim=32))
    mem.search("caching")
    mem.forget(ids[:5])
    new = [mem.remember(f"walnew{i} written after the forget").id for i in range(5)]
    mem.update(ids[10], text="walupdated replaced text")
    print(" ".join(map(str, ids + new)), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_a_log_of_deletes_then_inserts_replays_and_the_hnsw_index_is_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "wal.duckdb"
    out = subprocess.run(
        [sys.executable, "-c", WAL_WRITER, str(path)], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert out.returncode == -signal.SIGKILL, out.stderr
    ids = [int(i) for i in out.stdout.split()]
    assert Path(f"{path}.wal").stat().st_size > 0, "the kill should leave a write-ahead log"
    with Memory(path, embedder=FakeEmbedder(dim=32)) as mem:
        assert mem.db.dropped_after_crash == [vectors.INDEX_NAME]
        live = {
            int(r[0]): r[1] for r in mem.db.fetchall("SELECT id, text FROM chunks WHERE deleted_at IS NULL")
        }
        assert set(live) == set(ids[5:])
        assert live[ids[10]] == "walupdated replaced text"
        assert ids[-1] in mem.search("walnew4", k=3).ids  # first use rebuilds the index
        assert vectors.index_exists(mem.db)
        assert mem.doctor().ok, mem.doctor().summary()
    # Closing checkpointed the rebuilt index: the file opens clean, with one entry per vector.
    with Memory(path, embedder=FakeEmbedder(dim=32)) as mem:
        assert mem.db.dropped_after_crash == []
        assert mem.doctor().ok, mem.doctor().summary()
        entries = mem.db.scalar("SELECT count FROM pragma_hnsw_index_info()")
        assert entries == mem.db.scalar("SELECT count(*) FROM vectors") == 30


BULK_FORGETTER = textwrap.dedent(
    """
    import sys
    import nbmemory.memory as memory_module
    from nbmemory import Memory
    from nbmemory.embed import FakeEmbedder
    memory_module.COMPACT_AFTER_DELETES = 20
    mem = Memory(sys.argv[1], embedder=FakeEmbedder(dim=48))
    live = mem.remember_many([f"item {i} about topic {i % 17} and {i % 5}" for i in range(400)])
    for round_ in range(25):
        mem.forget(live[:25])
        live = live[25:] + mem.remember_many(
            [f"round {round_} item {i} topic {i % 11}" for i in range(30)], batch_size=10
        )
    mem.close()
    print("done", len(live))
    """
)


def test_bulk_forgets_then_writes_keep_the_process_alive(tmp_path: Path) -> None:
    # Compacting with PRAGMA hnsw_compact_index and inserting afterwards corrupted the heap
    # (abort or segfault at the next COMMIT): compaction is a rebuild now.
    out = subprocess.run(
        [sys.executable, "-c", BULK_FORGETTER, str(tmp_path / "f.duckdb")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert out.returncode == 0 and out.stdout.startswith("done"), out.stderr[-2000:]
    with Memory(tmp_path / "f.duckdb", embedder=FakeEmbedder(dim=48)) as mem:
        assert mem.doctor().ok, mem.doctor().summary()


REBUILDER = textwrap.dedent(
    """
    import sys
    from nbmemory import Memory
    from nbmemory.embed import FakeEmbedder
    from nbmemory.store import vectors
    with Memory(sys.argv[1], embedder=FakeEmbedder(dim=48)) as mem:
        ids = mem.remember_many([f"small store item {i} about topic {i % 7}" for i in range(30)])
        mem.forget(ids[:4])
        vectors.rebuild_index(mem.db)  # as doctor's repair, a compaction or a crash recovery does
        for i in range(40):
            mem.remember(f"written after the rebuild {i}")
        print("done", flush=True)
    """
)


def test_rebuilding_the_index_over_a_table_with_deleted_rows_keeps_writes_safe(tmp_path: Path) -> None:
    # An HNSW index built over a small table with deleted rows was sized wrongly by duckdb-vss,
    # and the inserts that followed segfaulted: the table is rewritten without gaps first.
    out = subprocess.run(
        [sys.executable, "-c", REBUILDER, str(tmp_path / "r.duckdb")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert out.returncode == 0 and out.stdout.startswith("done"), out.stderr[-2000:]
    with Memory(tmp_path / "r.duckdb", embedder=FakeEmbedder(dim=48)) as mem:
        assert mem.doctor().ok, mem.doctor().summary()
        assert mem.stats()["items"] == 66


def test_rankings_compare_within_a_float32_ulp_and_tell_a_real_difference() -> None:
    a = [(-1.018713, 1), (-0.9745375, 2), (-0.96, 3), (-0.5, 4), (-0.5, 5)]
    # The same scores a bit apart (one side of a 6-digit rounding each), a tie at the cut broken
    # the other way, and two near-equal scores that swap: the same ranking.
    b = [(-1.018713, 1), (-0.97453749, 2), (-0.96, 3), (-0.5, 4), (-0.5, 6)]
    assert ranking_difference(a, b) is None
    assert ranking_difference([(-0.7, 1), (-0.7000001, 2)], [(-0.7000001, 2), (-0.7, 1)]) is None
    assert "rank 2" in (ranking_difference(a, [a[0], (-0.9, 2), *a[2:]]) or "")
    assert "id 3" in (ranking_difference(a, [*a[:2], (-0.96, 9), *a[3:]]) or "")
    assert "hits vs" in (ranking_difference(a, a[:4]) or "")
