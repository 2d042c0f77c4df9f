"""nbmemory: a local-first personal memory for people and agents who work in Jupyter."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from nbmemory.config import Settings
from nbmemory.errors import (
    BadFileError,
    ConfigError,
    ModelMismatchError,
    ModelNotFoundError,
    NbMemoryError,
    NotFoundError,
    StoreError,
    StoreLockedError,
)
from nbmemory.items import Hit, Item

if TYPE_CHECKING:
    from nbmemory.ingest.indexer import IndexReport
    from nbmemory.memory import Memory
    from nbmemory.search.config import PipelineConfig
    from nbmemory.search.filters import Filters
    from nbmemory.search.result import SearchResult
    from nbmemory.search.trace import Trace

__version__ = "0.1.0"

# Imported on first use: a CLI run that is a client of a warm owner never needs DuckDB or numpy,
# and importing them would cost it most of its time.
_LAZY = {
    "Memory": "nbmemory.memory",
    "Filters": "nbmemory.search.filters",
    "PipelineConfig": "nbmemory.search.config",
    "SearchResult": "nbmemory.search.result",
    "Trace": "nbmemory.search.trace",
    "IndexReport": "nbmemory.ingest.indexer",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nbmemory' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def load_ipython_extension(ipython: object) -> None:
    """``%load_ext nbmemory``: register the ``%mem*`` magics (imported only now, to keep this light)."""
    from nbmemory.jupyter.magics import load_ipython_extension as load

    load(ipython)


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """The Jupyter server extension: the ``/nbmemory/`` REST API (``nbmemory.server``)."""
    return [{"module": "nbmemory.server"}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """The prebuilt JupyterLab extension (the Memory sidebar) shipped in ``nbmemory/labextension``."""
    return [{"src": "labextension", "dest": "nbmemory"}]


def unload_ipython_extension(ipython: object) -> None:
    """``%unload_ext nbmemory``: close the Memory the magics opened."""
    from nbmemory.jupyter.magics import unload_ipython_extension as unload

    unload(ipython)


__all__ = [
    "BadFileError",
    "ConfigError",
    "Filters",
    "Hit",
    "IndexReport",
    "Item",
    "Memory",
    "ModelMismatchError",
    "ModelNotFoundError",
    "NbMemoryError",
    "NotFoundError",
    "PipelineConfig",
    "SearchResult",
    "Settings",
    "StoreError",
    "StoreLockedError",
    "Trace",
    "__version__",
]
