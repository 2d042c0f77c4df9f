"""Jupyter server extension: the authenticated REST API under ``/nbmemory/`` used by the sidebar.

The memory is opened lazily, on the first request, with :func:`nbmemory.remote.connect`: the
server becomes the owner of the file when no kernel or CLI holds it, else a client of the
current owner. A server start therefore never waits for the database or the model. The live
indexer (:mod:`nbmemory.server.live`) opens it when a file is saved, or a few seconds after the
start to scan the indexed folders.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nbmemory.server import state
from nbmemory.server.state import ServerState, set_memory_factory


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "nbmemory.server"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    """Register the ``/nbmemory/`` handlers; the memory itself opens on the first request."""
    from nbmemory.server import live
    from nbmemory.server.capture import KernelCapture
    from nbmemory.server.handlers import setup_handlers

    shared = ServerState(serverapp.root_dir, state.memory_factory())
    serverapp.web_app.settings["nbmemory"] = shared
    capture = KernelCapture(serverapp, lambda: Path(shared.memory().path))
    serverapp.web_app.settings["nbmemory_capture"] = capture
    setup_handlers(serverapp.web_app)
    _serve_agents(serverapp, shared)
    serverapp.log.info("nbmemory: REST API at %snbmemory/ (memory opens on first use)", serverapp.base_url)
    if live.watch_enabled(serverapp):
        live.start(serverapp, shared)
        serverapp.log.info("nbmemory: files saved under indexed folders are indexed (NBMEMORY_WATCH=0: off)")
    if capture.server_wide:
        serverapp.log.info("nbmemory: every Python kernel started from now on captures its cells")
    # A module extension gets no stop hook; SharedMemory also closes itself at exit.


def _serve_agents(serverapp: Any, shared: ServerState) -> None:
    """Hand the server's memory to the tools Jupyter AI's MCP server serves
    (:mod:`nbmemory.mcp.jupyter_ai`), in the mode ``c.NbMemory.agent_tools`` or
    ``NBMEMORY_AGENT_TOOLS`` says."""
    from nbmemory.errors import ConfigError
    from nbmemory.mcp import jupyter_ai

    settings = serverapp.config.get("NbMemory", {})
    try:
        mode = jupyter_ai.mode_setting(settings.get("agent_tools"))
        namespace = jupyter_ai.namespace_setting(settings.get("agent_namespace"))
    except ConfigError as exc:
        # A mistyped restriction must not leave the tools wider open than meant.
        serverapp.log.error("nbmemory: %s; agents get no tool (off)", exc)
        mode, namespace = "off", None
    jupyter_ai.attach(shared.memory, shared.root_dir, mode, namespace)
    serverapp.log.info("nbmemory: tools for Jupyter AI's agents: %s (c.NbMemory.agent_tools)", mode)


__all__ = ["ServerState", "set_memory_factory"]
