"""Load DuckDB's fts and vss extensions from their pinned PyPI packages, never from the network."""

from __future__ import annotations

import importlib
import importlib.resources
from pathlib import Path

import duckdb

from nbmemory.errors import StoreError

_PACKAGES = {"fts": "duckdb_extension_fts", "vss": "duckdb_extension_vss"}


def extension_path(name: str) -> Path:
    """Path of the ``name`` extension file matching the installed duckdb version."""
    package = _PACKAGES[name]
    try:
        module = importlib.import_module(package)
    except ImportError:
        raise StoreError(
            f"DuckDB extension package {package!r} is missing: "
            f"pip install {package.replace('_', '-')}=={duckdb.__version__}"
        ) from None
    folder = Path(str(importlib.resources.files(module))) / "extensions" / f"v{duckdb.__version__}"
    path = folder / f"{name}.duckdb_extension"
    if not path.exists():
        found = sorted(p.name for p in (folder.parent.iterdir() if folder.parent.exists() else []))
        raise StoreError(
            f"{package} has no build for duckdb {duckdb.__version__} (it has {found}); "
            f"install matching versions: pip install duckdb=={duckdb.__version__} "
            f"{package.replace('_', '-')}=={duckdb.__version__}"
        )
    return path


def load_extensions(con: duckdb.DuckDBPyConnection) -> None:
    """LOAD fts and vss by file path (writes nothing to HOME, needs no network)."""
    for name in _PACKAGES:
        con.execute(f"LOAD '{extension_path(name)}'")
    # HNSW on a file is "experimental" upstream: we treat it as derived data we can rebuild.
    con.execute("SET hnsw_enable_experimental_persistence = true")
