"""The Jupyter server's source of live changes: the contents manager's save, rename and delete
events, fed to a :class:`~nbmemory.live.ChangeQueue` that keeps the memory's roots current.

jupyter_server 2.x emits an event for every action of its contents API through
``serverapp.event_logger`` (schema :data:`CONTENTS_SCHEMA`); paths in it are relative to the
server's root. A notebook saved in JupyterLab under an indexed folder is therefore searchable a
moment later, with no index call. On by default; ``NBMEMORY_WATCH=0`` or ``c.NbMemory.watch =
False`` in the server's configuration turns it off.
"""

from __future__ import annotations

import os
from typing import Any

from tornado.ioloop import IOLoop

from nbmemory import live
from nbmemory.server.state import ServerState

CONTENTS_SCHEMA = "https://events.jupyter.org/jupyter_server/contents_service/v1"
#: Actions that change what is on disk; ``get`` only reads.
CHANGES = ("save", "create", "upload", "rename", "copy", "delete")
#: Seconds after the server starts before the roots are scanned for what changed while nothing
#: watched: the server answers its first requests before the memory and the model load.
SCAN_DELAY_SECONDS = 3.0


def watch_enabled(serverapp: Any) -> bool:
    """``NBMEMORY_WATCH`` (default on) and the server setting ``c.NbMemory.watch`` (default True)."""
    setting = serverapp.config.get("NbMemory", {}).get("watch", True)
    return live.enabled() and bool(setting)


def changes_of(event: dict[str, Any], root_dir: str) -> list[tuple[str, bool]]:
    """The ``(absolute path, deleted)`` pairs a contents event stands for."""
    action, path = event.get("action"), event.get("path")
    if action not in CHANGES or not isinstance(path, str):
        return []
    absolute = os.path.abspath(os.path.join(root_dir, path.lstrip("/")))
    changes = [(absolute, action == "delete")]
    source = event.get("source_path")
    if action == "rename" and isinstance(source, str):
        changes.append((os.path.abspath(os.path.join(root_dir, source.lstrip("/"))), True))
    return changes


def start(serverapp: Any, state: ServerState, scan_delay: float = SCAN_DELAY_SECONDS) -> live.ChangeQueue:
    """Listen to the contents events, and scan the roots ``scan_delay`` seconds from now."""
    queue = live.ChangeQueue(state.memory, source="server")
    root_dir = str(state.root_dir)

    async def listener(logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        # Only queued here (no file or memory access): the event loop must not wait.
        changes = changes_of(data, root_dir)
        if changes:
            queue.put_many(changes)

    serverapp.event_logger.add_listener(schema_id=CONTENTS_SCHEMA, listener=listener)
    state.live = queue
    state.live_listener = listener
    if scan_delay >= 0:
        IOLoop.current().call_later(scan_delay, queue.scan)
    return queue
