"""Private by default: a memory's folder is 0700 and every file nbmemory writes 0600, on creation
and on every open, whatever the umask; a memory others can read is fixed on open with one line
saying so, and ``doctor`` reports it. Real files and a real DuckDB file throughout."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from nbmemory import Memory, private
from nbmemory.config import cache_folder
from nbmemory.embed import FakeEmbedder
from nbmemory.remote import connect
from nbmemory.runtime import endpoint, runtime_dir

REPO = Path(__file__).resolve().parents[1]


def mode(path: Path | str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture(autouse=True)
def open_umask() -> Iterator[None]:
    """The usual umask 022, under which a plain create makes files others can read."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "nbmemory" and r.levelno == logging.WARNING]


def test_files_are_created_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    os.umask(0)
    private.write_text(tmp_path / "new", "secret")
    assert mode(tmp_path / "new") == 0o600
    wide = tmp_path / "wide"
    wide.write_text("old")
    os.chmod(wide, 0o666)
    private.write_text(wide, "secret")
    assert mode(wide) == 0o600 and wide.read_text() == "secret"
    made = private.make_dir(tmp_path / "a" / "b" / "c")
    assert [mode(p) for p in (tmp_path / "a", tmp_path / "a" / "b", made)] == [0o700] * 3


def test_a_fresh_memory_is_owner_only_while_open_and_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("NBMEMORY_HOME", str(home))
    with Memory(embedder=FakeEmbedder(dim=32)) as mem:
        db = mem.path
        assert db == home / "memory.duckdb"
        mem.remember("the staging database is db-stg-12")
        wal = Path(f"{db}.wal")
        assert wal.stat().st_size > 0  # the write is in the log, not yet in the file
        assert (mode(home), mode(db), mode(wal)) == (0o700, 0o600, 0o600)
        # A checkpoint removes the log and DuckDB makes the next one itself: it is 0600 too.
        mem.db.execute("CHECKPOINT")
        mem.remember("the on-call rota changes on mondays")
        assert wal.stat().st_size > 0 and mode(wal) == 0o600
        out = tmp_path / "export.jsonl"
        assert mem.export(out) == 2
        assert mode(out) == 0o600
        assert mem.doctor().checks[1].detail.startswith("owner-only")
    assert mode(db) == 0o600
    assert not lines(caplog)  # nothing was fixed: nothing to say


def test_the_owners_socket_key_and_folder_are_owner_only(tmp_path: Path) -> None:
    shared = connect(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=32))
    try:
        assert shared.role == "owner"
        address, key = endpoint(shared.path)
        assert stat.S_ISSOCK(os.stat(address).st_mode)
        assert (mode(runtime_dir()), mode(address), mode(key)) == (0o700, 0o600, 0o600)
    finally:
        shared.close()


def widen(home: Path) -> Path:
    """A memory in ``home`` that others can read: folder 0755, file 0644."""
    db = home / "memory.duckdb"
    with Memory(db, embedder=FakeEmbedder(dim=32)) as mem:
        mem.remember("the home router password rotates monthly")
    os.chmod(home, 0o755)
    os.chmod(db, 0o644)
    return db


def test_a_memory_others_can_read_is_fixed_on_open_with_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    home = tmp_path / "home"  # NBMEMORY_HOME (tests/conftest.py): nbmemory's own folder
    db = widen(home)
    caplog.clear()
    with Memory(db, embedder=FakeEmbedder(dim=32)) as mem:
        assert (mode(home), mode(db)) == (0o700, 0o600)
        said = lines(caplog)
        assert said == [
            f"nbmemory: memory {db} was readable by other users; made it owner-only: "
            f"{home} 0755->0700, {db} 0644->0600"
        ]
        check = next(c for c in mem.doctor().checks if c.name == "permissions")
        assert (check.ok, check.repaired) == (False, True)
        assert check.detail == f"made owner-only on open: {home} 0755->0700, {db} 0644->0600"
        # Said once: the next run finds it owner-only.
        assert "[  ok ] permissions: owner-only" in mem.doctor().summary()

        # Widened while open: doctor says so, and --repair narrows it again.
        os.chmod(db, 0o640)
        report = mem.doctor()
        check = next(c for c in report.checks if c.name == "permissions")
        assert not report.ok and check.detail == f"not owner-only: {db} (0640)"
        assert "[ FAIL] permissions: not owner-only" in report.summary()
        assert mem.doctor(repair=True).ok and mode(db) == 0o600
    caplog.clear()
    Memory(db, embedder=FakeEmbedder(dim=32)).close()
    assert not lines(caplog)  # fixed once: the next open has nothing to say


def test_a_folder_the_user_chose_is_left_as_is_but_the_files_are_fixed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    os.chmod(project, 0o755)
    db = project / "team.duckdb"
    Memory(db, embedder=FakeEmbedder(dim=32)).close()
    assert (mode(project), mode(db)) == (0o755, 0o600)
    os.chmod(db, 0o644)
    caplog.clear()
    with Memory(db, embedder=FakeEmbedder(dim=32)) as mem:
        assert (mode(project), mode(db)) == (0o755, 0o600)
        assert lines(caplog) == [
            f"nbmemory: memory {db} was readable by other users; made it owner-only: {db} 0644->0600"
        ]
        check = next(c for c in mem.doctor().checks if c.name == "permissions")
        assert check.repaired
        assert check.detail.endswith(
            f"its folder {project} is not owner-only (0755), a folder you chose: left as is"
        )
    # A folder nbmemory creates for a file is 0700, wherever it is.
    fresh = tmp_path / "elsewhere" / "new" / "m.duckdb"
    Memory(fresh, embedder=FakeEmbedder(dim=32)).close()
    assert (mode(fresh.parent.parent), mode(fresh.parent), mode(fresh)) == (0o700, 0o700, 0o600)


def test_the_cache_is_owner_only_and_fixed_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from nbmemory.eval.cache import VectorCache, cache_root

    cache = tmp_path / "cache"
    cache.mkdir()
    os.chmod(cache, 0o755)
    monkeypatch.setenv("NBMEMORY_CACHE", str(cache))
    onnx = cache_folder("onnx")
    assert (mode(cache), mode(onnx)) == (0o700, 0o700)
    assert lines(caplog) == [
        f"nbmemory: the nbmemory cache {cache} was readable by other users; made it owner-only: "
        f"{cache} 0755->0700"
    ]
    vectors = VectorCache("fp", "notes", dim=4, root=cache_root())
    vectors.put([bytes(32)], np.ones((1, 4), np.float32))
    blocks = list(vectors.dir.glob("*.npz"))
    assert len(blocks) == 1 and mode(blocks[0]) == 0o600
    assert all(mode(p) == 0o700 for p in [vectors.dir, *vectors.dir.parents] if cache in p.parents)


def test_the_command_line_says_what_it_fixed_on_stderr_and_doctor_reports_it(tmp_path: Path) -> None:
    home = tmp_path / "cli-home"
    db = widen(home)
    launcher = (
        "import importlib; cli = importlib.import_module('nbmemory.cli.main'); "
        "from nbmemory.embed import FakeEmbedder; real = cli._memory; "
        "cli._memory = lambda a, **k: real(a, embedder=FakeEmbedder(dim=32), **k); raise SystemExit(cli.main())"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "NBMEMORY_HOME": str(home), "NBMEMORY_IDLE_SECONDS": "0"}
    out = subprocess.run(
        [sys.executable, "-c", launcher, "-q", "doctor"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    warned = [line for line in out.stderr.splitlines() if "owner-only" in line]
    assert warned == [
        f"nbmemory: memory {db} was readable by other users; made it owner-only: "
        f"{home} 0755->0700, {db} 0644->0600"
    ]
    assert f"[fixed] permissions: made owner-only on open: {home} 0755->0700, {db} 0644->0600" in out.stdout
    assert (mode(home), mode(db)) == (0o700, 0o600)


@pytest.mark.integration
def test_doctor_says_once_what_the_owner_fixed_on_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The Jupyter server (or a kernel) opened the memory, fixing its permissions; each
    # `nbmemory doctor` is its client.
    home = tmp_path / "served-home"
    db = widen(home)
    monkeypatch.setenv("NBMEMORY_HOME", str(home))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with connect(embedder=FakeEmbedder(dim=32)) as owner:
        assert owner.role == "owner"
        said = []
        for _ in range(3):
            out = subprocess.run(
                [sys.executable, "-m", "nbmemory.cli", "-q", "doctor"],
                capture_output=True,
                text=True,
                cwd=REPO,
                env=env,
                timeout=300,
            )
            assert out.returncode == 0, out.stdout + out.stderr
            said.append(next(line for line in out.stdout.splitlines() if "permissions" in line))
    assert said[0] == f"[fixed] permissions: made owner-only on open: {home} 0755->0700, {db} 0644->0600"
    assert [line.split(" (")[0] for line in said[1:]] == ["[  ok ] permissions: owner-only"] * 2
