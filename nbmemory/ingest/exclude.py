"""Which files under an indexed folder are never indexed: junk folders, virtualenvs, hidden
names, editor temp files and what the folder's ``.gitignore`` files ignore.

One set of rules for :func:`nbmemory.ingest.indexer.walk` (an ``index`` run) and for the live
indexer's change events (:mod:`nbmemory.live`), so a file skipped by one is skipped by the other.
An ignore file (:data:`IGNORE_FILES`) is never indexed, but a change to one is heard: what it
ignores may have changed.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import pathspec

# Generated HTML is skipped too: coverage reports (htmlcov) and Sphinx/Jupyter Book builds (_build).
SKIP_DIRS = frozenset(
    {"node_modules", "__pycache__", "site-packages", ".ipynb_checkpoints", "htmlcov", "_build", "venv"}
)
# Editors write these beside the file they save (vim swap files, emacs backups and locks).
TEMP_FILES = ("*.swp", "*.swo", "*.swx", "*~", ".#*", "*.tmp", "#*#")
#: The files whose patterns say what is not indexed below their folder (git's syntax).
IGNORE_FILES = frozenset({".gitignore"})


def skip_dir(parent: str | os.PathLike[str], name: str) -> bool:
    """Whether the folder ``parent/name`` is never entered: hidden, junk, or a virtualenv."""
    return (
        name.startswith(".") or name in SKIP_DIRS or os.path.exists(os.path.join(parent, name, "pyvenv.cfg"))
    )


def skip_file(name: str) -> bool:
    """Whether a file called ``name`` is never read: hidden, or an editor's temp file."""
    return name.startswith(".") or any(fnmatch.fnmatchcase(name, p) for p in TEMP_FILES)


def is_ignore_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an ignore file (:data:`IGNORE_FILES`): a change to it changes what its
    folder's index holds."""
    return os.path.basename(path) in IGNORE_FILES


def gitignore(folder: str | os.PathLike[str]) -> pathspec.PathSpec | None:
    """The patterns of ``folder/.gitignore`` (git's own syntax), or None without one."""
    try:
        text = Path(folder, ".gitignore").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    spec = pathspec.GitIgnoreSpec.from_lines(text.splitlines())
    return spec if len(spec) else None


class Ignored:
    """The ``.gitignore`` files met from a root down to a folder, each matching below its own
    folder, as git reads them (a nested file's patterns are relative to where it lies).

    Each file is read once, when first needed: make a new one to see files written since.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = str(root)
        self._specs: dict[str, pathspec.PathSpec | None] = {}

    def _spec(self, folder: str) -> pathspec.PathSpec | None:
        if folder not in self._specs:
            self._specs[folder] = gitignore(folder)
        return self._specs[folder]

    def matches(self, path: str, is_dir: bool = False) -> bool:
        """Whether a ``.gitignore`` between the root and ``path`` ignores it."""
        rel = os.path.relpath(path, self.root)
        if rel.startswith(".."):
            return False
        parts = rel.split(os.sep)
        folder = self.root
        for depth in range(len(parts)):
            spec = self._spec(folder)
            if spec is not None:
                below = "/".join(parts[depth:]) + ("/" if is_dir else "")
                if spec.match_file(below):
                    return True
            folder = os.path.join(folder, parts[depth])
        return False


def excluded(path: str, root: str, ignored: Ignored | None = None) -> str | None:
    """Why ``path`` (a file or folder under ``root``) is not indexed, or None if it may be.

    Checks every folder between ``root`` and ``path``, so an event deep inside ``.git`` or a
    virtualenv is dropped as the walk would never have entered it.
    """
    rel = os.path.relpath(path, root)
    if rel == ".":
        return None
    if rel.startswith(".."):
        return "outside the indexed folder"
    parts = rel.split(os.sep)
    folder = root
    for name in parts[:-1]:
        if skip_dir(folder, name):
            return f"in an excluded folder ({name})"
        folder = os.path.join(folder, name)
    name = parts[-1]
    is_dir = os.path.isdir(path)
    if skip_dir(folder, name) if is_dir else skip_file(name):
        return "an excluded name"
    if ignored is not None and ignored.matches(path, is_dir):
        return "ignored by .gitignore"
    return None
