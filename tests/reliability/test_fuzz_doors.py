"""Hostile input at every door, property-based (hypothesis): the MCP tools, the magics' argument
parser, the command line and (in ``tests/server/test_fuzz_rest.py``) the REST routes.

Each door gets generated JSON-ish values (wrong types, huge and empty strings, lone surrogates and
control characters, negative and huge numbers, odd filters). What must hold: no unhandled
exception (a clear error naming the problem instead), and a rejected request changes nothing
stored (the content hash of the store is the same before and after). Plumbing tests: a real
DuckDB file and the fake embedder. ``test_fuzz_cases_ran`` prints how many cases each door ran.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from IPython.core.error import UsageError
from mcp.server.mcpserver.exceptions import ToolError

from nbmemory.cli import main as cli_main
from nbmemory.embed import FakeEmbedder
from nbmemory.jupyter import magic_lines, magics
from nbmemory.mcp import MemoryTools, Policy
from nbmemory.mcp.server import build_server
from nbmemory.remote import SharedMemory, connect
from tests.quick import examples

#: Cases run per door, and how each ended, printed by :func:`test_fuzz_cases_ran`.
CASES: dict[str, int] = {}
OUTCOMES: dict[str, Counter[str]] = {}
FUZZ = settings(
    max_examples=examples(150), deadline=None, suppress_health_check=list(HealthCheck), database=None
)
#: Doors whose every case opens the memory's write path: fewer cases.
FUZZ_WRITES = settings(FUZZ, max_examples=examples(100))


def count(door: str) -> None:
    CASES[door] = CASES.get(door, 0) + 1


def outcome(door: str, what: str) -> None:
    """Record how a case ended (also a hypothesis event, for ``--hypothesis-show-statistics``)."""
    OUTCOMES.setdefault(door, Counter())[what] += 1
    event(what)


def store_hash(shared: SharedMemory) -> str:
    """What a request could change that matters: every row's content and state, links, documents."""
    mem = shared.memory
    mem.flush()
    rows = mem.db.fetchall(
        "SELECT id, namespace, kind, source, heading, text, tags, importance, pinned, deleted_at "
        "FROM chunks ORDER BY id"
    )
    links = mem.db.fetchall("SELECT * FROM links ORDER BY ALL")
    docs = mem.db.fetchall("SELECT id, path, namespace FROM documents ORDER BY id")
    return hashlib.sha256(repr((rows, links, docs)).encode("utf-8", "surrogatepass")).hexdigest()


# -- generated values ------------------------------------------------------------------------------
SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
ODD_TEXT = st.one_of(
    st.text(max_size=40),
    st.text(st.characters(codec=None) | SURROGATES, max_size=20),
    st.sampled_from(
        [
            "",
            " ",
            "\x00",
            "a\x00b",
            "\ud800",
            "x\udfffy",
            "*",
            "%",
            "_",
            "'; DROP TABLE chunks; --",
            "../../etc/passwd",
            "~",
            "30d",
            "-1d",
            "2026-13-45",
            "9999-12-31",
            "0000-00-00",
            "1e309",
            "nan",
            "\u202e",
            "😀" * 3,
        ]
    ),
    # Huge, but not so huge that every accepted write slows the rest of the run.
    st.builds(lambda n, c: c * n, st.sampled_from([5_000, 100_000]), st.sampled_from(["a", "é ", "\x00"])),
)
ODD_NUMBER = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 1, 2**31, 2**63 - 1, 2**63, -(2**63), 2**64, 10**100]),
    st.floats(allow_nan=True, allow_infinity=True),
)
SCALAR = st.one_of(st.none(), st.booleans(), ODD_NUMBER, ODD_TEXT)
JSONISH = st.recursive(
    SCALAR,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)


# -- the MCP tools ---------------------------------------------------------------------------------
TOOL_ARGS: dict[str, list[str]] = {
    "search": ["query", "k", "namespace", "kind", "path", "tags", "since", "until", "speaker", "conversation",
               "full_text"],
    "remember": ["text", "tags", "importance", "namespace", "at", "speaker", "conversation"],
    "forget": ["ids", "query", "k", "dry_run", "namespace"],
    "get": ["id"],
    "related": ["id", "k", "namespace"],
    "context": ["query", "budget", "k", "namespace", "kind", "path", "tags", "since", "until", "speaker",
                "conversation"],
    "stats": [],
    "index": ["paths", "namespace"],
}
REQUIRED = {"query", "text", "id", "paths"}
WORDS = st.lists(
    st.sampled_from(["kafka", "lag", "vpn", "deploys", "staging", "note", "x"]), min_size=1, max_size=3
)
#: Values of the right shape, so that generated calls reach past the schema into the memory.
PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "query": WORDS.map(" ".join) | ODD_TEXT,
    "text": WORDS.map(" ".join) | ODD_TEXT,
    "k": st.integers(-2, 120) | ODD_NUMBER,
    "budget": ODD_NUMBER,
    "id": st.integers(0, 12) | ODD_NUMBER,
    "ids": st.lists(st.integers(0, 12) | ODD_NUMBER, max_size=4),
    "importance": ODD_NUMBER,
    "namespace": st.none() | ODD_TEXT,
    "kind": st.none() | st.lists(st.sampled_from(["markdown", "memory", "code", "nope", ""]), max_size=3),
    "path": st.none() | ODD_TEXT,
    "paths": st.lists(ODD_TEXT, max_size=3),
    "tags": st.lists(ODD_TEXT, max_size=3),
    "since": st.none() | ODD_TEXT,
    "until": st.none() | ODD_TEXT,
    "at": st.none() | st.sampled_from(["2023-05-08T13:56", "2023-05-08T13:56:00+02:00", "yesterday-ish"]) | ODD_TEXT,
    "speaker": st.none() | st.sampled_from(["user", "Caroline"]) | ODD_TEXT,
    "conversation": st.none() | ODD_TEXT,
    "full_text": st.booleans(),
    "dry_run": st.none() | st.booleans(),
}


@st.composite
def tool_calls(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    name = draw(st.sampled_from(sorted(TOOL_ARGS)))
    args: dict[str, Any] = {}
    for arg in TOOL_ARGS[name]:
        # Mostly left out or well typed, so that many calls get past the schema into the memory.
        how = draw(st.sampled_from(["leave out", "leave out", "plausible", "plausible", "junk"]))
        if arg in REQUIRED and how == "leave out" and draw(st.integers(0, 4)):
            how = "plausible"
        if how == "plausible":
            args[arg] = draw(PLAUSIBLE[arg])
        elif how == "junk":
            args[arg] = draw(JSONISH)
    if draw(st.integers(0, 9)) == 0:
        args[draw(st.text(max_size=10))] = draw(JSONISH)  # an argument no tool has
    return name, args


@pytest.fixture(scope="module")
def fuzz_memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SharedMemory, Path]]:
    """The memory every front end gets (``connect()``, this process its owner), and a notes folder."""
    folder = tmp_path_factory.mktemp("fuzz")
    root = folder / "notes"
    root.mkdir()
    (root / "ops.md").write_text("# Ops\n\nthe staging database is db-stg-12\n", encoding="utf-8")
    shared = connect(folder / "fuzz.duckdb", embedder=FakeEmbedder(dim=32))
    try:
        assert shared.role == "owner"
        shared.remember_many([f"note {i}: kafka consumer lag and the vpn for deploys" for i in range(8)])
        shared.index(root)
        yield shared, root
    finally:
        shared.close()


def test_mcp_tools_answer_or_refuse_clearly_whatever_the_arguments(
    fuzz_memory: tuple[SharedMemory, Path],
) -> None:
    mem, root = fuzz_memory
    tools = MemoryTools(lambda: mem, Policy.create(roots=[str(root)]))  # type: ignore[arg-type,return-value]
    server = build_server(tools)

    @FUZZ
    @given(call=tool_calls())
    def door(call: tuple[str, dict[str, Any]]) -> None:
        name, args = call
        where = "mcp tools"
        count(where)
        before = store_hash(mem)
        try:
            # The agent's path: the SDK validates the arguments against the schema, then the tool runs.
            anyio.run(server.call_tool, name, args)
            outcome(where, f"{name}: answered")
        except ToolError as exc:
            outcome(where, f"{name}: refused")
            message = str(exc)
            assert message.strip() and "Traceback" not in message, message
            assert store_hash(mem) == before, f"{name} {args!r} was refused but changed the store"

    door()


@st.composite
def direct_calls(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    # Direct calls get no schema check: values of the right type only, with hostile content.
    name = draw(st.sampled_from(["search", "remember", "forget", "get", "related", "context", "index"]))
    typed: dict[str, st.SearchStrategy[Any]] = {
        "query": ODD_TEXT,
        "text": ODD_TEXT,
        "k": st.integers(-(2**70), 2**70),
        "budget": st.integers(-(2**40), 2**40),
        "id": st.integers(-(2**70), 2**70),
        "ids": st.lists(st.integers(-(2**70), 2**70), max_size=3),
        "importance": st.floats(allow_nan=True, allow_infinity=True),
        "namespace": st.none() | ODD_TEXT,
        "kind": st.none() | st.lists(st.sampled_from(["markdown", "memory", "nope"]), max_size=2),
        "path": st.none() | ODD_TEXT,
        "paths": st.lists(ODD_TEXT, max_size=2),
        "tags": st.lists(ODD_TEXT, max_size=3),
        "since": st.none() | ODD_TEXT,
        "until": st.none() | ODD_TEXT,
        "dry_run": st.none() | st.booleans(),
    }
    args = {a: draw(typed[a]) for a in TOOL_ARGS[name] if a in typed and draw(st.booleans())}
    if name in ("get", "related"):
        args["id"] = draw(typed["id"])
    if name in ("remember",):
        args["text"] = draw(ODD_TEXT)
    if name in ("search", "context"):
        args["query"] = draw(ODD_TEXT)
    if name == "index":
        args["paths"] = draw(typed["paths"])
    return name, args


def test_mcp_tool_functions_called_directly_answer_or_refuse_clearly(
    fuzz_memory: tuple[SharedMemory, Path],
) -> None:
    mem, root = fuzz_memory
    tools = MemoryTools(lambda: mem, Policy.create(namespace="default", roots=[str(root)]))  # type: ignore[arg-type,return-value]

    @FUZZ_WRITES
    @given(call=direct_calls())
    @example(call=("index", {"paths": []}))  # found here: a KeyError in the shared memory's proxy
    @example(call=("index", {"paths": ["a" * 5000]}))  # found here: OSError (name too long) escaped
    def door(call: tuple[str, dict[str, Any]]) -> None:
        name, args = call
        where = "mcp tool functions"
        count(where)
        before = store_hash(mem)
        try:
            getattr(tools, name)(**args)
            outcome(where, f"{name}: answered")
        except ToolError as exc:
            outcome(where, f"{name}: refused")
            assert str(exc).strip(), name
            assert store_hash(mem) == before, f"{name} {args!r} was refused but changed the store"

    door()


# -- the magics' argument parser -------------------------------------------------------------------
MAGICS = [
    magics.MemoryMagics.memsearch,
    magics.MemoryMagics.memrelated,
    magics.MemoryMagics.memcontext,
    magics.MemoryMagics.remember,
    magics.MemoryMagics.memforget,
    magics.MemoryMagics.memupdate,
    magics.MemoryMagics.memlink,
    magics.MemoryMagics.memindex,
]
WORDS = st.sampled_from(
    ["-k", "--ns", "--json", "--explain", "--tag", "--importance", "--query", "--yes", "--path", "--text",
     "--pin", "--unpin", "--type", "--note", "--budget", "-", "--", "'", '"', "\\", "don't", "3", "-5",
     "1e9", "nan", "99999999999999999999999", "{x}", "$x", ";", "*"]
)  # fmt: skip
LINES = st.lists(WORDS | ODD_TEXT.filter(lambda t: len(t) < 1000), max_size=8).map(" ".join)


@FUZZ
@given(line=LINES, magic=st.sampled_from(MAGICS))
def test_magic_argument_parsing_gives_arguments_or_a_usage_error(
    line: str, magic: Callable[..., Any]
) -> None:
    # Parse only (no kernel): the entry point every %mem* magic calls first.
    count("magics parser")
    try:
        magic_lines.parse_line(magic, line)
        outcome("magics parser", "parsed")
    except UsageError as exc:
        outcome("magics parser", "usage error")
        assert str(exc).strip()


# -- the command line ------------------------------------------------------------------------------
class _Shared:
    """The fuzz memory handed to each command as `_memory` would hand it, left open after."""

    def __init__(self, mem: SharedMemory) -> None:
        self.mem = mem

    def __enter__(self) -> SharedMemory:
        return self.mem

    def __exit__(self, *exc: object) -> None:
        return None


#: Commands that return (no server, no watcher, no model download, no training).
CLI_COMMANDS: dict[str, list[str]] = {
    "search": ["-k", "--ns", "--kind", "--tag", "--path", "--since", "--until", "--speaker", "--conversation",
               "--explain", "--json", "--chunks", "--retrievers"],
    "remember": ["--tag", "--importance", "--ns", "--at", "--speaker", "--conversation"],
    "forget": ["--query", "-k", "--path", "--ns", "--yes"],
    "get": ["--json"],
    "update": ["--text", "--tag", "--importance", "--pin", "--no-pin", "--at", "--speaker", "--conversation"],
    "related": ["-k", "--ns"],
    "link": ["--type", "--note"],
    "stats": ["--json"],
    "export": ["--include-forgotten"],
    "index": ["--ns"],
}  # fmt: skip
CLI_VALUES = st.one_of(
    ODD_TEXT.filter(lambda t: "\x00" not in t and len(t) < 5000),
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["nan", "inf", "-inf", "1e400", "0", "-0", "0.5", "markdown", "supersedes", "-", "--"]),
)


@st.composite
def cli_argvs(draw: st.DrawFn, out: Path) -> list[str]:
    command = draw(st.sampled_from(sorted(CLI_COMMANDS)))
    argv = [command]
    if draw(st.integers(0, 2)):
        # A well-shaped start (the positional arguments), so that many runs reach the command.
        item = st.integers(-1, 12).map(str)
        argv += {
            "search": [draw(WORDS.map(" ".join))],
            "remember": [draw(WORDS.map(" ".join) | st.just("-"))],
            "get": [draw(item)],
            "update": [draw(item)],
            "related": [draw(item)],
            "link": [draw(item), draw(item)],
            "forget": [draw(item)],
        }.get(command, [])
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.booleans()) and CLI_COMMANDS[command]:
            argv.append(draw(st.sampled_from(CLI_COMMANDS[command])))
        value = draw(CLI_VALUES)
        if command in ("index", "export"):
            # Paths only inside the test's folder: a generated "/" must not index the machine.
            value = str(
                out
                / draw(st.sampled_from(["notes", "missing", "out.csv", "out.jsonl", "out.txt", "n" * 5000]))
            )
        argv.append(value)
    return argv


def streams() -> tuple[io.TextIOWrapper, io.TextIOWrapper]:
    """Standard output and error as a process under a UTF-8 locale has them: output strict,
    errors with backslash escapes (so a lone surrogate can be shown there, not on stdout)."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace")
    return out, err


def written(stream: io.TextIOWrapper) -> str:
    stream.flush()
    return stream.buffer.getvalue().decode("utf-8")  # type: ignore[attr-defined]


def test_cli_exits_with_a_message_whatever_the_arguments(
    fuzz_memory: tuple[SharedMemory, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    mem, root = fuzz_memory
    # In process, as tests/test_cli.py runs it, on the fuzz memory.
    monkeypatch.setattr(sys.modules["nbmemory.cli.main"], "_memory", lambda args, **kw: _Shared(mem))

    @FUZZ_WRITES
    @given(argv=cli_argvs(root.parent), stdin=ODD_TEXT)
    def door(argv: list[str], stdin: str) -> None:
        count("cli")
        before = store_hash(mem)
        out, err = streams()
        with monkeypatch.context() as mp:
            mp.setattr(sys, "stdin", io.StringIO(stdin))
            mp.setattr(sys, "stdout", out)
            mp.setattr(sys, "stderr", err)
            try:
                code = cli_main(["-q", *argv])
            except SystemExit as exc:  # argparse: a usage message and status 2
                code = exc.code if isinstance(exc.code, int) else 2
                assert code == 2 and "error:" in written(err)
        outcome("cli", f"{argv[0]}: exit {code}")
        if code != 0:
            assert "error: " in written(err), written(err)
            assert store_hash(mem) == before, f"{argv!r} failed but changed the store"

    door()


def test_fuzz_cases_ran() -> None:
    print("fuzz cases per door: " + json.dumps(CASES, sort_keys=True))
    for door, seen in sorted(OUTCOMES.items()):
        print(f"  {door}: " + json.dumps(dict(sorted(seen.items()))))
    assert all(n > 0 for n in CASES.values()) and not math.isnan(sum(CASES.values()))
