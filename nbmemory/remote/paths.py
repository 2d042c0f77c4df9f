"""Where the processes sharing a memory meet: a private runtime folder and, per memory file, the
owner's socket and key (:mod:`nbmemory.remote.owner`) and the live indexers' status files
(:mod:`nbmemory.live`). Standard library only (and :mod:`nbmemory.private`), so any module can
import it."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

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
