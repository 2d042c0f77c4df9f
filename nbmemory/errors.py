"""Errors raised by nbmemory. Every message names the bad value and says what to do."""

from __future__ import annotations


class NbMemoryError(Exception):
    """Base class for every error nbmemory raises on purpose."""


class ConfigError(NbMemoryError):
    """A setting or argument has a value nbmemory cannot use."""


class RequestError(ConfigError):
    """A front end's request (a search's query, ``k``, a filter) has a value nbmemory cannot use."""


class BadFileError(NbMemoryError):
    """A source file cannot be ingested (binary, malformed, too large, not UTF-8...).

    The file is skipped; nothing already stored is touched.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class StoreError(NbMemoryError):
    """The memory file cannot be opened or is inconsistent."""


class StoreLockedError(StoreError):
    """Another process holds the memory file."""


class ModelMismatchError(StoreError):
    """The store's vectors were made by a different embedding model than the one requested."""


class ModelNotFoundError(NbMemoryError):
    """An embedding model name or path cannot be loaded offline."""


class NotFoundError(NbMemoryError):
    """An item id, path or link does not exist."""


class TeamAccessError(StoreError):
    """The team's catalog or data folder refuses what was asked: the role or the OS user lacks a
    right (read, write, create). The message names the catalog, the namespace and the right."""
