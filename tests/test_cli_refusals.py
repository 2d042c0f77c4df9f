"""The command line as a user runs it (real ``nbmemory`` processes): input that cannot be searched
or indexed is refused before anything loads, a reader that stops reading ends the run quietly,
``mcp --http`` says where it listens, and the tiers are explained."""

from __future__ import annotations

import os
import re
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOTES = REPO / "tests" / "data" / "til"

pytestmark = pytest.mark.integration

# `nbmemory` embedding with the fake embedder; at exit it says whether it opened a memory.
CLI = """
import atexit, sys
import nbmemory.cli
from nbmemory.embed import FakeEmbedder
cli = sys.modules["nbmemory.cli.main"]  # nbmemory.cli.main is also the function's name
real = cli._memory
opened = []
def fake(args, **kwargs):
    opened.append(1)
    return real(args, embedder=FakeEmbedder(dim=32), **kwargs)
cli._memory = fake
atexit.register(lambda: print(f"OPENED {len(opened)}", file=sys.stderr))
raise SystemExit(cli.main())
"""


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    # No background owner: each run opens the memory itself and closes it when done.
    yield {
        **os.environ,
        "NBMEMORY_HOME": str(tmp_path / "home"),
        "NBMEMORY_RUNTIME_DIR": str(tmp_path / "run"),
        "NBMEMORY_IDLE_SECONDS": "0",
        "HF_HUB_OFFLINE": "1",
    }


def nbmemory(env: dict[str, str], *args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CLI, "-q", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        **kwargs,  # type: ignore[arg-type]
    )


def opened(run: subprocess.CompletedProcess[str]) -> bool:
    return "OPENED 0" not in run.stderr


@pytest.mark.parametrize("query", ["?!...", "...", "--- ***", "__"])
def test_a_query_without_a_word_is_refused_before_the_memory_opens(env: dict[str, str], query: str) -> None:
    run = nbmemory(env, "search", "--", query)
    assert run.returncode == 1, run
    assert run.stdout == ""
    assert f"error: the query {query!r} has no words to search for: give a letter or a digit" in run.stderr
    assert not opened(run) and "Traceback" not in run.stderr
    forget = nbmemory(env, "forget", "--query", query, "--yes")
    assert forget.returncode == 1 and "has no words to search for" in forget.stderr and not opened(forget)


def test_index_of_a_missing_path_fails_before_the_model_loads(env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text("# A\n\nsome text\n")
    missing = tmp_path / "nonexistent"
    run = nbmemory(env, "index", str(tmp_path / "notes"), str(missing))
    assert run.returncode == 1, run
    # Said first and plainly, naming the path; no report of a run that did not happen.
    assert run.stderr.startswith(f"error: {missing}: no such file or folder; nothing was indexed")
    assert run.stdout == "" and not opened(run)
    assert not (tmp_path / "home").exists()  # no memory file was made
    link = tmp_path / "dangling"
    link.symlink_to(tmp_path / "gone")
    run = nbmemory(env, "index", str(link))
    assert run.returncode == 1 and f"error: {link}: a broken symlink; nothing was indexed" in run.stderr


def test_a_reader_that_stops_reading_ends_the_run_quietly(env: dict[str, str], tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    for i in range(30):
        (notes / f"drill-{i}.md").write_text(f"# Drill {i}\n\nPelican failover drill number {i}.\n")
    assert nbmemory(env, "index", str(notes)).returncode == 0
    # `nbmemory search ... | head`, with head gone before the first line: every write fails.
    read, write = os.pipe()
    os.close(read)
    try:
        run = subprocess.run(
            [sys.executable, "-c", CLI, "-q", "search", "pelican failover drill", "-k", "30"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=120,
        )
    finally:
        os.close(write)
    assert opened(run), run.stderr  # it searched, then found no reader
    assert "BrokenPipeError" not in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert "Exception ignored" not in run.stderr, run.stderr
    assert run.returncode == 141, (run.returncode, run.stderr)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_mcp_over_http_says_the_url_it_listens_on(env: dict[str, str]) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nbmemory.cli", "mcp", "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        said = ""
        deadline = time.monotonic() + 60
        assert proc.stderr is not None
        # Read what it says as it comes, without blocking past the deadline.
        while time.monotonic() < deadline and "Ctrl-C stops" not in said:
            ready, _, _ = select.select([proc.stderr], [], [], 0.5)
            if ready:
                chunk = os.read(proc.stderr.fileno(), 4096).decode()
                if not chunk:
                    break
                said += chunk
        url = f"http://127.0.0.1:{port}/mcp"
        assert f"nbmemory: MCP server on {url} (clients send 'Authorization: Bearer TOKEN')" in said, said
        # Said once the port is bound: the server answers there (401 without the token).
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            pass
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.model
@pytest.mark.usefixtures("shared_default_model")
def test_search_explains_what_a_tier_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from nbmemory.cli import main
    from nbmemory.items import TIER_MEANING

    home = ["--home", str(tmp_path / "home"), "-q"]
    monkeypatch.setenv("NBMEMORY_IDLE_SECONDS", "0")
    monkeypatch.setenv("NBMEMORY_RUNTIME_DIR", str(tmp_path / "run"))
    assert main([*home, "index", str(NOTES / "git" / "grab-a-single-file-from-a-stash.md")]) == 0
    capsys.readouterr()
    assert main([*home, "search", "stash@{1} README.md", "-k", "3"]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert re.match(
        r"\s+1\. \[\d\.\d{4} (high|medium|low)\] #\d+ .*grab-a-single-file-from-a-stash\.md", first
    ), out
    # One line under the hits says what the word after the score means.
    assert f"({TIER_MEANING})" in out.splitlines()
    assert main([*home, "search", "stash@{1} README.md", "--json"]) == 0
    assert "tier (high" not in capsys.readouterr().out  # machine-readable output stays JSON
    with pytest.raises(SystemExit):
        main(["search", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert (
        "Tier (high, medium, low): how close in meaning the item is to the query, by the model's cosine"
        in text
    )
    assert "not a rank" in text
