"""The built wheel with its [ai] extra, installed alone in a fresh venv: a ``jupyter server`` started
with nothing configured runs Jupyter AI's MCP server (jupyter-server-mcp) with nbmemory's tools,
found through its entry points, listed by the official MCP client over streamable HTTP.

The steps are the wheel check's (:mod:`tools.check_wheel`): the same build, and an install from
requirements.lock's versions with PYTHONPATH unset and Jupyter's and nbmemory's folders inside
the work folder, so nothing from the checkout stands in for what the wheel installed. A few
minutes: mostly pip installing the locked versions.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tools.check_wheel import run, run_step

REPO = Path(__file__).resolve().parents[1]
TOOLS = ["search", "remember", "forget", "get", "related", "context", "stats", "index"]
# Run in the venv: the tools the MCP endpoint lists, with their annotations.
LIST_TOOLS = """
import asyncio, sys
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

async def main(url):
    async with Client(streamable_http_client(url)) as client:
        for tool in (await client.list_tools()).tools:
            print("tool:", tool.name, "read-only" if tool.annotations and tool.annotations.read_only_hint else "writes")

asyncio.run(main(sys.argv[1]))
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.integration
def test_the_wheel_with_the_ai_extra_puts_the_tools_in_jupyter_ais_mcp_server(tmp_path: Path) -> None:
    work = tmp_path
    venv, dist, bin_ = work / "venv", work / "dist", work / "venv" / "bin"
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env.update(
        PATH=f"{bin_}{os.pathsep}{env.get('PATH', '')}",
        PYTHONNOUSERSITE="1",
        HF_HUB_OFFLINE="1",
        NBMEMORY_HOME=str(work / "home"),
        NBMEMORY_CACHE=str(work / "cache"),
        NBMEMORY_WATCH="0",
        JUPYTER_CONFIG_DIR=str(work / "jupyter" / "config"),
        JUPYTER_DATA_DIR=str(work / "jupyter" / "data"),
        JUPYTER_RUNTIME_DIR=str(work / "jupyter" / "runtime"),
    )
    env.pop("NBMEMORY_AGENT_TOOLS", None)
    run_step("build", work, env, venv, dist, work / "src", bin_, None)
    (wheel,) = dist.glob("nbmemory-*.whl")
    run([sys.executable, "-m", "venv", str(venv)], env, work)
    run([str(bin_ / "python"), "-m", "pip", "install", "-q", "--upgrade", "pip"], env, work)
    lock = str(REPO / "requirements.lock")
    run([str(bin_ / "pip"), "install", "-q", "--no-compile", "-c", lock, f"{wheel}[ai]"], env, work)

    # Both server extensions enabled by installing alone.
    listed = run([str(bin_ / "jupyter"), "server", "extension", "list"], env, work)
    for name in ("nbmemory", "jupyter_server_mcp"):
        assert re.search(rf"{name}\s+enabled", listed) and re.search(rf"{name}\s+\S+\s+OK", listed), listed

    root = work / "root"
    root.mkdir()
    token, port = secrets.token_hex(16), free_port()
    log = work / "server.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [
                str(bin_ / "jupyter"),
                "server",
                "--no-browser",
                "--ip=127.0.0.1",
                f"--port={port}",
                f"--IdentityProvider.token={token}",
                f"--ServerApp.root_dir={root}",
                # An ephemeral port: the default, 3001, may be another server's.
                "--MCPExtensionApp.mcp_port=0",
                *(["--allow-root"] if os.geteuid() == 0 else []),
            ],
            env=env,
            cwd=root,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 180
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/nbmemory/agents", headers={"Authorization": f"token {token}"}
        )
        agents: dict[str, object] = {}
        while not agents.get("url"):
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(0.5)
            try:
                with urllib.request.urlopen(request, timeout=10) as reply:
                    agents = json.loads(reply.read())
            except OSError:
                continue
        assert agents["installed"] is True and agents["mode"] == "on" and agents["tools"] == TOOLS, agents
        out = run([str(bin_ / "python"), "-c", LIST_TOOLS, str(agents["url"])], env, work)
        tools = [line.split()[1:] for line in out.splitlines() if line.startswith("tool:")]
        assert [name for name, _ in tools] == TOOLS, out
        assert dict(tools)["search"] == "read-only" and dict(tools)["remember"] == "writes"
        # The stdio proxy finds the server the same way: its runtime info file.
        (info,) = (work / "jupyter" / "runtime").glob("jpserver-mcp-*.json")
        assert json.loads(info.read_text())["url"] == agents["url"]
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(30)
