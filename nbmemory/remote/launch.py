"""Starting and stopping the command line's background owner of a memory file.

A command-line run is a new process: opening the memory itself would cost it the imports and
the model load (seconds) every time. Instead, the first run that needs a memory starts a
background owner for it (``python -m nbmemory.remote.daemon``, detached, its output in a log
file next to its socket) and is its client; later runs find that owner and answer at once. The
owner exits after ``NBMEMORY_IDLE_SECONDS`` without a request (:mod:`nbmemory.remote.daemon`).

Two runs starting at once take turns on a lock file, so at most one owner is started; an owner
that loses the race for the file to a kernel finds that kernel serving it and exits.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbmemory import private
from nbmemory.config import Settings, memory_paths
from nbmemory.errors import NbMemoryError
from nbmemory.remote import wire
from nbmemory.remote.owner import endpoint, try_connect
from nbmemory.runtime import alive

# The program a background owner runs; the arguments of :func:`owner_argv` follow it.
OWNER_PROGRAM = [sys.executable, "-m", "nbmemory.remote.daemon"]
# An owner opens the file (a WAL replay, an index rebuild) before it answers.
START_SECONDS = 300.0
STOP_SECONDS = 30.0
LOG_MAX_BYTES = 1_000_000


def log_path(db_path: Path) -> Path:
    """The log file of the background owner of ``db_path`` (beside its socket)."""
    address, _ = endpoint(db_path)
    return Path(address).with_suffix(".log")


def owner_argv(settings: Settings, on_model_change: str | None = None) -> list[str]:
    """The command line of a background owner for ``settings``."""
    argv = [
        *OWNER_PROGRAM,
        "--db",
        str(settings.db_path.expanduser().absolute()),
        "--model",
        settings.model,
        "--idle-seconds",
        repr(settings.idle_seconds),
    ]
    if on_model_change is not None:
        argv += ["--on-model-change", on_model_change]
    return argv


def ping(db_path: Path) -> dict[str, Any] | None:
    """What the owner of ``db_path`` says of itself (see ``OwnerServer.status``); None: no owner."""
    conn = try_connect(db_path)
    if conn is None:
        return None
    try:
        conn.send_bytes(wire.dumps({"method": "ping"}))
        reply = wire.loads(conn.recv_bytes())
    except (EOFError, OSError):
        return None
    finally:
        conn.close()
    return dict(reply["ok"])


def start(settings: Settings, on_model_change: str | None = None, timeout: float = START_SECONDS) -> None:
    """Start a background owner for ``settings.db_path`` unless some owner answers already.

    Returns once an owner answers (this one, or a process that won the file first).

    Raises
    ------
    NbMemoryError
        The owner exited with an error or did not answer in ``timeout`` seconds; the message
        has the end of its log.
    """
    db_path = settings.db_path
    address, _ = endpoint(db_path)
    fd = os.open(Path(address).with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        # Two runs at once: the second waits here, then finds the owner the first started.
        fcntl.flock(fd, fcntl.LOCK_EX)
        if _answers(db_path):
            return
        # Here, not only in the owner: the line saying what was made owner-only reaches the
        # user's terminal, not the owner's log.
        private.narrow_all(memory_paths(db_path, settings.own_folder), f"memory {db_path}")
        log = log_path(db_path)
        pid = _spawn(owner_argv(settings, on_model_change), log)
        deadline = time.monotonic() + timeout
        while not _answers(db_path):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                if os.waitstatus_to_exitcode(status) == 0:
                    return  # another process owned the file: the caller connects to it
                raise NbMemoryError(
                    f"the background owner of {db_path} failed to start: {_tail(log)} (log: {log})"
                )
            if time.monotonic() > deadline:
                raise NbMemoryError(
                    f"the background owner of {db_path} (pid {pid}) did not answer within "
                    f"{timeout:.0f} s: see {log}"
                )
            time.sleep(0.02)
    finally:
        os.close(fd)


def _answers(db_path: Path) -> bool:
    conn = try_connect(db_path)
    if conn is None:
        return False
    conn.close()
    return True


def _spawn(argv: list[str], log: Path) -> int:
    """Start ``argv`` detached: its own session (a closed terminal or Ctrl-C does not reach it),
    standard input from /dev/null, output appended to ``log``."""
    with contextlib.suppress(OSError):
        if log.stat().st_size > LOG_MAX_BYTES:
            log.replace(log.with_suffix(".log.1"))
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, str(log), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    # posix_spawn, not subprocess: a Popen object would warn that its child outlives it.
    try:
        return os.posix_spawn(argv[0], argv, dict(os.environ), file_actions=actions, setsid=True)
    except OSError as exc:
        raise NbMemoryError(f"could not start a background owner ({' '.join(argv[:3])}): {exc}") from exc


def _tail(log: Path, lines: int = 5) -> str:
    try:
        text = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return " | ".join(text[-lines:]) or "empty log"


@dataclass(frozen=True)
class Stopped:
    """What :func:`stop` did: ``outcome`` is ``none`` (no owner), ``left`` (an owner that
    is not ours to stop), ``stopped``, or ``busy`` (still finishing a request after the wait);
    ``owner`` is what the owner said of itself."""

    outcome: str
    owner: dict[str, Any] | None = None


def stop(
    db_path: Path, served_by: tuple[str, ...] = ("background", "serve"), wait: float = STOP_SECONDS
) -> Stopped:
    """Stop the owner of ``db_path`` if the command line started it (``served_by``).

    A kernel or the Jupyter server is never stopped: they hold the memory for their user. The
    owner finishes the request in flight, closes the file and exits (SIGTERM).
    """
    owner = ping(db_path)
    if owner is None:
        return Stopped("none")
    if owner.get("served_by") not in served_by:
        return Stopped("left", owner)
    pid = int(owner["pid"])
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait
    while alive(pid):
        if time.monotonic() > deadline:
            return Stopped("busy", owner)
        time.sleep(0.05)
    return Stopped("stopped", owner)
