"""What the server's handlers share: the lazily opened memory, thread pools, index and tuning jobs."""

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


def memory_factory() -> MemoryFactory:
    """How the memory is opened: the one set by :func:`set_memory_factory`, else ``connect()``."""
    return _factory or _default_factory


class ServerState:
    """What the handlers share: the lazily opened memory, thread pools, index and tuning jobs.

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
        # Tuning runs (TuneJob, each in its own thread), by id: one runs at a time.
        self.tune_jobs: dict[str, Any] = {}
        #: The live indexer fed by the contents events (nbmemory.server.live), None when off.
        self.live: Any = None
        self.live_listener: Any = None

    def memory(self) -> Any:
        """The shared memory, opened on the first call (blocking: call it from a worker thread)."""
        if self._memory is None:
            with self._open_lock:
                if self._memory is None:
                    self._memory = self._factory()
        return self._memory

    def close(self) -> None:
        """Stop the live indexer and the pools, and close the memory (hands ownership of the file
        to the next process)."""
        if self.live is not None:
            self.live.close()
            self.live = None
        self.job_executor.shutdown(wait=False, cancel_futures=True)
        self.executor.shutdown(wait=False, cancel_futures=True)
        with self._open_lock:
            if self._memory is not None:
                self._memory.close()
                self._memory = None
