"""Importing IPython's history: a history.sqlite written by a real IPython, imported once, then
only what is new; a file that is not one is refused by name."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nbmemory import Memory
from nbmemory.cli.main import main
from nbmemory.errors import NbMemoryError
from nbmemory.ingest.history import import_ipython_history


def ipython_session(hist: Path, tmp_path: Path, lines: list[str]) -> None:
    """Run a real IPython on ``lines`` (typed at its prompt) with its history in ``hist``."""
    env = {**os.environ, "IPYTHONDIR": str(tmp_path / "ipython")}
    done = subprocess.run(
        [sys.executable, "-m", "IPython", "--no-banner", "--simple-prompt", "--colors=nocolor",
         f"--HistoryManager.hist_file={hist}", "--HistoryManager.db_log_output=True"],
        input="\n".join([*lines, "exit"]) + "\n", capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def history_items(mem: Memory) -> list[tuple[str, str, datetime | None, str | None]]:
    return [
        (str(r[0]), str(r[1]), r[2], r[3])
        for r in mem.db.fetchall(
            "SELECT source, text, event_at, conversation FROM chunks "
            "WHERE source LIKE 'ipython-history:%' ORDER BY id"
        )
    ]


def test_history_is_imported_once_with_its_session_time(fake_mem: Memory, tmp_path: Path) -> None:
    hist = tmp_path / "history.sqlite"
    ipython_session(
        hist,
        tmp_path,
        [
            "zebra_count = 41 + 1  # giraffe note",
            "zebra_count",
            "%memsearch zebra",
            "token = 'ghp_abcdefghijklmnopqrstuvwxyz0123456789'",
        ],
    )
    start = sqlite3.connect(hist).execute("SELECT start FROM sessions").fetchone()[0]
    done = import_ipython_history(fake_mem, hist)
    assert (done.imported, done.skipped_own, done.sessions) == (3, 1, 1)
    items = history_items(fake_mem)
    assert [source for source, *_ in items] == [
        "ipython-history:1:1",
        "ipython-history:1:2",
        "ipython-history:1:4",
    ]
    # Found by its text, with its session's start as the time (IPython keeps no cell's own time).
    result = fake_mem.search("giraffe", k=5)
    hit = next(h for h in result.hits if h.ranks.get("bm25") == 1)
    assert hit.source == "ipython-history:1:1"
    assert hit.conversation == "ipython session 1"
    assert items[0][2] == datetime.fromisoformat(start).astimezone(UTC).replace(tzinfo=None)
    # The recorded output comes with its input; the secret is redacted; the magic is left out.
    assert "Out[2]: 42" in items[1][1]
    assert "ghp_abcdefghijklmnopqrstuvwxyz0123456789" not in items[2][1]
    assert not any("memsearch" in text for _, text, *_ in items)

    assert import_ipython_history(fake_mem, hist).imported == 0
    assert len(history_items(fake_mem)) == 3

    ipython_session(hist, tmp_path, ["okapi_total = 7"])
    again = import_ipython_history(fake_mem, hist)
    assert (again.imported, again.sessions) == (1, 1)
    assert [s for s, *_ in history_items(fake_mem)][3:] == ["ipython-history:2:1"]


def test_a_file_that_is_not_a_history_database_is_refused_by_name(fake_mem: Memory, tmp_path: Path) -> None:
    fake_mem.remember("kept before the failed import")
    garbage = tmp_path / "history.sqlite"
    garbage.write_bytes(b"this is not sqlite at all\n" * 100)
    with pytest.raises(NbMemoryError, match=r"history\.sqlite: not a readable SQLite database.*nothing was"):
        import_ipython_history(fake_mem, garbage)
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(NbMemoryError, match=r"other\.sqlite: not an IPython history database"):
        import_ipython_history(fake_mem, other)
    with pytest.raises(NbMemoryError, match=r"missing\.sqlite: no such file"):
        import_ipython_history(fake_mem, tmp_path / "missing.sqlite")
    assert [h.text for h in fake_mem.search("kept before the failed import").hits][:1] == [
        "kept before the failed import"
    ]


@pytest.mark.usefixtures("shared_default_model")
def test_the_command_line_imports_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NBMEMORY_IDLE_SECONDS", "0")  # each run opens the memory itself
    hist = tmp_path / "history.sqlite"
    ipython_session(hist, tmp_path, ["walrus_marker = 3"])
    garbage = tmp_path / "bad.sqlite"
    garbage.write_text("nope")
    db = str(tmp_path / "m.duckdb")
    assert main(["-q", "--db", db, "import", "ipython-history", str(garbage)]) == 1
    assert "bad.sqlite: not a readable SQLite database" in capsys.readouterr().err
    assert main(["-q", "--db", db, "import", "ipython-history", str(hist)]) == 0
    assert "1 new inputs from 1 sessions" in capsys.readouterr().out
    assert main(["-q", "--db", db, "import", "ipython-history", str(hist)]) == 0
    assert "0 new inputs" in capsys.readouterr().out
