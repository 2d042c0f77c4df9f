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
import inspect
import os
import threading
import time
import uuid
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from nbmemory import api
from nbmemory.api import API_METHODS, MemoryAPI
from nbmemory.config import Settings
from nbmemory.errors import NbMemoryError, StoreLockedError
from nbmemory.remote import wire
from nbmemory.remote.owner import OwnerServer, try_connect

# Writes that are safe to retry once the request key is attached.
_KEYED = {"remember", "remember_many"}
FAILOVER_SECONDS = 60.0


class SharedMemory(MemoryAPI):
    """The :class:`~nbmemory.api.MemoryAPI`, whether this process owns the file or not.

    Use :func:`connect` to make one. ``role`` is ``"owner"`` or ``"client"`` and can change
    during the object's life (a client becomes the owner when the owner dies). Each operation is
    a proxy derived from its declaration (see :func:`_proxy`).
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
        request: bytes | None = None
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
                if request is None:  # only what crosses the socket is encoded (callbacks cannot)
                    request = wire.dumps({"method": method, "args": args, "kwargs": kwargs})
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


def _absolute(path: str | os.PathLike[str]) -> str:
    return str(Path(path).expanduser().absolute())


def _prepare_forget(args: dict[str, Any]) -> None:
    item_id = args.get("item_id")
    if item_id is not None and not isinstance(item_id, int):
        args["item_id"] = [int(i) for i in item_id]
    path = args.get("path")
    if path and not any(c in path for c in "*?["):
        args["path"] = _absolute(path)


# What a call needs before it leaves this process: the owner may run in another folder, so paths
# are made absolute; an iterable of ids becomes a list that JSON can carry.
_PREPARE: dict[str, Callable[[dict[str, Any]], None]] = {
    "index": lambda args: args.update(paths=tuple(_absolute(p) for p in args["paths"])),
    "forget": _prepare_forget,
    "export": lambda args: args.update(out=_absolute(args["out"])),
}


def _proxy(name: str) -> Callable[..., Any]:
    """A method with the declared signature and docstring of ``MemoryAPI.<name>`` that runs the
    operation in the owner (this process's Memory, or the owner's over the socket)."""
    declared = api.signature(name)

    def method(self: SharedMemory, *args: Any, **kwargs: Any) -> Any:
        bound = declared.bind(*args, **kwargs)
        prepare = _PREPARE.get(name)
        if prepare is not None:
            prepare(bound.arguments)
        # A callback cannot cross the socket: it is honoured only when this process is the owner.
        if self._local is None:
            bound.arguments.pop("progress", None)
        result = self._call(name, *bound.args, **bound.kwargs)
        if name == "stats":
            result["role"] = self.role
        return result

    method.__name__ = method.__qualname__ = name
    method.__doc__ = getattr(MemoryAPI, name).__doc__
    method.__signature__ = declared.replace(  # type: ignore[attr-defined]
        parameters=[
            inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY),
            *declared.parameters.values(),
        ]
    )
    return method


for _name in API_METHODS:
    setattr(SharedMemory, _name, _proxy(_name))


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
    return SharedMemory(  # type: ignore[abstract]
        settings, {"progress": progress, **memory_kwargs}, allow_owner=allow_owner
    )
