"""Owner-only files: the folders nbmemory makes are 0700, the files it writes 0600.

A memory holds the user's notes, their vectors and the keys that guard it, so nothing of it is
readable by other users of the machine, whatever the umask. Files are created with their mode
(``os.open(..., 0o600)``, :func:`opener`), folders made 0700 (:func:`make_dir`), and a path that
exists with a wider mode is narrowed on open (:func:`narrow`), with one warning line naming each
path and its old and new mode. A path that belongs to another user is left as is and reported
(:func:`state`). Standard library only, so every layer can use it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600
#: The permission bits that let anyone but the owner in.
OTHERS = 0o077

log = logging.getLogger("nbmemory")


@dataclass(frozen=True)
class Narrowed:
    """A path whose mode was narrowed to owner-only."""

    path: Path
    old: int
    new: int

    def __str__(self) -> str:
        return f"{self.path} {self.old:04o}->{self.new:04o}"


def mode(path: str | os.PathLike[str]) -> int | None:
    """The permission bits of ``path`` (not following a last symlink); None if it is missing."""
    try:
        return stat.S_IMODE(os.lstat(path).st_mode)
    except OSError:
        return None


def is_private(path: str | os.PathLike[str]) -> bool:
    """Whether no one but the owner may read, write or enter ``path`` (a missing path is)."""
    bits = mode(path)
    return bits is None or not bits & OTHERS


def opener(path: str | os.PathLike[str], flags: int) -> int:
    """For ``open(path, "w", opener=opener)``: a new file is created 0600 whatever the umask,
    and one that exists is narrowed to 0600 before anything is written to it."""
    fd = os.open(path, flags, FILE_MODE)
    with contextlib.suppress(OSError):
        if stat.S_IMODE(os.fstat(fd).st_mode) & OTHERS:
            os.fchmod(fd, FILE_MODE)
    return fd


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path``, a 0600 file."""
    with open(path, "wb", opener=opener) as fh:
        fh.write(data)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path``, a 0600 file."""
    write_bytes(path, text.encode("utf-8"))


def make_dir(path: str | os.PathLike[str]) -> Path:
    """``path`` as a folder; every folder this call creates (parents included) is 0700.

    A folder that exists already is left as it is: see :func:`narrow` for nbmemory's own.
    """
    folder = Path(path)
    missing = []
    probe = folder
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for made in reversed(missing):
        with contextlib.suppress(FileExistsError):
            made.mkdir(mode=DIR_MODE)
            # mkdir's mode is masked by the umask: set it exactly.
            os.chmod(made, DIR_MODE)
    return folder


def narrow(path: str | os.PathLike[str], want: int | None = None) -> Narrowed | None:
    """Make ``path`` owner-only (``want``: 0700 for a folder, 0600 for anything else).

    Nothing happens to a missing path, to one that is owner-only already, or to one that belongs
    to another user (it cannot be changed, and :func:`state` reports it). Returns what changed.
    """
    try:
        info = os.lstat(path)
    except OSError:
        return None
    old = stat.S_IMODE(info.st_mode)
    if stat.S_ISLNK(info.st_mode) or not old & OTHERS or info.st_uid != os.geteuid():
        return None
    new = want if want is not None else (DIR_MODE if stat.S_ISDIR(info.st_mode) else FILE_MODE)
    try:
        os.chmod(path, new)
    except OSError:
        return None
    return Narrowed(Path(path), old, new)


def narrow_all(paths: Iterable[str | os.PathLike[str]], what: str) -> list[Narrowed]:
    """:func:`narrow` each path; when any changed, one warning line names them all."""
    changed = [n for n in (narrow(p) for p in paths) if n is not None]
    if changed:
        log.warning(
            "nbmemory: %s was readable by other users; made it owner-only: %s",
            what,
            ", ".join(str(n) for n in changed),
        )
    return changed


def state(path: str | os.PathLike[str]) -> str:
    """``"ok"`` (owner-only or missing), or ``"not owner-only (0644)"``, for reports."""
    bits = mode(path)
    return "ok" if bits is None or not bits & OTHERS else f"not owner-only ({bits:04o})"
