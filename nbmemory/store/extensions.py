"""Load DuckDB's fts and vss extensions from their pinned PyPI packages, never from the network.

DuckDB checks an extension file's signature on every ``LOAD``: it hashes the whole file (11 MB for
fts, 33 MB for vss), most of the time a connection takes. The check guards against a file changed
after it was signed. A process checks each file once and, while
the file's size, time and inode stay the same, loads it again without the check; a changed file is
checked again, and DuckDB refuses it when its signature does not match.
"""

from __future__ import annotations

import functools
import importlib
import importlib.resources
import os
import threading
from pathlib import Path

import duckdb

from nbmemory.errors import StoreError

_PACKAGES = {"fts": "duckdb_extension_fts", "vss": "duckdb_extension_vss"}


@functools.cache  # one lookup per process: every store open asks (a missing package raises, uncached)
def extension_path(name: str) -> Path:
    """Path of the ``name`` extension file (fts, vss) matching the installed duckdb version."""
    return packaged_extension(_PACKAGES[name], name)


def packaged_extension(package: str, filename: str, extra: str | None = None) -> Path:
    """Path of ``<filename>.duckdb_extension`` in the PyPI package ``package`` for the installed
    duckdb version; ``extra``: the nbmemory extra that brings the package, named when it is missing."""
    pip_name = package.replace("_", "-")
    try:
        module = importlib.import_module(package)
    except ImportError:
        install = (
            f"pip install 'nbmemory[{extra}]' (or {pip_name}=={duckdb.__version__})"
            if extra
            else (f"pip install {pip_name}=={duckdb.__version__}")
        )
        raise StoreError(f"DuckDB extension package {package!r} is missing: {install}") from None
    folder = Path(str(importlib.resources.files(module))) / "extensions" / f"v{duckdb.__version__}"
    path = folder / f"{filename}.duckdb_extension"
    if not path.exists():
        found = sorted(p.name for p in (folder.parent.iterdir() if folder.parent.exists() else []))
        raise StoreError(
            f"{package} has no build for duckdb {duckdb.__version__} (it has {found}); "
            f"install matching versions: pip install duckdb=={duckdb.__version__} "
            f"{pip_name}=={duckdb.__version__}"
        )
    return path


# Extension files whose signature DuckDB has checked in this process, with what identified them then.
_checked: dict[Path, tuple[int, int, int, int]] = {}
_checked_lock = threading.Lock()


def _identity(path: Path) -> tuple[int, int, int, int]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def connect_with_extensions(paths: list[Path] | None = None) -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB connection with fts and vss LOADed by file path (writes nothing to
    HOME, needs no network). ``paths`` replaces the packaged files (tests).

    Each file's signature is checked by DuckDB the first time this process loads it, and again
    whenever the file changed since (see the module docstring).
    """
    files = paths if paths is not None else [extension_path(name) for name in _PACKAGES]
    identities = [_identity(path) for path in files]
    with _checked_lock:
        checked = all(_checked.get(path) == ident for path, ident in zip(files, identities, strict=True))
    con = duckdb.connect(":memory:", config={"allow_unsigned_extensions": checked})
    try:
        for path in files:
            con.execute(f"LOAD '{path}'")
        # HNSW on a file is "experimental" upstream: we treat it as derived data we can rebuild.
        con.execute("SET hnsw_enable_experimental_persistence = true")
    except BaseException:
        con.close()
        raise
    if not checked:
        with _checked_lock:
            _checked.update(zip(files, identities, strict=True))
    return con
