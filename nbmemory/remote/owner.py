"""The owner: the one process that holds the DuckDB file and answers the others.

DuckDB lets one process open a file read-write and then refuses every other process, even
read-only (docs/architecture.md, note 5). So whichever process opens a memory first owns it and serves
the facade's methods on a Unix socket next to nothing else: a folder only this user can enter,
and an HMAC challenge with a per-file key (``multiprocessing.connection``), JSON messages.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

from nbmemory import private
from nbmemory.remote import wire
from nbmemory.runtime import endpoint

# Who serves a memory, as ``ping`` reports it: a CLI's background owner, ``nbmemory serve`` in a
# terminal, or any other process that opened it (a kernel, the Jupyter server, a script).
SERVED_BY = ("background", "serve", "process")

#: Operations that run alongside the others instead of one at a time: an index embeds for
#: seconds to minutes (a live queue's slice, a first index), and a search must not wait for it;
#: a wait for the background refiner waits as long.
#: The memory keeps them apart itself: the database lock around each statement and transaction
#: (embedding happens outside it), the model-use lock between writes and a model swap.
ALONGSIDE = frozenset({"index", "wait_refined"})


class Turns:
    """Whose turn it is in one owner: requests run one at a time under :attr:`lock`, those of
    :data:`ALONGSIDE` beside them, counted so that closing waits for them too and idle time does
    not start while one runs. The owner's own calls and the requests it serves share it."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._cond = threading.Condition()
        self._alongside = 0

    @contextlib.contextmanager
    def turn(self, method: str) -> Iterator[None]:
        """Held while ``method`` runs: the lock, or a place beside it."""
        if method not in ALONGSIDE:
            with self.lock:
                yield
            return
        with self._cond:
            self._alongside += 1
        try:
            yield
        finally:
            with self._cond:
                self._alongside -= 1
                self._cond.notify_all()

    @property
    def busy(self) -> bool:
        """Whether a request runs now (one holding the lock, or one beside it)."""
        if self._alongside:
            return True
        if self.lock.acquire(blocking=False):
            self.lock.release()
            return False
        return True

    def wait_alongside(self) -> None:
        """Until no request of :data:`ALONGSIDE` runs (call with :attr:`lock` held: no new one
        can then start, as a closed owner or memory refuses it)."""
        with self._cond:
            while self._alongside:
                self._cond.wait()


def read_key(key_path: Path) -> bytes | None:
    try:
        return key_path.read_bytes()
    except OSError:
        return None


def try_connect(db_path: Path, timeout: float = 5.0) -> Connection | None:
    """A connection to the live owner of ``db_path``, or None if there is none."""
    address, key_path = endpoint(db_path)
    key = read_key(key_path)
    if key is None or not os.path.exists(address):
        return None
    # Probe first: Client() on a dead socket can block on the auth handshake.
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(timeout)
    try:
        probe.connect(address)
    except OSError:
        return None
    finally:
        probe.close()
    try:
        conn = Client(address, family="AF_UNIX", authkey=key)
    except (OSError, EOFError):
        return None
    return conn


class OwnerServer:
    """Serves ``call(method, args, kwargs)`` requests against a local :class:`Memory`.

    Parameters
    ----------
    memory:
        The owner's facade; requests run one at a time, those of :data:`ALONGSIDE` beside them.
    turns:
        Shared with the owner's own local calls (:class:`Turns`).
    served_by:
        One of :data:`SERVED_BY`, told to whoever pings: ``nbmemory stop`` stops only the owners
        the command line started.
    """

    def __init__(self, memory: Any, turns: Turns, served_by: str = "process") -> None:
        if served_by not in SERVED_BY:
            raise ValueError(f"served_by must be one of {', '.join(SERVED_BY)}, not {served_by!r}")
        self.memory = memory
        self.turns = turns
        self.served_by = served_by
        self.last_request = time.monotonic()
        self.address, self.key_path = endpoint(memory.path)
        # The socket left by a dead owner: safe to remove, we hold the file's lock now.
        if os.path.exists(self.address):
            os.unlink(self.address)
        key = secrets.token_bytes(32)
        private.write_bytes(self.key_path, key)
        self.listener = Listener(self.address, family="AF_UNIX", authkey=key)
        # bind() made the socket with the umask's mode (its folder is 0700 already).
        private.narrow(self.address)
        self.requests = 0
        self._closed = False
        self._conns: set[Connection] = set()
        self._thread = threading.Thread(target=self._accept_loop, name="nbmemory-owner", daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn = self.listener.accept()
            except (OSError, EOFError, ValueError, AuthenticationError):
                if self._closed:
                    return
                continue  # a client that failed the handshake
            threading.Thread(target=self._serve, args=(conn,), name="nbmemory-client", daemon=True).start()

    def _serve(self, conn: Connection) -> None:
        self._conns.add(conn)
        try:
            while True:
                try:
                    request = wire.loads(conn.recv_bytes())
                    answer = self._answer(request, conn)
                    if answer is None:
                        return  # closing: the client sees the connection drop and fails over
                    conn.send_bytes(wire.dumps(answer))
                except (EOFError, OSError, TypeError):
                    # TypeError: close() from another thread closed the connection mid-read
                    # (multiprocessing reads from a handle that is now None).
                    return
        finally:
            self._conns.discard(conn)
            with contextlib.suppress(OSError):
                conn.close()

    def status(self) -> dict[str, Any]:
        """What ``ping`` answers: who serves, with which model, idle for how long."""
        return {
            "pid": os.getpid(),
            "served_by": self.served_by,
            "model": self.memory.settings.model,
            "idle": round(self.idle_seconds(), 3),
        }

    def touch(self) -> None:
        """Count now as the end of a request (work the owner did for itself, e.g. a warm-up)."""
        self.last_request = time.monotonic()

    def idle_seconds(self) -> float:
        """Seconds since the last request ended (0 while one runs, or while the memory refines
        passages in the background); pings do not count."""
        if self.turns.busy or getattr(self.memory, "refining", False):
            return 0.0
        return time.monotonic() - self.last_request

    def _answer(self, request: dict[str, Any], conn: Connection) -> dict[str, Any] | None:
        method = request.get("method")
        if method not in wire.METHODS:
            return {"error": {"type": "ConfigError", "message": f"unknown method {method!r}"}}
        if method == "ping":
            return {"ok": self.status()}
        kwargs = dict(request.get("kwargs", {}))
        if request.get("progress"):
            kwargs["progress"] = _relay(conn)
        with self.turns.turn(str(method)):
            # A request that arrives while the owner shuts down is not answered, so the client
            # retries it with the next owner instead of getting an error from a closed file.
            if self._closed:
                return None
            self.requests += 1
            try:
                result = getattr(self.memory, str(method))(*request.get("args", []), **kwargs)
            except Exception as exc:  # every error goes back to the caller, the owner keeps serving
                return {"error": wire.error_payload(exc)}
            finally:
                self.last_request = time.monotonic()
        return {"ok": result}

    def close(self) -> None:
        """Stop serving: wait for the requests in flight, then drop every client connection."""
        with self.turns.lock:
            self._closed = True
            self.turns.wait_alongside()
        with contextlib.suppress(OSError):
            self.listener.close()
        for conn in list(self._conns):
            with contextlib.suppress(OSError):
                conn.close()
        for path in (self.address, str(self.key_path)):
            with contextlib.suppress(OSError):
                os.unlink(path)


def _relay(conn: Connection) -> Callable[..., None]:
    """A progress callback that sends each call's arguments to the client as it runs."""

    def progress(*args: Any) -> None:
        # A client that went away does not stop the work: it is committed as usual.
        with contextlib.suppress(OSError, TypeError, ValueError):
            conn.send_bytes(wire.dumps({"progress": list(args)}))

    return progress
