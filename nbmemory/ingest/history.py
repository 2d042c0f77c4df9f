"""Import IPython's history database (``history.sqlite``) into the memory, one item per input.

IPython records every session's inputs (table ``history``: ``session``, ``line``, ``source``,
``source_raw``), their outputs when ``HistoryManager.db_log_output`` is on (``output_history``)
and each session's start (``sessions.start``, local time). It does not record when a cell ran:
an input's event time is its session's start, nothing finer. Each input becomes a remembered
item (tag ``ipython-history``) with source ``ipython-history:<session>:<line>``, conversation
``ipython session <session>``, its output appended; nbmemory's own magics are left out, and
secrets are redacted by the store as for every remembered text.

A second import of the same file stores only what is new: the last session and line imported
from each history file are kept beside the memory file (``<memory>.imports.json``), written
once the items are stored; the store call carries a request key naming the range, so a retry
after a crash between the two stores nothing twice.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from nbmemory import own_output
from nbmemory.errors import NbMemoryError

#: Where IPython keeps the default profile's history.
DEFAULT_PATH = Path("~/.ipython/profile_default/history.sqlite")
#: The tag every imported input carries.
TAG = "ipython-history"
#: An output longer than this is cut (outputs are reprs: a long one is data, not a note).
MAX_OUTPUT_CHARS = 2000


@dataclass(frozen=True)
class HistoryInput:
    """One input of an IPython session, with its output where IPython recorded one."""

    session: int
    line: int
    source: str
    output: str | None
    started: datetime | None

    @property
    def text(self) -> str:
        if not self.output:
            return self.source
        out = self.output
        if len(out) > MAX_OUTPUT_CHARS:
            out = out[:MAX_OUTPUT_CHARS] + f"… ({len(self.output)} characters, cut)"
        return f"{self.source}\nOut[{self.line}]: {out}"


@dataclass
class HistoryImport:
    """What one import did: the file, inputs stored, inputs left out as nbmemory's own."""

    path: str
    imported: int = 0
    skipped_own: int = 0
    sessions: int = 0

    def summary(self) -> str:
        own = f", {self.skipped_own} of nbmemory's own magics left out" if self.skipped_own else ""
        return f"{self.path}: {self.imported} new inputs from {self.sessions} sessions{own}"


def _fail(path: Path, why: str) -> NbMemoryError:
    return NbMemoryError(f"{path}: {why}; nothing was imported")


def _started(value: Any) -> datetime | None:
    """A session's start as IPython stored it (local time, naive) as an aware datetime."""
    if value is None:
        return None
    try:
        start = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return start.astimezone() if start.tzinfo is None else start


def read_history(path: Path, after: tuple[int, int] = (0, 0)) -> list[HistoryInput]:
    """The inputs of the history database at ``path`` past ``(session, line)`` ``after``.

    Raises
    ------
    NbMemoryError
        The file is missing, not SQLite, locked, damaged or lacks IPython's tables.
    """
    if not path.is_file():
        raise _fail(path, "no such file" if not path.exists() else "not a file")
    try:
        # Read only: never touch the kernel's file (no journal, no lock held past the read).
        conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=2.0)
    except sqlite3.Error as exc:
        raise _fail(path, f"cannot be opened ({exc})") from None
    try:
        columns = {r[1] for r in conn.execute("PRAGMA table_info(output_history)")}
        output = (
            "(SELECT o.output FROM output_history o WHERE o.session = h.session AND o.line = h.line)"
            if {"session", "line", "output"} <= columns
            else "NULL"
        )
        rows = conn.execute(
            f"SELECT h.session, h.line, h.source_raw, {output}, s.start FROM history h "
            "LEFT JOIN sessions s ON s.session = h.session "
            "WHERE h.session > ? OR (h.session = ? AND h.line > ?) ORDER BY h.session, h.line",
            [after[0], after[0], after[1]],
        ).fetchall()
    except sqlite3.DatabaseError as exc:
        message = str(exc)
        if "no such table" in message or "no such column" in message:
            why = f"not an IPython history database ({message})"
        elif "locked" in message or "busy" in message:
            why = f"the database is locked by another process ({message}): try again when it is free"
        else:
            why = f"not a readable SQLite database ({message})"
        raise _fail(path, why) from None
    finally:
        conn.close()
    return [
        HistoryInput(
            int(session), int(line), str(source or ""), None if out is None else str(out), _started(start)
        )
        for session, line, source, out, start in rows
    ]


def _state_file(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".imports.json")


def _load_state(db_path: Path) -> dict[str, list[int]]:
    try:
        data = json.loads(_state_file(db_path).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save_state(db_path: Path, state: dict[str, list[int]]) -> None:
    target = _state_file(db_path)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(state, indent=1), "utf-8")
    os.replace(tmp, target)


def import_ipython_history(
    memory: Any,
    path: str | os.PathLike[str] | None = None,
    *,
    namespace: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> HistoryImport:
    """Store the inputs of IPython's history at ``path`` (default: the default profile's) that
    an earlier import did not, one remembered item each; returns what it did.

    ``memory`` is a :class:`~nbmemory.memory.Memory` or a client of one (``connect()``).
    """
    file = Path(path if path is not None else DEFAULT_PATH).expanduser()
    key = str(file.resolve()) + (f"#{namespace}" if namespace else "")
    db_path = Path(memory.settings.db_path)
    state = _load_state(db_path)
    last = state.get(key, [0, 0])
    after = (int(last[0]), int(last[1])) if len(last) == 2 else (0, 0)
    inputs = read_history(file, after)
    report = HistoryImport(str(file))
    kept = []
    for entry in inputs:
        source = own_output.without_setup(entry.source).strip()
        if not source:
            continue
        if own_output.calls_magic(source):
            report.skipped_own += 1
            continue
        kept.append(HistoryInput(entry.session, entry.line, source, entry.output, entry.started))
    if kept:
        end = (inputs[-1].session, inputs[-1].line)
        memory.remember_many(
            [e.text for e in kept],
            tags=[TAG],
            namespace=namespace,
            sources=[f"ipython-history:{e.session}:{e.line}" for e in kept],
            headings=[f"IPython session {e.session}, In [{e.line}]" for e in kept],
            times=[e.started for e in kept],
            conversations=[f"ipython session {e.session}" for e in kept],
            progress=progress,
            request_key=f"{TAG}:{key}:{after[0]}.{after[1]}-{end[0]}.{end[1]}",
        )
    report.imported = len(kept)
    report.sessions = len({e.session for e in kept})
    if inputs:
        state[key] = [inputs[-1].session, inputs[-1].line]
        _save_state(db_path, state)
    return report
