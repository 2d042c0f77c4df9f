"""Jupyter server extension: the authenticated REST API under ``/nbmemory/`` used by the sidebar.

The memory is opened lazily, on the first request, with :func:`nbmemory.remote.connect`: the
server becomes the owner of the file when no kernel or CLI holds it, else a client of the
current owner. A server start therefore never waits for the database or the model.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

MemoryFactory = Callable[[], Any]

_factory: MemoryFactory | None = None


def set_memory_factory(factory: MemoryFactory | None) -> None:
    """Replace how the server opens its memory (tests pass a fake embedder this way).

    Parameters
    ----------
    factory:
        A callable returning an object with the :class:`~nbmemory.Memory` API (a
        :class:`~nbmemory.remote.SharedMemory` or a ``Memory``), or None to restore the
        default, :func:`nbmemory.remote.connect` with the ``NBMEMORY_*`` settings.
    """
    global _factory
    _factory = factory


def _default_factory() -> Any:
    from nbmemory.remote import connect

    return connect()


class ServerState:
    """What the handlers share: the lazily opened memory, thread pools and index jobs.

    Parameters
    ----------
    root_dir:
        The Jupyter server's root; every path a request names must resolve inside it.
    factory:
        Opens the memory on first use.
    """

    def __init__(self, root_dir: str | Path, factory: MemoryFactory) -> None:
        self.root_dir = Path(root_dir).expanduser().resolve()
        self._factory = factory
        self._memory: Any = None
        self._open_lock = threading.Lock()
        # Blocking nbmemory calls run here so the server's event loop stays responsive.
        self.executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="nbmemory")
        # Index jobs get their own worker: a long run must not occupy the request threads.
        self.job_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nbmemory-index")
        self.jobs: dict[str, Any] = {}

    def memory(self) -> Any:
        """The shared memory, opened on the first call (blocking: call it from a worker thread)."""
        if self._memory is None:
            with self._open_lock:
                if self._memory is None:
                    self._memory = self._factory()
        return self._memory

    def close(self) -> None:
        """Stop the pools and close the memory (hands ownership of the file to the next process)."""
        self.job_executor.shutdown(wait=False, cancel_futures=True)
        self.executor.shutdown(wait=False, cancel_futures=True)
        with self._open_lock:
            if self._memory is not None:
                self._memory.close()
                self._memory = None


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "nbmemory.server"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    """Register the ``/nbmemory/`` handlers; the memory itself opens on the first request."""
    from nbmemory.server.handlers import setup_handlers

    state = ServerState(serverapp.root_dir, _factory or _default_factory)
    serverapp.web_app.settings["nbmemory"] = state
    setup_handlers(serverapp.web_app)
    serverapp.log.info("nbmemory: REST API at %snbmemory/ (memory opens on first use)", serverapp.base_url)
    # A module extension gets no stop hook; SharedMemory also closes itself at exit.


__all__ = ["ServerState", "set_memory_factory"]
