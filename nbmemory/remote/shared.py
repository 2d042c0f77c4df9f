"""One memory, many processes: :func:`connect` returns an owner or a client, transparently.

The first process to open a memory file owns it (DuckDB allows one read-write process) and
serves the others over a local socket; every other process is its client. When the owner goes
away (a kernel restarts, the server stops, a process is killed), the next call of any client
finds no owner, takes the file over and becomes the owner itself (or, for the command line,
starts a background owner: :mod:`nbmemory.remote.launch`). Writes carry a request key, so a
write retried after its owner died is stored once.
"""

from __future__ import annotations

import atexit
import contextlib
import inspect
import os
import time
import uuid
from collections.abc import Callable, Collection
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from nbmemory import api
from nbmemory.api import API_METHODS, MemoryAPI
from nbmemory.config import Settings
from nbmemory.errors import NbMemoryError, StoreLockedError
from nbmemory.progress import fitted
from nbmemory.remote import wire
from nbmemory.remote.owner import ALONGSIDE, OwnerServer, Turns, try_connect

# Writes that are safe to retry once the request key is attached.
_KEYED = {"remember", "remember_many"}
#: What :meth:`SharedMemory._beside` answers when the operation must go the usual way.
_AGAIN = object()
FAILOVER_SECONDS = 60.0


class SharedMemory(MemoryAPI):
    """The :class:`~nbmemory.api.MemoryAPI`, whether this process owns the file or not.

    Use :func:`connect` to make one. ``role`` is ``"owner"`` or ``"client"`` and can change
    during the object's life (a client becomes the owner when the owner dies). Each operation is
    a proxy derived from its declaration (see :func:`_proxy`).

    Parameters
    ----------
    settings, memory_kwargs:
        What this process opens the memory with if it becomes the owner.
    allow_owner:
        False: never open the file here, only be a client.
    start_owner:
        Called when no process serves the memory, instead of opening it here: it starts an owner
        elsewhere and returns once that one answers (the command line's background owner).
    served_by:
        What this process reports as an owner (see :data:`~nbmemory.remote.owner.SERVED_BY`).
    """

    def __init__(
        self,
        settings: Settings,
        memory_kwargs: dict[str, Any],
        allow_owner: bool = True,
        *,
        start_owner: Callable[[], None] | None = None,
        served_by: str = "process",
    ) -> None:
        self.settings = settings
        self._kwargs = memory_kwargs
        self._allow_owner = allow_owner
        self._start_owner = start_owner
        self._served_by = served_by
        self._turns = Turns()
        self._lock = self._turns.lock
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
        delay = 0.05
        while True:
            conn = try_connect(self.path)
            if conn is not None:
                self._conn = conn
                return
            if self._start_owner is not None:
                self._start_owner()
                conn = try_connect(self.path)
                if conn is not None:
                    self._conn = conn
                    return
            elif self._allow_owner:
                # Imported only here: a client never needs DuckDB, numpy or the model.
                from nbmemory.memory import Memory

                try:
                    local = Memory(settings=self.settings, **self._kwargs)
                except StoreLockedError:
                    local = None  # someone else won the race: their socket appears shortly
                if local is not None:
                    self._local = local
                    self._server = OwnerServer(local, self._turns, self._served_by)
                    return
            if time.monotonic() > deadline:
                raise NbMemoryError(
                    f"could not reach the owner of {self.path} nor open it: another process holds "
                    "the file without serving it (an nbmemory older than this one?)"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    # -- calls ------------------------------------------------------------------------------
    def call(self, name: str, /, *args: Any, plain: Collection[str] = (), **kwargs: Any) -> Any:
        """Run the operation ``name`` of :class:`~nbmemory.api.MemoryAPI` in the owner.

        What every operation's method does; ``plain`` is its one extra: class names (e.g.
        ``{"SearchResult"}``) that a reply from another process gives back as a
        :class:`types.SimpleNamespace` of their fields, so that this process need not import
        the module that defines them. A local owner returns its objects as they are.
        """
        if name not in API_METHODS:
            raise NbMemoryError(f"{name!r} is not an operation of a memory")
        bound = api.signature(name).bind(*args, **kwargs)
        prepare = _PREPARE.get(name)
        if prepare is not None:
            prepare(bound.arguments)
        progress = None
        # A callback cannot cross the socket: the owner sends its calls' arguments back instead.
        if self._local is None:
            progress = bound.arguments.pop("progress", None)
            if progress is not None:
                progress = fitted(progress)
        result = self._call(name, bound.args, bound.kwargs, plain, progress)
        if name == "stats":
            result["role"] = self.role
            result["owner_pid"] = self.ping()["pid"]
        return result

    def _call(
        self,
        method: str,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        plain: Collection[str] = (),
        progress: Callable[..., None] | None = None,
    ) -> Any:
        kwargs = dict(kwargs or {})
        if self._closed:
            raise NbMemoryError("this memory connection is closed")
        if method in _KEYED and kwargs.get("request_key") is None:
            kwargs["request_key"] = uuid.uuid4().hex
        if method in ALONGSIDE:
            beside = self._beside(method, args, kwargs, plain, progress)
            if beside is not _AGAIN:
                return beside
        deadline = time.monotonic() + FAILOVER_SECONDS
        request: bytes | None = None
        # One request at a time per process, owner or client: the connection carries one
        # request and its reply at a time (threads sharing it would read each other's replies),
        # and a failover must run once, not once per waiting thread.
        with self._lock:
            while True:
                if self._closed:
                    raise NbMemoryError("this memory connection is closed")
                if self._local is not None:  # from the start, or since a failover
                    if progress is not None:
                        kwargs["progress"] = progress
                    return getattr(self._local, method)(*args, **kwargs)
                assert self._conn is not None
                if request is None:  # only what crosses the socket is encoded (callbacks cannot)
                    message = {"method": method, "args": args, "kwargs": kwargs}
                    request = wire.dumps({**message, "progress": True} if progress else message)
                try:
                    self._conn.send_bytes(request)
                    reply = self._receive(plain, progress)
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

    def _beside(
        self,
        method: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        plain: Collection[str],
        progress: Callable[..., None] | None,
    ) -> Any:
        """Run an operation of :data:`~nbmemory.remote.owner.ALONGSIDE` beside this process's
        other calls: in the local memory when this process owns it, else over a connection of its
        own. :data:`_AGAIN` when it could not start or its owner went away: the caller then sends
        it the usual way, which finds the next owner (an index run again re-embeds nothing
        already stored)."""
        if self._closed:
            raise NbMemoryError("this memory connection is closed")
        local = self._local
        if local is not None:
            with self._turns.turn(method):
                if self._closed:
                    raise NbMemoryError("this memory connection is closed")
                if progress is not None:
                    kwargs = {**kwargs, "progress": progress}
                return getattr(local, method)(*args, **kwargs)
        conn = try_connect(self.path)
        if conn is None:
            return _AGAIN
        try:
            message = {"method": method, "args": args, "kwargs": kwargs}
            conn.send_bytes(wire.dumps({**message, "progress": True} if progress else message))
            reply = self._receive(plain, progress, conn)
        except (EOFError, OSError):
            return _AGAIN
        finally:
            with contextlib.suppress(OSError):
                conn.close()
        if "error" in reply:
            wire.raise_error(reply["error"])
        return reply["ok"]

    def _receive(
        self, plain: Collection[str], progress: Callable[..., None] | None, conn: Connection | None = None
    ) -> Any:
        own = conn is None
        conn = self._conn if conn is None else conn
        assert conn is not None
        try:
            while True:
                reply = wire.loads(conn.recv_bytes(), plain)
                if "progress" not in reply:
                    return reply
                if progress is not None:
                    progress(*reply["progress"])
        except (EOFError, OSError):
            raise
        except BaseException:
            # Interrupted between a request and its reply (Ctrl-C in a progress callback): the
            # reply still to come would answer the next request, so this connection is done.
            if own:
                self._drop_conn()
            raise

    def _drop_conn(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()
            self._conn = None

    def ping(self) -> dict[str, Any]:
        """Who serves this memory: ``pid``, ``served_by``, ``model`` and ``idle`` seconds."""
        with self._lock:
            if self._server is not None:
                return self._server.status()
        return dict(self._call("ping"))

    def idle_seconds(self) -> float:
        """Seconds since the last request from another process ended (this process must own)."""
        if self._server is None:
            raise NbMemoryError("idle_seconds: this process does not own the memory")
        return self._server.idle_seconds()

    def warm_up(self) -> None:
        """Load the model now (owner only), so that the first search does not wait for it."""
        with self._lock:
            if self._local is not None:
                try:
                    self._local.embedder.embed_query("warm up")
                finally:
                    if self._server is not None:
                        self._server.touch()  # the idle time starts when the model is ready

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
                self._turns.wait_alongside()
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
    # No paths: bound arguments leave an empty *paths out; the owner says what is missing.
    "index": lambda args: args.update(paths=tuple(_absolute(p) for p in args.get("paths", ()))),
    "forget": _prepare_forget,
    "restore": lambda args: args.update(
        item_id=args["item_id"] if isinstance(args["item_id"], int) else [int(i) for i in args["item_id"]]
    ),
    "export": lambda args: args.update(out=_absolute(args["out"])),
    "remove_root": lambda args: args.update(path=_absolute(args["path"])),
}


def _proxy(name: str) -> Callable[..., Any]:
    """A method with the declared signature and docstring of ``MemoryAPI.<name>`` that runs the
    operation in the owner (this process's Memory, or the owner's over the socket)."""
    declared = api.signature(name)

    def method(self: SharedMemory, *args: Any, **kwargs: Any) -> Any:
        return self.call(name, *args, **kwargs)

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
    background: bool = False,
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
    background:
        When no process serves the memory, start a background owner for it and be its client,
        instead of owning it here (what the command line does: :mod:`nbmemory.remote.launch`).
        A background owner of another model than ``model`` is replaced by one of this model.
        Not done when ``settings.idle_seconds`` (``NBMEMORY_IDLE_SECONDS``) is 0, nor with
        ``memory_kwargs`` other than ``on_model_change`` (an embedder object cannot be handed
        to another process).
    """
    settings = (Settings(home=Path(home)) if home is not None else Settings()).override(
        path, model, namespace
    )
    kwargs = {"progress": progress, **memory_kwargs}
    if not (
        background and allow_owner and settings.idle_seconds > 0 and set(memory_kwargs) <= {"on_model_change"}
    ):
        return SharedMemory(settings, kwargs, allow_owner=allow_owner)  # type: ignore[abstract]

    from nbmemory.remote import launch

    def start() -> None:
        launch.start(settings, memory_kwargs.get("on_model_change"))

    shared = SharedMemory(settings, kwargs, start_owner=start)  # type: ignore[abstract]
    owner = shared.ping()
    if owner.get("served_by") == "background" and owner.get("model") != settings.model:
        shared.close()
        launch.stop(settings.db_path, served_by=("background",))
        shared = SharedMemory(settings, kwargs, start_owner=start)  # type: ignore[abstract]
    return shared
