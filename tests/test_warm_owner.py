"""The command line's warm owner: the first run starts a background owner, later runs are its
clients; it exits after its idle time or on `nbmemory stop`; a kernel's ownership is respected.

Runs are real processes. The owner they start embeds with the fake embedder (the launcher below
replaces the owner's program), except in the one test about what a real model load prints.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nbmemory import Memory
from nbmemory.embed import FakeEmbedder
from nbmemory.remote import connect, launch

REPO = Path(__file__).resolve().parents[1]

# Every test runs real `nbmemory` processes.
pytestmark = pytest.mark.integration

# The background owner, with the fake embedder.
OWNER = textwrap.dedent(
    """
    import sys
    from nbmemory.embed import FakeEmbedder
    from nbmemory.remote import daemon
    raise SystemExit(daemon.main(sys.argv[1:], embedder=FakeEmbedder(dim=32)))
    """
)
# `nbmemory` itself, starting the owner above; at exit it says which heavy modules it imported.
CLI = textwrap.dedent(
    f"""
    import atexit, json, sys
    from nbmemory.remote import launch, daemon
    launch.OWNER_PROGRAM = [sys.executable, "-c", {OWNER!r}]
    serve = daemon.serve
    def fake_serve(settings, idle, served_by="serve", kwargs=None):
        from nbmemory.embed import FakeEmbedder
        return serve(settings, idle, served_by, {{**(kwargs or {{}}), "embedder": FakeEmbedder(dim=32)}})
    daemon.serve = fake_serve
    heavy = ("duckdb", "numpy", "torch", "sentence_transformers")
    atexit.register(lambda: print("HEAVY", json.dumps([m for m in heavy if m in sys.modules]), file=sys.stderr))
    from nbmemory.cli import main
    raise SystemExit(main())
    """
)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """The environment of the runs, and of this process: their own memory and runtime folder
    (short: a socket's path must fit in ~100 bytes). Every owner still up at the end is stopped."""
    runtime = tempfile.mkdtemp(prefix="nbm-")
    monkeypatch.setenv("NBMEMORY_RUNTIME_DIR", runtime)
    values = {
        **os.environ,
        "NBMEMORY_HOME": str(tmp_path / "home"),
        "NBMEMORY_IDLE_SECONDS": "120",
        "HF_HUB_OFFLINE": "1",
    }
    yield values
    try:
        for db in Path(values["NBMEMORY_HOME"]).rglob("*.duckdb"):
            launch.stop(db)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def nbmemory(env: dict[str, str], *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CLI, "-q", *args],
        capture_output=True,
        text=True,
        env={**env, **extra},
        cwd=REPO,
        timeout=120,
    )


def heavy_modules(run: subprocess.CompletedProcess[str]) -> list[str]:
    line = next(line for line in run.stderr.splitlines() if line.startswith("HEAVY "))
    return list(json.loads(line.removeprefix("HEAVY ")))


def stats(env: dict[str, str]) -> dict[str, object]:
    run = nbmemory(env, "stats", "--json")
    assert run.returncode == 0, run.stderr
    return dict(json.loads(run.stdout))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead: the owner's parent (a finished run) is gone, init reaps it soon.
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "\nState:\tZ" in status.read_text())


def wait_gone(pid: int, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def db_of(env: dict[str, str]) -> Path:
    return Path(env["NBMEMORY_HOME"]) / "memory.duckdb"


def owner_log(env: dict[str, str]) -> str:
    return launch.log_path(db_of(env)).read_text(encoding="utf-8")


def test_later_runs_are_clients_of_the_owner_the_first_run_started(env: dict[str, str]) -> None:
    first = nbmemory(env, "remember", "the staging database is db-stg-12", "--tag", "ops")
    assert first.returncode == 0 and "remembered #1" in first.stdout, first.stderr
    # The first run is over; the owner it started serves the next ones.
    before = stats(env)
    assert before["role"] == "client" and before["items"] == 1
    owner = int(str(before["owner_pid"]))
    assert alive(owner) and (launch.ping(db_of(env)) or {})["served_by"] == "background"
    assert f"serving {db_of(env)} (pid {owner}" in owner_log(env)

    found = nbmemory(env, "search", "staging database", "--json")
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)["hits"]
    assert hits[0]["id"] == 1 and hits[0]["tags"] == ["ops"]
    # A client neither opens DuckDB nor loads a model: it imports none of their packages.
    assert heavy_modules(found) == []
    text = nbmemory(env, "search", "staging database", "--explain")
    assert "#1" in text.stdout and "[bm25]" in text.stdout, text.stderr
    after = stats(env)
    assert after["owner_pid"] == owner and after["searches"] == 2


def test_the_owner_exits_after_its_idle_time_and_closes_the_file(env: dict[str, str]) -> None:
    env["NBMEMORY_IDLE_SECONDS"] = "1.5"
    assert nbmemory(env, "remember", "kafka lag pages the on-call engineer").returncode == 0
    owner = int(str(stats(env)["owner_pid"]))
    assert wait_gone(owner), "the owner is still up long after its idle time"
    assert "idle for" in owner_log(env) and "closed" in owner_log(env)
    # The file is free again: a plain Memory opens it (DuckDB would refuse while it is held).
    with Memory(db_of(env), embedder=FakeEmbedder(dim=32)) as mem:
        assert mem.stats()["items"] == 1
    # And the next run starts a new owner.
    assert int(str(stats(env)["owner_pid"])) != owner


def test_stop_stops_the_background_owner_and_says_when_there_is_none(env: dict[str, str]) -> None:
    assert nbmemory(env, "remember", "polars lazy frames").returncode == 0
    owner = int(str(stats(env)["owner_pid"]))
    out = nbmemory(env, "stop")
    assert out.returncode == 0 and f"stopped the owner of {db_of(env)} (pid {owner})" in out.stdout
    assert wait_gone(owner, 5)
    out = nbmemory(env, "stop")
    assert out.returncode == 0 and "no process serves" in out.stdout
    # Stopped cleanly: nothing is lost.
    with Memory(db_of(env), embedder=FakeEmbedder(dim=32)) as mem:
        assert mem.search("polars", k=1).hits[0].text == "polars lazy frames"


def test_two_runs_at_once_start_one_owner(env: dict[str, str]) -> None:
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", CLI, "-q", "remember", f"fact number {i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        for i in range(4)
    ]
    for run in runs:
        out, err = run.communicate(timeout=120)
        assert run.returncode == 0 and "remembered #" in out, err
        assert "Conflicting lock" not in err
    # One owner served: the others waited on the lock and found it. Under load a run can miss the
    # owner's first answer and start a second process, which sees the file served and exits.
    log = owner_log(env)
    assert log.count("serving ") == 1
    assert log.count("already served") <= len(runs) - 1
    assert stats(env)["items"] == 4


def test_a_kernel_that_owns_the_memory_serves_the_cli_and_is_not_stopped(env: dict[str, str]) -> None:
    with connect(db_of(env), embedder=FakeEmbedder(dim=32)) as kernel:
        assert kernel.role == "owner" and kernel.ping()["served_by"] == "process"
        kernel.remember("the kernel wrote this")
        seen = stats(env)
        assert seen["role"] == "client" and seen["owner_pid"] == os.getpid()
        out = nbmemory(env, "stop")
        assert out.returncode == 1 and "left running" in out.stderr
        assert kernel.search("kernel wrote", k=1).hits  # still the owner, still open
    assert not launch.log_path(db_of(env)).exists()  # no background owner was ever started


def test_a_killed_owner_is_replaced_by_the_next_run(env: dict[str, str]) -> None:
    assert nbmemory(env, "remember", "grafana dashboards live in ops/dashboards").returncode == 0
    owner = int(str(stats(env)["owner_pid"]))
    os.kill(owner, signal.SIGKILL)
    assert wait_gone(owner, 10)
    found = nbmemory(env, "search", "grafana dashboards", "--json")
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["hits"][0]["text"].startswith("grafana")
    assert int(str(stats(env)["owner_pid"])) not in (owner, 0)


def test_an_owner_of_another_model_is_replaced(env: dict[str, str]) -> None:
    first = int(str(stats(env)["owner_pid"]))
    run = nbmemory(env, "--model", "fake-other", "stats", "--json")
    assert run.returncode == 0, run.stderr
    second = json.loads(run.stdout)
    assert second["owner_pid"] != first and wait_gone(first, 5)
    assert (launch.ping(db_of(env)) or {})["model"] == "fake-other"


def test_serve_runs_an_owner_in_the_foreground(env: dict[str, str]) -> None:
    serving = subprocess.Popen(
        [sys.executable, "-c", CLI, "-q", "serve", "--idle-seconds", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    try:
        deadline = time.monotonic() + 60
        while "serving" not in (line := serving.stderr.readline() if serving.stderr else ""):
            assert serving.poll() is None and time.monotonic() < deadline, line
        assert "runs until stopped" in line
        assert nbmemory(env, "remember", "served in a terminal").returncode == 0
        assert stats(env)["owner_pid"] == serving.pid
        # A second `serve` finds it and says so.
        again = nbmemory(env, "serve")
        assert again.returncode == 1 and f"already served by pid {serving.pid} (serve)" in again.stderr
        serving.send_signal(signal.SIGINT)  # Ctrl-C
        assert serving.wait(timeout=30) == 0
    finally:
        if serving.poll() is None:
            serving.kill()
            serving.wait()
    with Memory(db_of(env), embedder=FakeEmbedder(dim=32)) as mem:
        assert mem.stats()["items"] == 1


def test_idle_seconds_zero_means_each_run_opens_the_memory_itself(env: dict[str, str]) -> None:
    run = nbmemory(env, "stats", "--json", NBMEMORY_IDLE_SECONDS="0")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["role"] == "owner"
    assert launch.ping(db_of(env)) is None and not launch.log_path(db_of(env)).exists()


@pytest.mark.model
def test_no_progress_bar_or_library_chatter_on_a_plain_search(env: dict[str, str]) -> None:
    def real(*args: str) -> subprocess.CompletedProcess[str]:
        # The real program and model, without -q: nothing but results may be printed.
        return subprocess.run(
            [sys.executable, "-m", "nbmemory.cli", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=300,
        )

    assert real("remember", "Deploys need the VPN on.").returncode == 0
    out = real("search", "vpn deploys")
    assert out.returncode == 0 and "Deploys need the VPN on." in out.stdout
    assert out.stderr == "", out.stderr
    log = owner_log(env)
    assert "Loading weights" not in log and "it/s" not in log, log
    # The same with no background owner: this run loads the model itself.
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "nbmemory.cli",
            "--home",
            str(Path(env["NBMEMORY_HOME"]) / "own"),
            "search",
            "x",
        ],
        capture_output=True,
        text=True,
        env={**env, "NBMEMORY_IDLE_SECONDS": "0"},
        cwd=REPO,
        timeout=300,
    )
    assert out.returncode == 0 and out.stderr == "", out.stderr
