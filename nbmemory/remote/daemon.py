"""An owner that only serves: ``nbmemory serve`` in a terminal, or the command line's background owner.

    python -m nbmemory.remote.daemon --db PATH [--model M] [--idle-seconds N]

It opens the memory, loads the model, serves every other process over the socket and stops after
``idle_seconds`` without a request (0: never), or on SIGTERM (``nbmemory stop``) or Ctrl-C,
closing the DuckDB file first. :mod:`nbmemory.remote.launch` starts it in the background.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from nbmemory.config import Settings
from nbmemory.errors import NbMemoryError
from nbmemory.remote.shared import SharedMemory

# The first request, sent as soon as the owner answers, runs before the model is loaded for
# later ones: a `get` or `stats` need not wait for a model it does not use.
WARM_UP_DELAY = 0.3


def say(message: str) -> None:
    """One line of the owner's log (its standard error)."""
    print(
        f"{datetime.now().isoformat(timespec='seconds')} nbmemory owner: {message}",
        file=sys.stderr,
        flush=True,
    )


def serve(
    settings: Settings,
    idle_seconds: float,
    served_by: str = "serve",
    memory_kwargs: dict[str, Any] | None = None,
) -> int:
    """Own the memory of ``settings`` and serve it until idle, SIGTERM or Ctrl-C.

    Parameters
    ----------
    idle_seconds:
        Stop this long after the last request ended; 0: never.
    served_by:
        ``"serve"`` (in a terminal) or ``"background"`` (started by a command-line run).
    memory_kwargs:
        Passed to :class:`~nbmemory.Memory` (``on_model_change``, ``progress``, ``embedder``).

    Returns
    -------
    int
        0 when it served and stopped, or when a background owner found another process
        already serving the memory; 1 when ``nbmemory serve`` found one.
    """
    stopping = threading.Event()
    shared = SharedMemory(settings, dict(memory_kwargs or {}), served_by=served_by)  # type: ignore[abstract]
    if shared.role != "owner":
        owner = shared.ping()
        shared.close()
        say(f"{settings.db_path} is already served by pid {owner['pid']} ({owner['served_by']})")
        return 0 if served_by == "background" else 1

    def on_signal(signum: int, frame: object) -> None:
        say(f"{signal.Signals(signum).name}: stopping")
        stopping.set()

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    threading.Thread(target=_warm_up, args=(shared,), name="nbmemory-warm-up", daemon=True).start()
    limit = f"stops after {idle_seconds:g} s without a request" if idle_seconds else "runs until stopped"
    say(f"serving {settings.db_path} (pid {shared.ping()['pid']}, model {settings.model}): {limit}")
    try:
        while not stopping.is_set():
            idle = shared.idle_seconds()
            if idle_seconds and idle >= idle_seconds:
                say(f"idle for {idle:.0f} s: stopping")
                break
            stopping.wait(min(1.0, idle_seconds - idle) if idle_seconds else 1.0)
    finally:
        # Finishes the request in flight, drops the clients (they fail over), closes DuckDB.
        started = time.monotonic()
        shared.close()
        say(f"closed {settings.db_path} in {time.monotonic() - started:.1f} s")
    return 0


def _warm_up(shared: SharedMemory) -> None:
    time.sleep(WARM_UP_DELAY)
    try:
        shared.warm_up()
    except NbMemoryError as exc:  # a bad model: each request says so to its caller too
        say(f"could not load the model: {exc}")


def main(argv: Sequence[str] | None = None, **memory_kwargs: Any) -> int:
    """The background owner's command line (``python -m nbmemory.remote.daemon``)."""
    parser = argparse.ArgumentParser(prog="python -m nbmemory.remote.daemon", description=__doc__)
    parser.add_argument("--db", required=True, help="the memory file")
    parser.add_argument("--model", help="the model it embeds with")
    parser.add_argument("--idle-seconds", type=float, help="stop after this long without a request")
    parser.add_argument("--on-model-change", choices=["reembed", "error", "defer"], help="as for Memory")
    parser.add_argument("--served-by", default="background", choices=["background", "serve"])
    args = parser.parse_args(argv)
    if args.on_model_change:
        memory_kwargs["on_model_change"] = args.on_model_change
    try:
        settings = Settings().override(args.db, args.model)
        idle = settings.idle_seconds if args.idle_seconds is None else args.idle_seconds
        return serve(settings, idle, args.served_by, memory_kwargs)
    except NbMemoryError as exc:
        say(f"error: {exc}")
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
