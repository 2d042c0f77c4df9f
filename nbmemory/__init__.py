"""nbmemory: a local-first personal memory for people and agents who work in Jupyter."""

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
from nbmemory.memory import Memory
from nbmemory.search.filters import Filters
from nbmemory.search.pipeline import PipelineConfig, SearchResult

__version__ = "0.1.0"

__all__ = [
    "BadFileError",
    "ConfigError",
    "Filters",
    "Hit",
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
    "__version__",
]
