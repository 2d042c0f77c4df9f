"""What agents in this kernel's Lab may do with the memory: the ``agents`` line of ``%memstats``.

The memory itself cannot know: Jupyter AI's MCP server runs in the Jupyter server, which holds
the mode (:mod:`nbmemory.mcp.jupyter_ai`). A kernel started by a Jupyter server knows that
server's pid (``JPY_PARENT_PID``, set by jupyter_client's launcher), finds its URL and token in
the server's info file (``jpserver-<pid>.json`` in Jupyter's runtime folder), and asks it
``GET /nbmemory/agents``. A kernel with no Jupyter server (plain IPython, nbclient) has no line.
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["agents_line", "agents_status", "kernel_server"]

#: Seconds %memstats waits for the server's answer.
TIMEOUT = 2.0


def kernel_server() -> dict[str, Any] | None:
    """The info (``url``, ``token``, ...) of the Jupyter server that started this kernel, or None."""
    parent = os.environ.get("JPY_PARENT_PID", "")
    if not parent.isdigit():
        return None
    try:
        from jupyter_core.paths import jupyter_runtime_dir
    except ImportError:
        return None
    info_file = Path(jupyter_runtime_dir()) / f"jpserver-{parent}.json"
    try:
        info = json.loads(info_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or not isinstance(info.get("url"), str):
        return None
    return info


def agents_status(timeout: float = TIMEOUT) -> dict[str, Any] | None:
    """The kernel's server's ``GET /nbmemory/agents`` (``installed``, ``mode``, ``tools``,
    ``url``), or None: no server, no nbmemory extension there, or no answer within ``timeout``."""
    info = kernel_server()
    if info is None:
        return None
    url = info["url"].rstrip("/") + "/nbmemory/agents"
    headers = {"Authorization": f"token {info['token']}"} if info.get("token") else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as reply:
            status = json.loads(reply.read())
    except (OSError, ValueError):  # refused, 403/404 (HTTPError is an OSError), a timeout, not JSON
        return None
    return status if isinstance(status, dict) else None


def agents_line(status: dict[str, Any] | None) -> str | None:
    """``search, remember, ... (Jupyter AI)``, ``... (Jupyter AI, read-only)`` or ``off``; None
    when the kernel's server runs no Jupyter AI MCP server (or there is no server)."""
    if not status or not status.get("installed"):
        return None
    if status.get("mode") == "off" or not status.get("tools"):
        return "off"
    where = "Jupyter AI, read-only" if status.get("mode") == "read-only" else "Jupyter AI"
    return f"{', '.join(map(str, status['tools']))} ({where})"
