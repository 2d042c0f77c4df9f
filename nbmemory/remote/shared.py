"""One memory, many processes: :func:`connect` returns an owner or a client, transparently.

The first process to open a memory file owns it (DuckDB allows one read-write process) and
serves the others over a local socket; every other process is its client. When the owner goes
away (a kernel restarts, the server stops, a process is killed), the next call of any client
finds no owner, takes the file over and becomes the owner itself. Writes carry a request key,
so a write retried after its owner died is stored once.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from nbmemory.config import Settings
from nbmemory.errors import NbMemoryError, StoreLockedError
from nbmemory.remote import wire
from nbmemory.remote.owner import OwnerServer, try_connect

# Writes that are safe to retry once the request key is attached.
_KEYED = {"remember", "remember_many"}
FAILOVER_SECONDS = 60.0


class SharedMemory:
    """The :class:`~nbmemory.Memory` API, whether this process owns the file or not.

    Use :func:`connect` to make one. ``role`` is ``"owner"`` or ``"client"`` and can change
    during the object's life (a client becomes the owner when the owner dies).
    """

    def __init__(self, settings: Settings, memory_kwargs: dict[str, Any], allow_owner: bool = True) -> None:
        self.settings = settings
        self._kwargs = memory_kwargs
        self._allow_owner = allow_owner
        self._lock = threading.RLock()
        self._local: Any = None
        self._server: OwnerServer | None = None
        self._conn: Connection | None = None
        self._closed = False
        self.failovers = 0
        self._attach(deadline=time.monotonic() + FAILOVER_SECONDS)
        atexit.register(self.close)

    # -- who am I ---------------------------------------------------------------------------
    @property
    def role(self) -> str:
        return "owner" if self._local is not None else "client"

    @property
    def path(self) -> Path:
        return self.settings.db_path

    @property
    def memory(self) -> Any:
        """The local :class:`Memory` when this process is the owner, else None."""
        return self._local

    def _attach(self, deadline: float) -> None:
        from nbmemory.memory import Memory

        delay = 0.05
        while True:
            conn = try_connect(self.path)
            if conn is not None:
                self._conn = conn
                return
            if self._allow_owner:
                try:
                    local = Memory(settings=self.settings, **self._kwargs)
                except StoreLockedError:
                    local = None  # someone else won the race: their socket appears shortly
                if local is not None:
                    self._local = local
                    self._server = OwnerServer(local, self._lock)
                    return
            if time.monotonic() > deadline:
                raise NbMemoryError(
                    f"could not reach the owner of {self.path} nor open it: another process holds "
                    "the file without serving it (an nbmemory older than this one?)"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    # -- calls ------------------------------------------------------------------------------
    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._closed:
            raise NbMemoryError("this memory connection is closed")
        if method in _KEYED and kwargs.get("request_key") is None:
            kwargs["request_key"] = uuid.uuid4().hex
        deadline = time.monotonic() + FAILOVER_SECONDS
        request = wire.dumps({"method": method, "args": args, "kwargs": kwargs})
        # One request at a time per process, owner or client: the connection carries one
        # request and its reply at a time (threads sharing it would read each other's replies),
        # and a failover must run once, not once per waiting thread.
        with self._lock:
            while True:
                if self._closed:
                    raise NbMemoryError("this memory connection is closed")
                if self._local is not None:
                    return getattr(self._local, method)(*args, **kwargs)
                assert self._conn is not None
                try:
                    self._conn.send_bytes(request)
                    reply = wire.loads(self._conn.recv_bytes())
                except (EOFError, OSError):
                    # The owner is gone: find the new one, or become it, then send the request again.
                    self._drop_conn()
                    if self._closed:
                        raise NbMemoryError("this memory connection is closed") from None
                    self.failovers += 1
                    self._attach(deadline)
                    continue
                if "error" in reply:
                    wire.raise_error(reply["error"])
                return reply["ok"]

    def _drop_conn(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()
            self._conn = None

    def index(
        self,
        *paths: str | os.PathLike[str],
        namespace: str | None = None,
        progress: Callable[[int, int, str], None] | None = None,
    ) -> Any:
        """Index files and folders. ``progress`` is called only when this process is the owner
        (a callback cannot cross the socket); a client's call returns when the owner is done."""
        # The owner may run in another folder: send absolute paths.
        absolute = [str(Path(p).expanduser().absolute()) for p in paths]
        if self._local is not None and progress is not None:
            with self._lock:
                return self._local.index(*absolute, namespace=namespace, progress=progress)
        return self._call("index", *absolute, namespace=namespace)

    def remember(self, text: str, **kwargs: Any) -> Any:
        return self._call("remember", text, **kwargs)

    def remember_many(self, texts: Sequence[str], **kwargs: Any) -> Any:
        return self._call("remember_many", list(texts), **kwargs)

    def get(self, item_id: int, **kwargs: Any) -> Any:
        return self._call("get", item_id, **kwargs)

    def update(self, item_id: int, **kwargs: Any) -> Any:
        return self._call("update", item_id, **kwargs)

    def forget(self, item_id: Any = None, **kwargs: Any) -> Any:
        if item_id is not None and not isinstance(item_id, int):
            item_id = [int(i) for i in item_id]
        if kwargs.get("path") and not any(c in kwargs["path"] for c in "*?["):
            kwargs["path"] = str(Path(kwargs["path"]).expanduser().absolute())
        return self._call("forget", item_id, **kwargs)

    def link(self, src: int, dst: int, type: str = "related", note: str | None = None) -> None:
        self._call("link", src, dst, type, note=note)

    def links(self, item_id: int) -> Any:
        return self._call("links", item_id)

    def related(self, item_id: int, k: int = 5, namespace: str | None = None) -> Any:
        return self._call("related", item_id, k=k, namespace=namespace)

    def search(self, query: str, k: int = 10, **kwargs: Any) -> Any:
        return self._call("search", query, k, **kwargs)

    def stats(self) -> Any:
        stats = self._call("stats")
        stats["role"] = self.role
        return stats

    def doctor(self, repair: bool = False) -> Any:
        return self._call("doctor", repair=repair)

    def export(self, out: str | os.PathLike[str], include_forgotten: bool = False) -> Any:
        return self._call(
            "export", str(Path(out).expanduser().absolute()), include_forgotten=include_forgotten
        )

    def reembed(self) -> Any:
        return self._call("reembed")

    def models(self) -> Any:
        return self._call("models")

    def ping(self) -> Any:
        return self._call("ping") if self._local is None else {"pid": os.getpid()}

    # -- lifecycle --------------------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # The exit hook holds a reference: drop it, or every connect() of a long-lived process
        # would keep its object alive until exit.
        atexit.unregister(self.close)
        self._drop_conn()
        if self._server is not None:
            self._server.close()
        if self._local is not None:
            with self._lock:
                self._local.close()
            self._local = None

    def __enter__(self) -> SharedMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(
    path: str | os.PathLike[str] | None = None,
    *,
    home: str | os.PathLike[str] | None = None,
    model: str | None = None,
    namespace: str | None = None,
    progress: bool = False,
    allow_owner: bool = True,
    **memory_kwargs: Any,
) -> SharedMemory:
    """Open the memory shared by every process of this user.

    Parameters
    ----------
    path, home, model, namespace:
        As for :class:`~nbmemory.Memory`. ``model`` only matters if this process becomes the
        owner (the owner embeds for everyone, so the model is loaded once).
    allow_owner:
        False makes this process a client only (it waits for an owner to appear).
    """
    settings = (Settings(home=Path(home)) if home is not None else Settings()).override(
        path, model, namespace
    )
    return SharedMemory(settings, {"progress": progress, **memory_kwargs}, allow_owner=allow_owner)
