"""An MCP session as an agent sees it: ``nbmemory mcp`` on a throwaway memory, driven by the SDK's client.

Starts ``python -m nbmemory.cli --home TMP mcp --namespace work --root NOTES`` on stdio (the real
bundled model), lists the tools, indexes two notes, remembers, searches, builds a context block,
reads an item, forgets (dry run first), and shows two refused calls. Every request and response is
printed as it crosses the wire (the tool result's structured JSON, or its error text).

Usage: ``python -m bench.system.mcp_transcript [--out FILE]``; writes the transcript (text, not
JSON) to ``--out`` (default ``bench/results/mcp-transcript.txt``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters, stdio_client

from bench.lib.paths import REPO, RESULTS

NOTES = {
    "deploy.md": "# Deploying\n\n## Staging\n\nDeploys to staging need the VPN on; the database there is "
    "db-stg-12.\n\n## Production\n\nProduction deploys go out on Tuesdays after the 10:00 stand-up.\n",
    "kafka.md": "# Kafka\n\nConsumer lag above 5 minutes pages the on-call engineer. Check the broker's "
    "partition count first.\n",
}


class Transcript:
    """Lines printed and kept; the throwaway folders shown as HOME and NOTES (their names change)."""

    def __init__(self, home: Path, notes: Path) -> None:
        self.lines: list[str] = []
        self.names = {str(notes): "NOTES", str(home): "HOME"}

    def hide(self, text: str) -> str:
        for path, name in self.names.items():
            text = text.replace(path, name)
        return text

    def say(self, text: str = "") -> None:
        text = self.hide(text)
        self.lines.append(text)
        print(text, flush=True)

    def json(self, prefix: str, value: Any) -> None:
        """``value`` as indented JSON, its lines under the first one's start."""
        body = json.dumps(value, indent=2, ensure_ascii=False)
        self.say(prefix + body.replace("\n", "\n" + " " * len(prefix)))


async def session(home: Path, notes: Path, out: Transcript) -> None:
    argv = ["-m", "nbmemory.cli", "--home", str(home), "mcp", "--namespace", "work", "--root", str(notes)]
    params = StdioServerParameters(
        command=sys.executable,
        args=argv,
        env={**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"},
        cwd=str(REPO),
    )
    out.say(f"$ nbmemory --home {home} mcp --namespace work --root {notes}   (stdio)")
    with (home / "server.log").open("w") as log:
        async with Client(stdio_client(params, errlog=log)) as client:
            info = client.server_info
            out.say(f"<- connected: {info.name if info else '?'} {info.version if info else ''}")
            out.say("<- instructions:")
            for line in (client.instructions or "").strip().splitlines():
                out.say(f"     {line}")
            out.say()
            out.say("-> tools/list")
            for tool in (await client.list_tools()).tools:
                props = tool.input_schema.get("properties", {})
                required = set(tool.input_schema.get("required", []))
                args = ", ".join(f"{name}{'' if name in required else '?'}" for name in props)
                out.say(f"<- {tool.name}({args})")
                for line in textwrap.wrap(out.hide(tool.description or ""), width=92):
                    out.say(f"     {line}")
            out.say()

            async def call(name: str, arguments: dict[str, Any]) -> Any:
                out.say(f"-> tools/call {name} {json.dumps(arguments, ensure_ascii=False)}")
                result = await client.call_tool(name, arguments)
                if result.is_error:
                    text = " ".join(c.text for c in result.content if hasattr(c, "text"))
                    out.say(f"<- error: {text}")
                    out.say()
                    return None
                out.json("<- ", result.structured_content)
                out.say()
                return result.structured_content

            await call("index", {"paths": ["."]})
            stored = await call(
                "remember",
                {"text": "Rotate the staging API token every 90 days (decided 2026-03-02).", "tags": ["ops"]},
            )
            found = await call("search", {"query": "what does a staging deploy need?", "k": 3})
            await call("context", {"query": "kafka consumer lag alert", "budget": 200})
            if found and found["hits"]:
                await call("get", {"id": found["hits"][0]["id"]})
            await call("forget", {"query": "staging API token rotation"})
            if stored:
                await call("forget", {"ids": [stored["item"]["id"]]})
            await call("search", {"query": "anything about personal notes", "namespace": "personal"})
            await call("search", {"query": "vpn", "k": 0})
            await call("stats", {})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        default=str(RESULTS / "mcp-transcript.txt"),
        help="write the transcript here (default %(default)s)",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nbm-mcp-") as tmp:
        home, notes = Path(tmp) / "home", Path(tmp) / "notes"
        out = Transcript(home, notes)
        home.mkdir()
        notes.mkdir()
        for name, text in NOTES.items():
            (notes / name).write_text(text)
        anyio.run(session, home, notes, out)
    Path(args.out).write_text("\n".join(out.lines) + "\n", encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
