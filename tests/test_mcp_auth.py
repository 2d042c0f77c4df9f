"""``nbmemory mcp --http`` requires a bearer token: real ``nbmemory mcp --http`` processes, real
HTTP requests, and the ``mcp`` SDK's own streamable HTTP client for the authenticated path."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import LATEST_PROTOCOL_VERSION

from nbmemory import Memory
from nbmemory.cli import main
from nbmemory.embed import FakeEmbedder
from nbmemory.mcp.auth import TOKEN_ENV

REPO = Path(__file__).resolve().parents[1]
LAUNCHER = (
    "import importlib; cli = importlib.import_module('nbmemory.cli.main'); from nbmemory.embed import FakeEmbedder; real = cli._memory; "
    "cli._memory = lambda a, **k: real(a, embedder=FakeEmbedder(dim=32), **k); raise SystemExit(cli.main())"
)
TOOLS = {"search", "remember", "forget", "get", "related", "context", "stats", "index"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": LATEST_PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
REMEMBER = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {"name": "remember", "arguments": {"text": "an intruder wrote this"}},
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A memory home with two items; ``NBMEMORY_HOME`` points at it."""
    folder = tmp_path / "home"
    monkeypatch.setenv("NBMEMORY_HOME", str(folder))
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with Memory(folder / "memory.duckdb", embedder=FakeEmbedder(dim=32)) as mem:
        mem.remember_many(
            ["kafka consumer lag pages the on-call engineer", "the staging database is db-stg-12"]
        )
    return folder


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def mcp_http(home: Path, log: Path, *options: str) -> Iterator[str]:
    """A real ``nbmemory mcp --http PORT`` process on the memory in ``home``; yields its URL."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "NBMEMORY_HOME": str(home)}
    env.pop(TOKEN_ENV, None)
    argv = [sys.executable, "-c", LAUNCHER, "mcp", "--http", str(port), *options]
    with log.open("w") as out:
        process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=30)


def client(url: str, token: str | None) -> Client:
    """The SDK's streamable HTTP client, sending the token the way a client config does."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else None
    return Client(streamable_http_client(url, http_client=create_mcp_http_client(headers=headers)))


def data(result: Any) -> Any:
    assert not result.is_error, result.content
    return result.structured_content


def test_http_requires_the_token_and_an_authenticated_client_works(home: Path, tmp_path: Path) -> None:
    token_file = home / "mcp-token"
    log = tmp_path / "log"
    with mcp_http(home, log) as url:
        # Generated on first use, stored 0600, shown once on stderr.
        token = token_file.read_text().strip()
        assert len(token) >= 40 and stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert f"generated the MCP token, stored in {token_file} (0600): {token}" in log.read_text()

        for headers in ({}, {"Authorization": "Bearer wrong-token-of-some-length"}, {"Authorization": token}):
            for message in (INITIALIZE, REMEMBER):
                answer = httpx.post(url, json=message, headers={**MCP_HEADERS, **headers}, timeout=30)
                assert answer.status_code == 401, answer.text
                assert answer.headers["www-authenticate"].startswith("Bearer")
                assert "Authorization: Bearer" in answer.json()["error_description"]
        # The same request with the token is served: the 401s above were the token's doing.
        answer = httpx.post(
            url, json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"}, timeout=30
        )
        assert answer.status_code == 200, answer.text

        async def check() -> None:
            async with client(url, "not-the-token-0123456789"):
                pass  # pragma: no cover (the handshake fails)

        # The SDK's client reports the 401 as an error response to its first request.
        with pytest.raises(ExceptionGroup) as failed:
            anyio.run(check)
        assert "Server returned an error response" in repr(failed.value), repr(failed.value)

        async def session() -> None:
            async with client(url, token) as mcp:
                assert {t.name for t in (await mcp.list_tools()).tools} == TOOLS
                assert data(await mcp.call_tool("stats", {}))["items"] == 2  # nothing was written
                found = data(await mcp.call_tool("search", {"query": "kafka lag", "k": 3}))
                assert "kafka" in found["hits"][0]["snippet"]
                stored = data(await mcp.call_tool("remember", {"text": "the deploy freeze starts friday"}))
                assert stored["item"]["text"] == "the deploy freeze starts friday"
                assert data(await mcp.call_tool("stats", {}))["items"] == 3

        anyio.run(session)
    with Memory(home / "memory.duckdb", embedder=FakeEmbedder(dim=32)) as mem:
        texts = [t for (t,) in mem.db.fetchall("SELECT text FROM chunks")]
    assert "an intruder wrote this" not in texts and "the deploy freeze starts friday" in texts


def test_show_token_prints_the_stored_token(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["mcp", "--show-token"]) == 0
    shown = capsys.readouterr().out.strip()
    assert shown == (home / "mcp-token").read_text().strip()
    assert main(["mcp", "--show-token"]) == 0
    assert capsys.readouterr().out.strip() == shown  # the same token, not a new one

    elsewhere = home.parent / "tokens" / "agent-token"
    assert main(["mcp", "--show-token", "--token-file", str(elsewhere)]) == 0
    other = capsys.readouterr().out.strip()
    assert other == elsewhere.read_text().strip() and other != shown
    assert stat.S_IMODE(elsewhere.stat().st_mode) == 0o600

    monkeypatch.setenv(TOKEN_ENV, "a-token-from-the-environment")
    assert main(["mcp", "--show-token"]) == 0
    assert capsys.readouterr().out.strip() == "a-token-from-the-environment"
    monkeypatch.setenv(TOKEN_ENV, "short")
    assert main(["mcp", "--show-token"]) == 1
    assert "at least 16 printable ASCII characters" in capsys.readouterr().err
    monkeypatch.delenv(TOKEN_ENV)
    assert main(["mcp", "--no-auth"]) == 1
    assert "--no-auth applies to --http only" in capsys.readouterr().err


def test_no_auth_serves_without_a_token_and_warns(home: Path, tmp_path: Path) -> None:
    log = tmp_path / "log"
    with mcp_http(home, log, "--no-auth", "--read-only") as url:

        async def session() -> None:
            async with client(url, None) as mcp:
                assert data(await mcp.call_tool("search", {"query": "staging database"}))["hits"]

        anyio.run(session)
        assert "warning: --no-auth" in log.read_text()
    assert not (home / "mcp-token").exists()  # nothing generated when no token is wanted
