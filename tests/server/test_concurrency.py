"""The Jupyter server, two kernel-like processes and the CLI on one memory, with the server killed.

Slow (a few minutes; 1,300+ writes and 240 searches): ``pytest tests/server/test_concurrency.py -m slow -s``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.test_remote import WORKER

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def jp_asyncio_loop() -> None:
    """No in-process server here: override pytest-jupyter's autouse loop."""


@pytest.fixture(autouse=True)
def jp_server_cleanup() -> None:
    """No in-process server here: override pytest-jupyter's autouse cleanup."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(
    env: dict[str, str], port: int, token: str, root: Path, log: Path
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter_server",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--ServerApp.jpserver_extensions={'nbmemory': True}",
            *(["--allow-root"] if os.getuid() == 0 else []),
        ],
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        cwd=root,
    )


def api(base: str, token: str, method: str, path: str, body: Any = None, timeout: float = 120) -> Any:
    request = urllib.request.Request(
        f"{base}/nbmemory/{path}",
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def wait_up(base: str, token: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            api(base, token, "GET", "stats")  # also makes the server open (or join) the memory
            return
        except (urllib.error.URLError, OSError):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("jupyter server did not start:\n" + log.read_text()[-3000:]) from None
            time.sleep(0.5)


def test_server_kernels_and_cli_share_one_memory_through_a_server_kill(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    path = tmp_path / "home" / "memory.duckdb"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "NBMEMORY_HOME": str(tmp_path / "home"),
        "NBMEMORY_RUNTIME_DIR": str(tmp_path / "run"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "jconfig"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "jrun"),
        "PYTHONPATH": str(REPO),
    }
    port, token = free_port(), secrets.token_hex(16)
    base, log = f"http://127.0.0.1:{port}", tmp_path / "server.log"
    server = start_server(env, port, token, root, log)
    wait_up(base, token, server, log)
    assert api(base, token, "GET", "stats")["role"] == "owner"

    acknowledged: dict[str, list[int]] = {"http": [], "cli": []}
    problems: list[str] = []

    def http_writer() -> None:
        for i in range(80):
            for _ in range(120):  # the server may be down for a while: retry until it answers
                try:
                    # The same key on every retry: a write whose reply was lost is not stored twice.
                    item = api(
                        base,
                        token,
                        "POST",
                        "remember",
                        {"text": f"http fact {i} about rest", "request_key": f"t-{i}"},
                    )
                    acknowledged["http"].append(int(item["id"]))
                    break
                except (urllib.error.URLError, OSError, ConnectionError):
                    time.sleep(0.5)
            else:
                problems.append(f"http write {i} never acknowledged")

    def cli_writer() -> None:
        for i in range(8):
            out = subprocess.run(
                [sys.executable, "-m", "nbmemory.cli", "-q", "remember", f"cli fact {i} from a terminal"],
                capture_output=True,
                text=True,
                env=env,
                cwd=REPO,
                timeout=300,
            )
            match = re.search(r"remembered #(\d+)", out.stdout)
            if out.returncode != 0 or match is None:
                problems.append(f"cli {i}: rc={out.returncode} {out.stderr[-300:]}")
            else:
                acknowledged["cli"].append(int(match.group(1)))
            if "lock" in out.stderr.lower():
                problems.append(f"cli {i} printed a lock message: {out.stderr[-300:]}")

    workers = {
        f"kernel{i}": subprocess.Popen(
            [sys.executable, "-c", WORKER, str(path), f"kernel{i}", "600"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=env,
        )
        for i in range(2)
    }
    threads = [threading.Thread(target=http_writer), threading.Thread(target=cli_writer)]
    for thread in threads:
        thread.start()
    time.sleep(4)
    os.kill(server.pid, signal.SIGKILL)  # the owner dies mid-run
    server.wait()
    time.sleep(2)
    server = start_server(env, port, token, root, log)  # and comes back, now as a client
    try:
        wait_up(base, token, server, log)
        for thread in threads:
            thread.join(timeout=600)
        for name, proc in workers.items():
            out, err = proc.communicate(timeout=600)
            assert "Conflicting lock" not in err and "lock" not in err.lower(), err[-500:]
            lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            acknowledged[name] = [line["id"] for line in lines if "id" in line]
            assert lines[-1].get("errors") == 0, lines[-3:]
        stats = api(base, token, "GET", "stats")
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    assert problems == []
    assert "Conflicting lock" not in log.read_text()
    all_ids = [i for ids in acknowledged.values() for i in ids]
    figures = {name: len(ids) for name, ids in acknowledged.items()} | {
        "total": len(all_ids),
        "items_after": stats["items"],
    }
    print(json.dumps(figures))
    assert len(acknowledged["http"]) == 80 and len(acknowledged["cli"]) == 8
    assert len(set(all_ids)) == len(all_ids)  # no write stored twice
    assert stats["items"] == len(all_ids)  # nothing stored twice, nothing unacknowledged left over
    with_server = start_server(env, port, token, root, log)
    try:
        wait_up(base, token, with_server, log)
        for item_id in all_ids:  # every acknowledged write is there, by id
            assert api(base, token, "GET", f"items/{item_id}")["id"] == item_id
    finally:
        with_server.kill()
