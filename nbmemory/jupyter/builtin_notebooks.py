"""The built-in notebooks (package data under ``nbmemory/notebooks/``) and copying them into a
person's folder: ``nbmemory notebooks [DIR]`` and the Lab launcher's ``POST /nbmemory/notebooks``.

A copy is stamped (``metadata.nbmemory``) with the built-in notebook it came from and a digest of
its cells as written. A copy whose cells still match that digest was neither edited nor run, so
:func:`copy_all` may replace it with a newer version; any other copy is the person's and is never
overwritten. :func:`fresh_copy` never replaces anything: it takes the next free name
(``name-1.ipynb``, ``name-2.ipynb``, ...).

Standard library only: the command line's client path must not load the memory's dependencies.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from nbmemory.errors import ConfigError, NotFoundError

#: Where the built-in notebooks are installed.
FOLDER = Path(str(files("nbmemory") / "notebooks"))


@dataclass(frozen=True)
class Builtin:
    """One built-in notebook: its short ``name`` (what requests name), launcher ``title`` and file."""

    name: str
    title: str
    file: str

    @property
    def path(self) -> Path:
        return FOLDER / self.file


NOTEBOOKS: tuple[Builtin, ...] = (
    Builtin("diagnostics", "Memory diagnostics", "memory_diagnostics.ipynb"),
    Builtin("beir", "BEIR evaluation", "beir_evaluation.ipynb"),
)


def builtin(name: str) -> Builtin:
    """The built-in notebook called ``name``; a :class:`ConfigError` naming the known ones otherwise."""
    for nb in NOTEBOOKS:
        if nb.name == name:
            return nb
    known = ", ".join(repr(nb.name) for nb in NOTEBOOKS)
    raise ConfigError(f"unknown notebook {name!r}: the built-in notebooks are {known}")


def cells_digest(notebook: dict[str, Any]) -> str:
    """A digest of what a person sees of a notebook: each cell's type, source and outputs."""
    cells = [
        [c.get("cell_type"), _text(c.get("source", "")), c.get("outputs", [])] for c in notebook.get("cells", [])
    ]
    return hashlib.sha256(json.dumps(cells, sort_keys=True).encode()).hexdigest()[:16]


def _text(source: Any) -> str:
    return "".join(source) if isinstance(source, list) else str(source)


def stamped(nb: Builtin) -> str:
    """The built-in notebook's JSON text, stamped with its name and the digest of its cells."""
    notebook = json.loads(nb.path.read_text(encoding="utf-8"))
    notebook.setdefault("metadata", {})["nbmemory"] = {"builtin": nb.name, "cells": cells_digest(notebook)}
    return json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"


def unchanged(path: Path) -> bool:
    """Whether the copy at ``path`` is a built-in notebook as copied: not edited, not run."""
    try:
        notebook = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    stamp = notebook.get("metadata", {}).get("nbmemory") if isinstance(notebook, dict) else None
    return isinstance(stamp, dict) and stamp.get("cells") == cells_digest(notebook)


def _folder(folder: str | os.PathLike[str]) -> Path:
    target = Path(folder).expanduser()
    if not target.is_dir():
        why = "not a folder" if target.exists() else "no such folder"
        raise NotFoundError(f"{folder}: {why}; no notebook was copied")
    return target


def fresh_copy(name: str, folder: str | os.PathLike[str]) -> Path:
    """Copy the built-in notebook ``name`` into ``folder`` under a name no file has yet.

    ``memory_diagnostics.ipynb`` when that is free, else ``memory_diagnostics-1.ipynb``, ``-2``, ...
    The file is created exclusively, so two copies made at once never share a name.
    """
    nb = builtin(name)
    target = _folder(folder)
    text = stamped(nb)
    stem, suffix = nb.file.rsplit(".", 1)
    for n in range(10_000):
        candidate = target / (nb.file if n == 0 else f"{stem}-{n}.{suffix}")
        try:
            with candidate.open("x", encoding="utf-8") as out:
                out.write(text)
        except FileExistsError:
            continue
        return candidate
    raise ConfigError(f"{target} already holds 10,000 copies of {nb.file}; no notebook was copied")


@dataclass(frozen=True)
class Copied:
    """What :func:`copy_all` did with one notebook: ``action`` is ``copied``, ``updated``,
    ``current`` (already this version) or ``kept`` (the person's copy, left as it is)."""

    notebook: Builtin
    path: Path
    action: str

    def describe(self) -> str:
        what = {
            "copied": "copied",
            "updated": "updated to this version (the copy was unchanged)",
            "current": "already this version",
            "kept": "kept as it is: changed since it was copied (delete it, or use --fresh, for this version)",
        }[self.action]
        return f"{self.notebook.title}: {self.path} {what}"


def copy_all(folder: str | os.PathLike[str], fresh: bool = False) -> list[Copied]:
    """Copy every built-in notebook into ``folder``, never overwriting a copy the person changed.

    A file of the same name is replaced only when it is an unchanged copy (:func:`unchanged`) of
    another version; an edited or executed copy, or any other file of that name, is kept. With
    ``fresh`` every notebook gets a new copy beside what is there (:func:`fresh_copy`).
    """
    target = _folder(folder)
    done = []
    for nb in NOTEBOOKS:
        if fresh:
            done.append(Copied(nb, fresh_copy(nb.name, target), "copied"))
            continue
        path = target / nb.file
        text = stamped(nb)
        if not path.exists():
            action = "copied"
        elif not unchanged(path):
            done.append(Copied(nb, path, "kept"))
            continue
        elif path.read_text(encoding="utf-8") == text:
            done.append(Copied(nb, path, "current"))
            continue
        else:
            action = "updated"
        # Written beside, then moved over: a copy is never left half written.
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(text, encoding="utf-8")
        partial.replace(path)
        done.append(Copied(nb, path, action))
    return done
