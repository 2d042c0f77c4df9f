"""``/nbmemory/agents``: what agents in this Lab may do with the memory, for the sidebar.

Jupyter AI's MCP server (jupyter-server-mcp, installed with ``nbmemory[ai]``) serves nbmemory's
tools from inside this Jupyter server (:mod:`nbmemory.mcp.jupyter_ai`). The sidebar reads here
whether it runs, which tools agents may call now and where the MCP endpoint is, and sets the mode.
"""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import tornado.web
from jupyter_server.base.handlers import APIHandler

from nbmemory.errors import ConfigError
from nbmemory.mcp import jupyter_ai

__all__ = ["MCP_EXTENSION", "AgentsHandler", "agents_status", "mcp_url"]

#: jupyter-server-mcp's server extension.
MCP_EXTENSION = "jupyter_server_mcp"
# A server listening on every interface is reached on the loopback address.
_DIALABLE = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1", "::0": "::1"}


def _mcp_app(serverapp: Any) -> Any:
    """jupyter-server-mcp's extension app in ``serverapp``, None when it is not loaded there."""
    if importlib.util.find_spec(MCP_EXTENSION) is None:
        return None
    manager = getattr(serverapp, "extension_manager", None)
    apps = manager.extension_apps.get(MCP_EXTENSION) if manager is not None else None
    return next(iter(apps), None) if apps else None


def mcp_url(serverapp: Any) -> str | None:
    """The URL of the MCP endpoint jupyter-server-mcp serves in ``serverapp``, once it listens."""
    app = _mcp_app(serverapp)
    server = getattr(app, "mcp_server_instance", None)
    port = getattr(server, "port", 0)
    if server is None or not port:
        return None
    host = str(getattr(server, "host", "localhost") or "localhost")
    host = _DIALABLE.get(host, host)
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/mcp"


def agents_status(serverapp: Any) -> dict[str, Any]:
    """``{installed, mode, tools, url}``: the reply of ``GET /nbmemory/agents``."""
    installed = _mcp_app(serverapp) is not None
    mode = jupyter_ai.mode() or "off"
    return {
        "installed": installed,
        "mode": mode,
        "tools": jupyter_ai.available(mode),
        "url": mcp_url(serverapp) if installed else None,
    }


def _fail(status: int, message: str) -> tornado.web.HTTPError:
    # tornado %-formats the message it logs.
    return tornado.web.HTTPError(status, message.replace("%", "%%"))


class AgentsHandler(APIHandler):
    """``GET /nbmemory/agents``: ``{"installed", "mode", "tools", "url"}``: whether Jupyter AI's
    MCP server runs in this server, the mode (``on``, ``read-only``, ``off``), the tools agents
    may call now (none when off, the reading ones when read-only) and the MCP endpoint's URL
    (null until it listens). ``PUT`` with ``{"mode": ...}`` sets the mode for this server process
    and answers the same; a mode not among the three answers 400 naming it."""

    def reply(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps(data))

    @tornado.web.authenticated
    async def get(self) -> None:
        self.reply(agents_status(self.serverapp))

    @tornado.web.authenticated
    async def put(self) -> None:
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            raise _fail(400, "the request body is not valid JSON") from None
        if not isinstance(body, dict) or "mode" not in body:
            raise _fail(400, 'give the mode as JSON: {"mode": "on" | "read-only" | "off"}')
        try:
            jupyter_ai.check_mode(body["mode"])
        except ConfigError as exc:
            raise _fail(400, str(exc)) from None
        if jupyter_ai.mode() is None:
            raise _fail(409, "nbmemory's tools are not attached to this server's memory")
        jupyter_ai.set_mode(body["mode"])
        self.reply(agents_status(self.serverapp))
