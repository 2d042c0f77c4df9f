"""The memory as an MCP server for agents: ``nbmemory mcp``.

:mod:`nbmemory.mcp.tools` holds the tools and the :class:`Policy` that bounds them;
:mod:`nbmemory.mcp.server` serves them on stdio or streamable HTTP.
"""

from nbmemory.mcp.server import build_server, check_port, serve
from nbmemory.mcp.tools import HOST, MemoryTools, Policy

__all__ = ["HOST", "MemoryTools", "Policy", "build_server", "check_port", "serve"]
