"""nbmemory's tools in Jupyter AI's MCP server, served by the Jupyter server's own memory.

Jupyter AI v3's agents (Jupyternaut, ACP agents such as Claude Code) and any MCP client reach
tools through jupyter-server-mcp, an MCP server that runs inside the Jupyter server. At its start
it calls :func:`tool_specs` (nbmemory's ``jupyter_server_mcp.tools`` entry point) and registers
the functions named there: :func:`search`, :func:`remember`, :func:`forget`, :func:`get`,
:func:`related`, :func:`context`, :func:`stats` and :func:`index`. Each is the tool of the same
name of ``nbmemory mcp`` (:class:`~nbmemory.mcp.tools.MemoryTools`), built from it here rather
than written again: the same parameters with their types, defaults and limits, the same
description and annotations (:data:`nbmemory.mcp.server.ANNOTATIONS`,
:func:`nbmemory.mcp.server.descriptions`), the same handling of stored text (returned as data, a
passage that looks like a prompt injection flagged with a ``warning``).

They work on the memory of the Jupyter server they run in (the one the Memory sidebar uses),
which nbmemory's server extension hands over with :func:`attach` when it loads: no second memory,
and no second process opening the file. ``index`` reads files inside the server's root only.

What agents may do is a server setting, ``c.NbMemory.agent_tools`` (or ``NBMEMORY_AGENT_TOOLS``):

* ``"on"`` (the default): every tool;
* ``"read-only"``: ``remember``, ``index`` and ``forget`` (but a dry run) are refused, as with
  ``nbmemory mcp --read-only``;
* ``"off"``: every call is refused, and a server started with it offers no tool at all.

``c.NbMemory.agent_namespace`` (or ``NBMEMORY_AGENT_NAMESPACE``) confines them to one namespace
(``nbmemory mcp --namespace``). The sidebar changes the mode while the server runs
(``PUT /nbmemory/agents``); the tools check it on every call, since jupyter-server-mcp reads its
list of tools once, at its start.
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError

from nbmemory.errors import ConfigError, NbMemoryError
from nbmemory.mcp.server import ANNOTATIONS, descriptions
from nbmemory.mcp.tools import ClosableMemory, MemoryTools, Policy

__all__ = [
    "MODES",
    "NAMES",
    "READ_TOOLS",
    "ServerTools",
    "attach",
    "available",
    "check_mode",
    "context",
    "detach",
    "forget",
    "get",
    "index",
    "middleware",
    "mode",
    "mode_setting",
    "namespace_setting",
    "policy",
    "related",
    "remember",
    "search",
    "set_mode",
    "stats",
    "tool_specs",
]

log = logging.getLogger(__name__)

MODES = ("on", "read-only", "off")
#: The tools, in the order ``nbmemory mcp`` lists them.
NAMES = tuple(ANNOTATIONS)
#: Those that change nothing: what agents may call in ``read-only`` mode.
READ_TOOLS = tuple(name for name, hints in ANNOTATIONS.items() if hints.read_only_hint)
SETTING = "c.NbMemory.agent_tools"
NAMESPACE_SETTING = "c.NbMemory.agent_namespace"


def mode_setting(value: Any = None) -> str:
    """The mode a server starts in: ``value`` (its ``c.NbMemory.agent_tools``) when given, else
    ``NBMEMORY_AGENT_TOOLS``, else ``"on"``; a :class:`ConfigError` naming a value not in MODES."""
    where = SETTING
    if value is None:
        value, where = os.environ.get("NBMEMORY_AGENT_TOOLS") or "on", "NBMEMORY_AGENT_TOOLS"
    return check_mode(value, where)


def check_mode(value: Any, where: str = "mode") -> str:
    """``value`` when it is one of :data:`MODES`, else a :class:`ConfigError` naming it."""
    if value not in MODES:
        raise ConfigError(f"{where} {value!r} is not a mode: give one of {', '.join(map(repr, MODES))}")
    return str(value)


def namespace_setting(value: Any = None) -> str | None:
    """The namespace agents are confined to: ``value`` (``c.NbMemory.agent_namespace``), else
    ``NBMEMORY_AGENT_NAMESPACE``, else None (every namespace)."""
    where = NAMESPACE_SETTING
    if value is None:
        value, where = os.environ.get("NBMEMORY_AGENT_NAMESPACE") or None, "NBMEMORY_AGENT_NAMESPACE"
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or not value.isprintable() or len(value) > 200:
        raise ConfigError(
            f"{where} {value!r}: give a namespace name (1-200 characters, no control characters)"
        )
    return value


class ServerTools(MemoryTools):
    """:class:`MemoryTools` over a Jupyter server's memory: read through ``memory`` on each call
    (the server opens, owns and closes it), with refusals that name the server setting."""

    @property
    def memory(self) -> ClosableMemory:
        return self._open()  # type: ignore[no-any-return]

    def close(self) -> None:
        """Nothing: the memory is the server's, closed when the server stops."""

    def writable(self, tool: str) -> None:
        if self.policy.read_only:
            raise NbMemoryError(
                f"agents may only read the memory in this Jupyter server ({SETTING} = 'read-only', or "
                f"the Memory sidebar): {tool} is refused"
            )


@dataclass
class _Served:
    tools: ServerTools
    mode: str


_served: _Served | None = None
_lock = threading.Lock()


def attach(
    memory: Callable[[], Any], root_dir: str | Path, mode: str = "on", namespace: str | None = None
) -> None:
    """Serve the tools from ``memory`` (the server's: a callable returning it, opened on first use).

    Parameters
    ----------
    memory:
        Returns the Jupyter server's memory (``ServerState.memory``).
    root_dir:
        The server's root: the one folder ``index`` reads.
    mode:
        One of :data:`MODES`.
    namespace:
        Confine the tools to this namespace (None: every namespace).
    """
    policy = Policy(namespace, check_mode(mode) == "read-only", (Path(root_dir).expanduser().resolve(),))
    global _served
    with _lock:
        _served = _Served(ServerTools(memory, policy), check_mode(mode))


def detach() -> None:
    """Stop serving (the server extension's memory is gone); calls are then refused."""
    global _served
    with _lock:
        _served = None


def mode() -> str | None:
    """The current mode, None when no Jupyter server of this process has attached a memory."""
    served = _served
    return None if served is None else served.mode


def set_mode(new: str) -> str:
    """Change what agents may do from now on (:data:`MODES`); a :class:`ConfigError` naming a bad
    mode, and a :class:`NbMemoryError` when nothing is attached."""
    checked = check_mode(new)
    with _lock:
        served = _served
        if served is None:
            raise NbMemoryError("nbmemory's server extension has not loaded in this process: no mode to set")
        served.tools.policy = replace(served.tools.policy, read_only=checked == "read-only")
        served.mode = checked
    return checked


def available(current: str | None = None) -> list[str]:
    """The tools agents may call in mode ``current`` (default: the current mode)."""
    current = mode() if current is None else current
    if current == "on":
        return list(NAMES)
    if current == "read-only":
        return list(READ_TOOLS)
    return []


def policy() -> Policy | None:
    """The policy the tools run under now (None before :func:`attach`)."""
    served = _served
    return None if served is None else served.tools.policy


def tool_specs() -> list[str]:
    """What jupyter-server-mcp registers: ``"nbmemory.mcp.jupyter_ai:NAME"`` for each tool, or
    nothing when the server starts with the tools off (the ``jupyter_server_mcp.tools`` entry
    point; called once, at the MCP server's start, after the server extensions loaded)."""
    current = mode()
    if current is None:
        try:
            current = mode_setting()
        except ConfigError as exc:
            log.error("nbmemory: %s; agents get no tool", exc)
            return []
    if current == "off":
        log.info("nbmemory: agent tools are off (%s); Jupyter AI's MCP server gets none", SETTING)
        return []
    described = descriptions(policy() or Policy(read_only=current == "read-only"))
    for name in NAMES:
        globals()[name].__doc__ = described[name]
    return [f"{__name__}:{name}" for name in NAMES]


def middleware() -> Any:
    """A FastMCP middleware for jupyter-server-mcp (the ``jupyter_server_mcp.middleware`` entry
    point): each ``tools/list`` shows nbmemory's tools with their annotations and with the
    descriptions of the current mode, and leaves them out while the mode is ``off``.

    jupyter-server-mcp registers a function with its docstring and signature only; what a tool
    does to the memory (read-only, destructive) reaches agents this way."""
    from fastmcp.server.middleware import Middleware

    class ToolsOfTheMode(Middleware):  # type: ignore[misc]
        async def on_list_tools(self, context: Any, call_next: Any) -> Any:
            listed = await call_next(context)
            current, now = mode(), policy()
            described = descriptions(now) if now is not None else {}
            out = []
            for tool in listed:
                name = tool.name
                if (
                    name not in ANNOTATIONS
                    or getattr(getattr(tool, "fn", None), "__module__", None) != __name__
                ):
                    out.append(tool)  # another package's tool
                elif current != "off":
                    update: dict[str, Any] = {"annotations": ANNOTATIONS[name]}
                    if name in described:
                        update["description"] = described[name]
                    out.append(tool.model_copy(update=update))
            return out

    return ToolsOfTheMode()


def _refusal(message: str) -> Exception:
    """A tool error the MCP host passes to the agent as it is (FastMCP's own when it is the host)."""
    try:
        from fastmcp.exceptions import ToolError as HostToolError
    except ImportError:
        return ToolError(message)
    return HostToolError(message)  # type: ignore[no-any-return]


def _call(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    served = _served
    if served is None:
        raise _refusal(
            f"{name}: nbmemory's server extension has not loaded in this Jupyter server, so its memory "
            "is not here: enable it (jupyter server extension enable nbmemory) and restart the server"
        )
    if served.mode == "off":
        raise _refusal(
            f"{name}: nbmemory's tools are off in this Jupyter server ({SETTING} = 'off', or the "
            "Memory sidebar); a person can turn them on there"
        )
    try:
        return getattr(served.tools, name)(*args, **kwargs)
    except ToolError as exc:
        raise _refusal(str(exc)) from None


def _tool(name: str) -> Callable[..., Any]:
    """The module-level function for tool ``name``: MemoryTools' method's signature without
    ``self``, types resolved, so the host builds the same input schema as ``nbmemory mcp``."""
    signature = inspect.signature(getattr(MemoryTools, name), eval_str=True)
    params = list(signature.parameters.values())[1:]

    def call(*args: Any, **kwargs: Any) -> Any:
        return _call(name, args, kwargs)

    call.__name__ = call.__qualname__ = name
    call.__module__ = __name__
    call.__doc__ = descriptions(Policy(roots=(Path("<the Jupyter server's root>"),)))[name]
    call.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    call.__annotations__ = {p.name: p.annotation for p in params} | {"return": signature.return_annotation}
    return call


search = _tool("search")
remember = _tool("remember")
forget = _tool("forget")
get = _tool("get")
related = _tool("related")
context = _tool("context")
stats = _tool("stats")
index = _tool("index")
