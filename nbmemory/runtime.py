"""Where the processes sharing a memory meet: a private runtime folder and, per memory file, the
owner's socket and key (:mod:`nbmemory.remote.owner`) and the status files that processes
working on the memory publish while they run (the live indexers, :mod:`nbmemory.live`; the
kernels that capture their cells, :mod:`nbmemory.jupyter.capture`), and what the live indexers
say in them (:func:`summary`, for ``stats()``). Standard library only (and :mod:`nbmemory.private`),
so any module can import it, the facade included."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

from nbmemory import private


def runtime_dir() -> Path:
    """A folder only this user can enter, for sockets and keys."""
    base = os.environ.get("NBMEMORY_RUNTIME_DIR") or os.environ.get("XDG_RUNTIME_DIR")
    folder = Path(base) / "nbmemory" if base else Path(tempfile.gettempdir()) / f"nbmemory-{os.getuid()}"
    private.make_dir(folder)
    os.chmod(folder, private.DIR_MODE)
    return folder


def endpoint(db_path: Path) -> tuple[str, Path]:
    """Socket address and key file of the owner of ``db_path`` (short: sockets allow ~100 bytes)."""
    digest = hashlib.sha256(str(Path(db_path).expanduser().absolute()).encode()).hexdigest()[:16]
    folder = runtime_dir()
    return str(folder / f"{digest}.sock"), folder / f"{digest}.key"


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a child of ours is reaped; a zombie counts as gone)."""
    try:
        # Our own child (started by this process) must be reaped, or it stays a zombie.
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # Exited, waiting for its parent (another finished run's child, not yet reaped by init).
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


# -- status files: what the processes working on a memory say they are doing ---------------------
def status_folder(db_path: str | os.PathLike[str], what: str) -> Path:
    """The private folder where the processes doing ``what`` (``live``, ``capture``) with the
    memory at ``db_path`` publish their status, one file each."""
    folder = endpoint(Path(db_path))[1].with_suffix(f".{what}")
    private.make_dir(folder)
    return folder


def publish(file: Path, data: dict[str, Any]) -> None:
    """Write ``data`` (with a ``pid`` while the process lives) to ``file`` at once: a reader
    never sees half of it. A status is a courtesy: a failure to write it is ignored."""
    tmp = file.with_suffix(f".{threading.get_ident()}.tmp")
    try:
        private.write_text(tmp, json.dumps(data))
        os.replace(tmp, file)
    except OSError:
        pass


def published(db_path: str | os.PathLike[str], what: str) -> list[dict[str, Any]]:
    """The statuses of the processes doing ``what`` with ``db_path`` that still run; the files
    of those that died are removed."""
    found = []
    for file in sorted(status_folder(db_path, what).glob("*.json")):
        try:
            data = json.loads(file.read_text())
            pid = int(data.get("pid", 0)) if isinstance(data, dict) else 0
        except (OSError, ValueError, TypeError):
            continue
        if not pid or not alive(pid):
            with contextlib.suppress(OSError):
                file.unlink()  # left by a process that died
            continue
        found.append(data)
    return found


# -- what every live indexer of a memory is doing ----------------------------------------------
def watchers(db_path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The status of every live indexer of ``db_path`` that runs (:meth:`nbmemory.live.ChangeQueue.status`)."""
    return published(db_path, "live")


def summary(db_path: str | os.PathLike[str]) -> dict[str, Any]:
    """The live indexers of ``db_path`` in a few fields, for ``stats()``: who watches, what is
    pending or being indexed, the last batch, and the latest failures (file and reason)."""
    running = watchers(db_path)
    batches = [w["last_batch"] for w in running if w.get("last_batch")]
    last = max(batches, key=lambda b: b["at"]) if batches else None
    failures = sorted((f for w in running for f in w.get("failures", [])), key=lambda f: f["at"])
    return {
        "watchers": [f"{w['source']} (pid {w['pid']}, {len(w['roots'])} roots)" for w in running],
        "pending": sum(w.get("pending", 0) for w in running),
        "indexing": sum(w.get("indexing", 0) for w in running),
        "last_batch": last["line"] if last else None,
        "failures": [f"{f['path']}: {f['reason']}" for f in failures[-5:]],
    }
