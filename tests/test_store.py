"""The DuckDB file: migrations, crash consistency, locks, index freshness, doctor."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from nbmemory import Memory, StoreLockedError
from nbmemory.embed import FakeEmbedder
from nbmemory.store import fts, vectors
from nbmemory.store.db import Database
from nbmemory.store.migrations import MIGRATIONS, SCHEMA_VERSION
from tests.fts_postings import delta_then_snapshot

REPO = Path(__file__).resolve().parents[1]


def test_migrations_are_recorded_and_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "m.duckdb"
    db = Database(path)
    assert db.schema_version() == SCHEMA_VERSION
    names = [n for _, n, _ in MIGRATIONS]
    assert [r[0] for r in db.fetchall("SELECT name FROM migrations ORDER BY version")] == names
    db.close()
    db = Database(path)
    assert db.migrate() == []
    db.close()


def test_an_extension_file_changed_after_its_check_is_checked_again_and_refused(tmp_path: Path) -> None:
    import duckdb

    from nbmemory.store.extensions import connect_with_extensions, extension_path

    files = []
    for name in ("fts", "vss"):
        files.append(tmp_path / f"{name}.duckdb_extension")
        files[-1].write_bytes(extension_path(name).read_bytes())
    connect_with_extensions(files).close()  # checked: the next load of the same files skips it
    con = connect_with_extensions(files)
    assert con.execute("SELECT stem('running', 'english')").fetchone() == ("run",)
    con.close()
    # The fts file replaced by one with a byte changed: without a new check it would load.
    data = bytearray(files[0].read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "new").write_bytes(data)
    (tmp_path / "new").replace(files[0])
    with pytest.raises(duckdb.IOException, match="signature is either missing or invalid"):
        connect_with_extensions(files)


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    from nbmemory import StoreError

    path = tmp_path / "m.duckdb"
    db = Database(path)
    db.execute("INSERT INTO migrations VALUES (999, 'm999_future', now())")
    db.close()
    with pytest.raises(StoreError, match="newer than this nbmemory"):
        Database(path)


WRITER = textwrap.dedent(
    """
    import sys
    from nbmemory import Memory
    from nbmemory.embed import FakeEmbedder
    mem = Memory(sys.argv[1], embedder=FakeEmbedder(dim=32))
    i = 0
    while True:
        item = mem.remember(f"committed memory number {i} about topic {i % 7}")
        print(item.id, flush=True)
        i += 1
    """
)


@pytest.mark.integration
def test_reopening_after_a_killed_process_finds_everything_committed(tmp_path: Path) -> None:
    path = tmp_path / "m.duckdb"
    for round_ in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True, cwd=REPO
        )
        assert proc.stdout is not None
        committed = []
        deadline = time.time() + 60
        while len(committed) < 40 + 13 * round_ and time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            committed.append(int(line))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert committed, "the writer produced nothing"
        with Memory(path, embedder=FakeEmbedder(dim=32)) as mem:
            stored = {i for (i,) in mem.db.fetchall("SELECT id FROM chunks WHERE deleted_at IS NULL")}
            assert set(committed) <= stored
            last = mem.get(committed[-1])
            assert last.text.startswith("committed memory number")
            assert last.id in mem.search(last.text, k=5).ids
            assert mem.doctor().ok, mem.doctor().summary()


# Two rebuilds of the full-text snapshot in one process with a checkpoint between them, then
# death before the next checkpoint: what a background writer that commits often leaves.
REBUILDER = textwrap.dedent(
    """
    import os, sys
    from nbmemory import Memory
    from nbmemory.embed import FakeEmbedder
    from nbmemory.store import fts
    with Memory(sys.argv[1], embedder=FakeEmbedder(dim=32)) as mem:
        mem.remember_many([f"first batch note {i} about ledgers" for i in range(30)])
        fts.rebuild(mem.db)
        mem.db.execute("CHECKPOINT")
        mem.remember("the one written after the checkpoint: quokka")
        fts.rebuild(mem.db)
        os._exit(0)  # no checkpoint at close
    """
)


@pytest.mark.integration
def test_a_process_that_dies_after_rebuilding_the_fts_snapshot_twice_leaves_a_file_that_opens(
    tmp_path: Path,
) -> None:
    path = tmp_path / "m.duckdb"
    subprocess.run([sys.executable, "-c", REBUILDER, str(path)], check=True, cwd=REPO, timeout=120)
    assert Path(f"{path}.wal").stat().st_size > 0  # the second rebuild is only in the log
    with Memory(path, embedder=FakeEmbedder(dim=32)) as mem:
        assert mem.search("quokka", k=1).hits[0].text.endswith("quokka")
        assert mem.doctor().ok, mem.doctor().summary()


HOLDER = textwrap.dedent(
    """
    import sys, time
    from nbmemory.store.db import Database
    db = Database(sys.argv[1])
    print("ready", flush=True)
    time.sleep(60)
    """
)


@pytest.mark.integration
def test_a_held_file_gives_a_clear_error_not_a_lock_message(tmp_path: Path) -> None:
    path = tmp_path / "m.duckdb"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        with pytest.raises(StoreLockedError, match="in use by another process") as info:
            Memory(path, embedder=FakeEmbedder())
        assert "Conflicting lock" not in str(info.value)
    finally:
        proc.kill()
        proc.wait()


def test_delta_postings_match_what_the_fts_index_builds(fake_mem: Memory) -> None:
    texts = [
        "Running runners ran quickly; the runner's shoes!",
        "Ünïcödé accents and CamelCase words",
        "numbers 123 and symbols #tag @user e-mail",
        "The and of stopwords only",
    ]
    items = [fake_mem.remember(t, heading="Heading words here") for t in texts]
    ids = [i.id for i in items]
    delta, lens, index, index_lens = delta_then_snapshot(fake_mem, ids)
    assert delta == index
    assert lens == index_lens


def test_bm25_scores_from_index_tables_match_match_bm25(fake_mem: Memory) -> None:
    for i in range(30):
        fake_mem.remember(
            f"document {i} about {'rotation keys' if i % 3 == 0 else 'gardening tomatoes'} {i % 5}"
        )
    fts.rebuild(fake_mem.db)
    terms = fts.query_terms(fake_mem.db, "rotation keys")
    ours = dict(fts.search(fake_mem.db, terms, 100))
    # Heading is empty here, so BM25F weighting does not apply; the extension's IDF uses log10 where
    # standard BM25 (and ours) uses ln, a constant factor that leaves the ranking unchanged.
    ref = dict(
        fake_mem.db.fetchall(
            f"SELECT id, {fts.FTS_SCHEMA}.match_bm25(id, 'rotation keys') AS s FROM chunks WHERE s IS NOT NULL"
        )
    )
    assert ours.keys() == ref.keys()
    for key, value in ref.items():
        assert ours[key] == pytest.approx(value * math.log(10), rel=1e-9)


def test_fts_snapshot_is_rebuilt_when_the_delta_grows(fake_mem: Memory, monkeypatch) -> None:
    monkeypatch.setattr(fts, "DELTA_REBUILD_MIN", 5)
    fts.rebuild(fake_mem.db)
    for i in range(6):
        fake_mem.remember(f"note number {i}")
    assert fts.delta_size(fake_mem.db) == 6
    result = fake_mem.search("note number", k=3)
    assert result.trace.stage("bm25").notes["index_rebuilt"] is True
    assert fts.delta_size(fake_mem.db) == 0


@pytest.mark.usefixtures("sql_path")
def test_doctor_finds_and_repairs_damage(fake_mem: Memory) -> None:
    items = [fake_mem.remember(f"fact {i} about caching") for i in range(12)]
    assert fake_mem.doctor().ok
    db = fake_mem.db
    db.execute("DELETE FROM vectors WHERE chunk_id = ?", [items[0].id])
    db.execute(
        "INSERT INTO chunks (id, doc_id, namespace, kind, text, content_hash, created_at, updated_at, seq) "
        "VALUES (99999, 424242, 'default', 'markdown', 'orphan', 'h', now(), now(), 1)"
    )
    vectors.drop_index(db)
    db.execute("DELETE FROM fts_delta_docs WHERE chunk_id = ?", [items[5].id])
    report = fake_mem.doctor()
    failing = {c.name for c in report.checks if not c.ok}
    assert {"missing vectors", "orphan chunks", "vector index", "full-text index"} <= failing
    repaired = fake_mem.doctor(repair=True)
    assert repaired.ok
    assert fake_mem.doctor().ok
    assert items[0].id in fake_mem.search("fact 0 about caching", k=3).ids


def test_hnsw_is_derived_data_rebuilt_from_vectors(fake_mem: Memory) -> None:
    items = [fake_mem.remember(f"item {i} on topic {i % 4}") for i in range(40)]
    before = fake_mem.search("item 3 on topic 3", k=5, config=None).ids
    vectors.rebuild_index(fake_mem.db)
    assert fake_mem.search("item 3 on topic 3", k=5).ids == before
    fake_mem.forget([i.id for i in items[:30]])
    vectors.compact_index(fake_mem.db)
    result = fake_mem.search("item on topic", k=10)
    assert len(result.hits) == 10 and all(h.id in {i.id for i in items[30:]} for h in result.hits)


@pytest.mark.usefixtures("sql_path")
def test_bulk_loads_rebuild_the_hnsw_index_once_and_a_lost_index_is_rebuilt_on_open(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(vectors, "BULK_MIN", 50)
    path = tmp_path / "m.duckdb"
    dropped = []
    real_drop = vectors.drop_index
    monkeypatch.setattr(vectors, "drop_index", lambda db: (dropped.append(1), real_drop(db)))
    with Memory(path, embedder=FakeEmbedder(dim=32)) as mem:
        ids = mem.remember_many([f"bulk item {i} about topic {i % 9}" for i in range(200)])
        assert dropped, "a bulk load should drop the index while it loads"
        assert vectors.index_exists(mem.db)
        assert ids[17] in mem.search("bulk item 17 about topic 8", k=3).ids
        # As if the process had died in the middle of a bulk load.
        real_drop(mem.db)
    with Memory(path, embedder=FakeEmbedder(dim=32)) as mem:
        mem.search("bulk item", k=1)
        assert vectors.index_exists(mem.db)
        assert mem.doctor().ok
