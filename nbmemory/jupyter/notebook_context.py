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

Links (:class:`Links`): JupyterLab opens a file in the app when a link in a notebook output is
relative to the notebook's folder; a widget's HTML is not rewritten, so there the link is the
absolute ``<base_url>lab/tree/<path>``. Both need the server root, which comes from the
``jpserver-<pid>.json`` file the server writes in the Jupyter runtime folder: the file of the
kernel's parent process (the server that started it), else the server whose root holds the
notebook's folder.
"""

from __future__ import annotations

import json
import os
import posixpath
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

import nbformat

__all__ = [
    "Links",
    "current_notebook",
    "history_cells",
    "history_notebook",
    "links_for",
    "server_info",
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


def server_info(path: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """The ``jpserver-<pid>.json`` record of the Jupyter server this kernel runs under, or None.

    Parameters
    ----------
    path:
        When the kernel's parent process is not a known server, pick the server whose root
        holds ``path`` (the deepest root when several do).
    """
    servers = _servers()
    parent = os.getppid()
    for info in servers:
        if info.get("pid") == parent:
            return info
    if path is not None:
        target = Path(path).expanduser().resolve()
        holding = [s for s in servers if target.is_relative_to(Path(s["root_dir"]).expanduser().resolve())]
        if holding:
            return max(holding, key=lambda s: len(Path(s["root_dir"]).parts))
    return None


def _inside(path: Path, root: Path) -> PurePosixPath | None:
    try:
        return PurePosixPath(path.resolve().relative_to(root).as_posix())
    except ValueError:
        return None


@dataclass(frozen=True)
class Links:
    """How a source file becomes a link JupyterLab opens.

    Parameters
    ----------
    root:
        The Jupyter server's root folder; None when unknown (then there are no links).
    notebook_dir:
        Folder of the notebook whose outputs hold the links.
    base_url:
        The server's base URL (``/`` by default).
    """

    root: Path | None = None
    notebook_dir: Path | None = None
    base_url: str = "/"

    def output_href(self, source: str | None) -> str | None:
        """Link for HTML in a notebook output, relative to the notebook's folder.

        JupyterLab opens relative links in outputs as documents inside the app; a link starting
        with ``/`` it leaves to the browser.
        """
        if not source or self.root is None or self.notebook_dir is None:
            return None
        target = _inside(Path(source).expanduser(), self.root)
        here = _inside(self.notebook_dir, self.root)
        if target is None or here is None:
            return None
        return quote(posixpath.relpath(str(target), str(here) or "."))

    def server_path(self, source: str | None) -> str | None:
        """``source`` relative to the server root (what JupyterLab's document manager opens), or None."""
        if not source or self.root is None:
            return None
        target = _inside(Path(source).expanduser(), self.root)
        return None if target is None else str(target)

    def lab_href(self, source: str | None) -> str | None:
        """Absolute URL path that opens ``source`` in JupyterLab (``<base>lab/tree/<path>``).

        For widgets: their HTML is not rewritten by JupyterLab, so a relative link would resolve
        against the page URL.
        """
        if not source or self.root is None:
            return None
        target = _inside(Path(source).expanduser(), self.root)
        if target is None:
            return None
        base = self.base_url if self.base_url.endswith("/") else self.base_url + "/"
        return f"{base}lab/tree/{quote(str(target))}"


def links_for(shell: Any = None, root: str | os.PathLike[str] | None = None) -> Links:
    """The :class:`Links` of this kernel: server root and base URL from the runtime folder.

    Parameters
    ----------
    shell:
        The IPython shell, to find the current notebook's folder (else the working folder).
    root:
        Server root to use instead of looking it up (``MemoryMagics.server_root``).
    """
    notebook = current_notebook(shell) if shell is not None else None
    here = notebook.parent if notebook is not None else Path.cwd()
    info = server_info(here) if root is None else None
    base_url = str(info.get("base_url") or "/") if info else "/"
    found = Path(root).expanduser().resolve() if root is not None else None
    if found is None and info is not None:
        found = Path(info["root_dir"]).expanduser().resolve()
    return Links(found, here, base_url)


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
            info = server_info()
            if info is not None:
                tries.append(Path(info["root_dir"]).expanduser() / candidate)
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
