"""Where the running kernel's notebook is, and how a hit's source becomes a link in JupyterLab.

Finding the current notebook (all local, no HTTP request to the Jupyter server):

1. ``__vsc_ipynb_file__`` in the user namespace (set by VS Code);
2. ``__session__`` in the user namespace, which ipykernel copies from the ``JPY_SESSION_NAME``
   environment variable the Jupyter server gives each kernel (the notebook's path: absolute, or
   relative to the server root);
3. ``JPY_SESSION_NAME`` itself.

A relative path is tried against the server root (see below) and then against the kernel's working
folder. When none of these names an existing ``.ipynb`` file (terminal IPython, a plain Python
kernel, a notebook never saved), :func:`history_notebook` writes the cells this kernel has run
(``In[1]``, ``In[2]``, ...) into a notebook file whose cell ``i`` is ``In[i]``, so hits name the
execution count; outputs are not included.

Links: JupyterLab opens a file when a link in an output has a path relative to the server root
(``/notes/ops.md``). The server root comes from the ``jpserver-<pid>.json`` file the server writes
in the Jupyter runtime folder: the file of the kernel's parent process (the server that started it),
else the server whose root holds the path.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import nbformat

__all__ = [
    "current_notebook",
    "history_cells",
    "history_notebook",
    "server_href",
    "server_root",
]

# Cells that only drive the memory itself are noise in it.
_SKIP_PREFIXES = ("%mem", "%%remember", "%remember", "%load_ext nbmemory", "%config MemoryMagics")


def _runtime_dir() -> Path:
    from jupyter_core.paths import jupyter_runtime_dir

    return Path(jupyter_runtime_dir())


def _servers() -> list[dict[str, Any]]:
    found = []
    for file in sorted(_runtime_dir().glob("jpserver-*.json")):
        try:
            info = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(info, dict) and info.get("root_dir"):
            found.append(info)
    return found


def server_root(path: str | os.PathLike[str] | None = None) -> Path | None:
    """Root folder of the Jupyter server this kernel runs under, or None outside one.

    Parameters
    ----------
    path:
        When the parent process is not a known server, pick the server whose root holds ``path``.
    """
    servers = _servers()
    parent = os.getppid()
    for info in servers:
        if info.get("pid") == parent:
            return Path(info["root_dir"]).expanduser().resolve()
    if path is not None:
        target = Path(path).expanduser().resolve()
        roots = [Path(s["root_dir"]).expanduser().resolve() for s in servers]
        holding = [r for r in roots if target.is_relative_to(r)]
        if holding:
            return max(holding, key=lambda r: len(r.parts))
    return None


def server_href(path: str | None, root: str | os.PathLike[str] | None = None) -> str | None:
    """``/<path relative to the server root>`` for a link JupyterLab opens, or None.

    Parameters
    ----------
    path:
        A hit's source file.
    root:
        The server root; found with :func:`server_root` when not given.
    """
    if not path:
        return None
    target = Path(path).expanduser()
    if not target.is_absolute():
        return None
    base = Path(root).expanduser().resolve() if root is not None else server_root(target)
    if base is None:
        return None
    try:
        rel = target.resolve().relative_to(base)
    except ValueError:
        return None
    return "/" + quote(rel.as_posix())


def current_notebook(shell: Any = None) -> Path | None:
    """The saved ``.ipynb`` file of the notebook this kernel belongs to, or None.

    Parameters
    ----------
    shell:
        The IPython shell (its user namespace holds ``__session__`` / ``__vsc_ipynb_file__``).
    """
    names: list[str] = []
    user_ns = getattr(shell, "user_ns", None) or {}
    for key in ("__vsc_ipynb_file__", "__session__"):
        value = user_ns.get(key)
        if isinstance(value, str) and value:
            names.append(value)
    env = os.environ.get("JPY_SESSION_NAME")
    if env:
        names.append(env)
    for name in names:
        candidate = Path(name).expanduser()
        tries = [candidate] if candidate.is_absolute() else []
        if not candidate.is_absolute():
            root = server_root()
            if root is not None:
                tries.append(root / candidate)
            tries += [Path.cwd() / candidate, Path.cwd() / candidate.name]
        for path in tries:
            if path.suffix == ".ipynb" and path.is_file():
                return path.resolve()
    return None


def history_cells(shell: Any) -> list[str]:
    """Source of each cell this kernel ran, at its execution count (``[0]`` is empty).

    Cells that only call the memory magics are blanked: they would be noise in the memory.
    """
    raw = list(getattr(getattr(shell, "history_manager", None), "input_hist_raw", None) or [])
    if not raw:
        raw = list((getattr(shell, "user_ns", None) or {}).get("In", []))
    cells = []
    for source in raw:
        lines = [line.lstrip() for line in str(source).splitlines() if line.strip()]
        magic_only = bool(lines) and all(line.startswith(_SKIP_PREFIXES) for line in lines)
        # A %%remember cell is stored already, as the memory it created.
        remembered = bool(lines) and lines[0].startswith("%%remember")
        cells.append("" if magic_only or remembered else str(source))
    return cells


def history_notebook(shell: Any, folder: str | os.PathLike[str], name: str | None = None) -> Path:
    """Write the kernel's executed cells to ``folder/<name>.ipynb`` and return its path.

    Cell ``i`` of the file holds ``In[i]``, so a hit's cell index is the execution count. The file
    is rewritten only when the cells changed, so indexing it again is incremental.

    Parameters
    ----------
    shell:
        The IPython shell whose history is written.
    folder:
        Where the file goes (the magics use ``<memory home>/sessions``).
    name:
        File name without suffix; default ``kernel-<session id or pid>``.
    """
    session = getattr(getattr(shell, "history_manager", None), "session_number", None)
    name = name or f"kernel-{session or os.getpid()}"
    target = Path(folder).expanduser() / f"{name}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    nb = nbformat.v4.new_notebook()
    nb.metadata["nbmemory"] = {"from": "kernel history", "pid": os.getpid()}
    for number, source in enumerate(history_cells(shell)):
        cell = nbformat.v4.new_code_cell(source, id=f"in-{number}")
        cell.execution_count = number or None
        nb.cells.append(cell)
    text = nbformat.writes(nb)
    if not target.exists() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")
    return target
