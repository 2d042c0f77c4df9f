"""One memory shared by several processes: owner, clients, failover when the owner dies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from nbmemory import Memory
from nbmemory.embed import FakeEmbedder
from nbmemory.remote import connect
from nbmemory.remote.owner import endpoint

REPO = Path(__file__).resolve().parents[1]

WORKER = textwrap.dedent(
    """
    import json, sys, time
    from nbmemory.remote import connect
    from nbmemory.embed import FakeEmbedder
    path, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    mem = connect(path, embedder=FakeEmbedder(dim=32))
    print(json.dumps({"ready": name, "role": mem.role}), flush=True)
    errors = 0
    for i in range(count):
        try:
            item = mem.remember(f"{name} fact {i} about topic {i % 13}", tags=[name])
            print(json.dumps({"id": item.id, "text": item.text}), flush=True)
            if i % 5 == 0:
                mem.search(f"{name} fact {i}", k=5)
        except Exception as exc:  # counted, never hidden
            errors += 1
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
    print(json.dumps({"done": name, "errors": errors, "role": mem.role, "failovers": mem.failovers}), flush=True)
    mem.close()
    """
)


def start(path: Path, name: str, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, str(path), name, str(count)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def read_all(proc: subprocess.Popen[str], timeout: float = 240) -> list[dict]:
    out, err = proc.communicate(timeout=timeout)
    assert "Conflicting lock" not in err, err
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.mark.integration
def test_a_client_process_uses_the_owners_memory(tmp_path: Path) -> None:
    path = tmp_path / "m.duckdb"
    with connect(path, embedder=FakeEmbedder(dim=32)) as owner:
        assert owner.role == "owner"
        proc = start(path, "client", 5)
        lines = read_all(proc)
        assert lines[0]["role"] == "client"
        ids = [line["id"] for line in lines if "id" in line]
        assert len(ids) == 5 and lines[-1]["errors"] == 0
        # The owner sees the client's writes at once.
        assert owner.search("client fact 3 about topic 3", k=3).ids[0] == ids[3]
    # Errors cross the wire as the same class.
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            from nbmemory.remote import connect
            from nbmemory import NotFoundError
            from nbmemory.embed import FakeEmbedder
            a = connect({str(path)!r}, embedder=FakeEmbedder(dim=32))
            import subprocess, sys
            code = "from nbmemory.remote import connect\\nfrom nbmemory import NotFoundError\\n" \\
                   "b = connect({str(path)!r}, allow_owner=False)\\n" \\
                   "try:\\n    b.get(987654)\\nexcept NotFoundError as e:\\n    print('NotFoundError', e)"
            print(subprocess.run([sys.executable, '-c', code], capture_output=True, text=True).stdout)
        """),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert "NotFoundError no item with id 987654" in proc.stdout, proc.stderr


def test_wrong_key_is_refused(tmp_path: Path) -> None:
    from multiprocessing import AuthenticationError
    from multiprocessing.connection import Client

    path = tmp_path / "m.duckdb"
    with connect(path, embedder=FakeEmbedder(dim=32)):
        address, _ = endpoint(path)
        with pytest.raises((AuthenticationError, EOFError, OSError)):
            Client(address, family="AF_UNIX", authkey=b"not the key").send_bytes(b"{}")


class Output:
    """A worker's output lines, read as they come: ``wrote`` is set at its first committed write."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.wrote = threading.Event()
        self._lines: list[dict] = []
        self._err: list[str] = []
        assert proc.stderr is not None
        self._readers = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=lambda: self._err.extend(proc.stderr), daemon=True),  # type: ignore[arg-type]
        ]
        for reader in self._readers:
            reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self._lines.append(json.loads(line))
                if "id" in self._lines[-1]:
                    self.wrote.set()
        self.wrote.set()  # at the end of its output: a worker that never wrote fails on its lines

    def lines(self, timeout: float = 240) -> list[dict]:
        """Every line, once the worker has exited (as :func:`read_all`)."""
        self.proc.wait(timeout)
        for reader in self._readers:
            reader.join(timeout)
        err = "".join(self._err)
        assert "Conflicting lock" not in err, err
        return self._lines


def _run_with_owner_kill(tmp_path: Path, per_worker: int, kills: int) -> dict[str, object]:
    path = tmp_path / "m.duckdb"
    # The first process becomes the owner; three more join as clients (two kernels and a CLI).
    first = start(path, "owner0", per_worker)
    assert first.stdout is not None
    assert json.loads(first.stdout.readline())["role"] == "owner"
    workers = {f"w{i}": start(path, f"w{i}", per_worker) for i in range(3)}
    # Each worker's output as it comes; the owner is killed once every worker has a write done.
    outputs = {name: Output(proc) for name, proc in workers.items()}
    killed: list[str] = []
    for output in outputs.values():
        assert output.wrote.wait(120), "a worker never wrote"
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    killed.append("owner0")
    committed: dict[str, list[int]] = {}
    errors = 0
    failovers = 0
    for name, output in outputs.items():
        lines = output.lines()
        committed[name] = [line["id"] for line in lines if "id" in line]
        done = lines[-1]
        assert "done" in done, lines[-3:]
        errors += done["errors"]
        failovers += done["failovers"]
    with Memory(path, embedder=FakeEmbedder(dim=32)) as mem:
        stored = {i for (i,) in mem.db.fetchall("SELECT id FROM chunks WHERE deleted_at IS NULL")}
        texts = [t for (t,) in mem.db.fetchall("SELECT text FROM chunks WHERE deleted_at IS NULL")]
        missing = [i for ids in committed.values() for i in ids if i not in stored]
        for name, _ids in committed.items():
            assert mem.search(f"{name} fact {per_worker - 1}", k=5, tags=[name]).hits
        doctor_ok = mem.doctor().ok
    return {
        "errors": errors,
        "missing": missing,
        "duplicates": len(texts) - len(set(texts)),
        "committed": sum(len(v) for v in committed.values()),
        "failovers": failovers,
        "doctor_ok": doctor_ok,
        "killed": killed,
    }


@pytest.mark.integration
def test_owner_killed_mid_run_loses_no_write_and_nobody_sees_a_lock_error(tmp_path: Path) -> None:
    figures = _run_with_owner_kill(tmp_path, per_worker=60, kills=1)
    assert figures["errors"] == 0
    assert figures["missing"] == []
    assert figures["duplicates"] == 0
    assert figures["committed"] == 180
    assert figures["failovers"] >= 1  # somebody had to take over
    assert figures["doctor_ok"]


@pytest.mark.integration
@pytest.mark.slow
def test_sustained_shared_use_with_owner_kill(tmp_path: Path) -> None:
    figures = _run_with_owner_kill(tmp_path, per_worker=1000, kills=1)
    print(json.dumps(figures))
    assert figures["errors"] == 0 and figures["missing"] == [] and figures["duplicates"] == 0


def test_wire_round_trips_results_and_refuses_unknown_types(fake_mem: Memory) -> None:
    from nbmemory.remote import wire
    from nbmemory.search.config import PipelineConfig

    fake_mem.remember("wire format check", tags=["t"])
    result = fake_mem.search("wire format", k=3)
    back = wire.loads(wire.dumps({"ok": result}))["ok"]
    assert back.ids == result.ids
    assert back.hits[0].ranks == result.hits[0].ranks and back.hits[0].updated_at == result.hits[0].updated_at
    assert back.explain() == result.explain()
    config = wire.loads(wire.dumps(PipelineConfig(retrievers=("bm25",), depth=7)))
    assert config == PipelineConfig(retrievers=("bm25",), depth=7)
    with pytest.raises(TypeError, match="cannot send"):
        wire.dumps(object())
