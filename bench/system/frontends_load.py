"""Every front end on one memory with the real model: two kernels, the Jupyter server, the MCP
server and the CLI, writing, forgetting and searching at once; prints JSON (``--out`` also writes it).

    python -m bench.system.frontends_load --seconds 600 --out bench/results/frontends-load.json
    python -m bench.system.frontends_load --seconds 45 --pause 0.5 --dir /tmp/fl --keep   # a short trial

One memory file (``NBMEMORY_HOME`` in a new folder), the bundled model, real processes:

- a Jupyter server (``python -m jupyter_server`` with the nbmemory extension, token auth), driven
  over the REST routes the sidebar uses (``POST /nbmemory/remember``, ``GET /nbmemory/search``,
  ``DELETE /nbmemory/items/ID``); it is started first and opens the memory, so it owns the file;
- two IPython kernels (``jupyter_client``) running the magics a user types (``%load_ext nbmemory``,
  ``%remember``, ``%memsearch``, ``%memforget``);
- ``nbmemory mcp --http PORT`` with a bearer token, driven by the ``mcp`` SDK's streamable HTTP
  client (the ``remember``, ``search`` and ``forget`` tools);
- ``nbmemory remember`` / ``search`` / ``forget`` processes, one per operation.

Each actor loops until ``--seconds`` have passed: it picks search, remember or forget (``--mix``),
runs it, records its latency (for the CLI, the whole process) and any error, then sleeps
``--pause`` seconds (the real model embeds every write and every query on the owner). Every write
carries a unique token; an acknowledged write is its id and its token. A share of the searches
(``--recheck``) look for the text of a recent write of any actor, which the memory promises the
very next search finds, whichever process wrote it. At the end every process is stopped cleanly
(clients first, the owner last), the file is opened here and checked: each acknowledged write
present exactly once under its id (an exact match on the chunks' text), each acknowledged forget
forgotten, ``doctor`` ok. Latencies are wall-clock on a machine other work
shares: the load average is sampled throughout and reported with them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.system.load_bench import WORDS

REPO = Path(__file__).resolve().parents[2]
KINDS = ("remember", "search", "forget")
DEFAULT_MIX = "search=50,remember=40,forget=10"
ACTORS = ("kernel1", "kernel2", "server", "mcp", "cli")
#: Seconds one operation may take before it counts as an error (the model on a loaded machine).
OP_TIMEOUT = 300.0


# -- what each actor records --------------------------------------------------------------------


@dataclass
class Record:
    """One actor's operations: latencies per kind, errors, acknowledged writes and forgets."""

    actor: str
    frontend: str
    latencies: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    errors: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    messages: list[str] = field(default_factory=list)
    #: token -> (id, text) of every acknowledged write
    written: dict[str, tuple[int, str]] = field(default_factory=dict)
    forgotten: list[int] = field(default_factory=list)
    #: every forget sent, answered or not
    forget_tried: list[int] = field(default_factory=list)
    #: searches for a recent acknowledged write's text (any actor's), and those that missed it
    read_checks: int = 0
    read_misses: list[str] = field(default_factory=list)
    #: (kind, ms) of the actor's first operations, which include its front end's first-use costs
    first_ops: list[tuple[str, float]] = field(default_factory=list)

    def error(self, kind: str, message: str) -> None:
        self.errors[kind] += 1
        if len(self.messages) < 20:
            self.messages.append(f"{kind}: {message}"[:500])


class Recent:
    """The actors' latest acknowledged writes and every forget sent, shared by their threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.writes: list[tuple[str, int, str]] = []  # (actor, id, text), the latest 50
        self.forgets: set[int] = set()

    def wrote(self, actor: str, item_id: int, text: str) -> None:
        with self.lock:
            self.writes = [*self.writes[-49:], (actor, item_id, text)]

    def pick(self, rng: random.Random) -> tuple[str, int, str] | None:
        with self.lock:
            live = [w for w in self.writes if w[1] not in self.forgets]
        return rng.choice(live) if live else None


class OpError(Exception):
    """An operation answered, but not with what it should have."""


# -- the front ends ---------------------------------------------------------------------------


class Actor:
    """A front end as a user or an agent drives it: remember, search, forget."""

    frontend = ""

    def remember(self, text: str) -> int:
        raise NotImplementedError

    def search(self, query: str, ids: bool = False) -> list[int]:
        """Search as this front end's user does; the hits' ids when ``ids`` (else possibly [])."""
        raise NotImplementedError

    def forget(self, item_id: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Let go of the front end (a client's connection, a kernel)."""


def _single_id(text: str, pattern: str, what: str) -> int:
    match = re.search(pattern, text)
    if match is None:
        raise OpError(f"{what}: unexpected output {text[-300:]!r}")
    return int(match.group(1))


class KernelActor(Actor):
    """An IPython kernel running the ``%mem*`` magics, as a notebook's cells would."""

    frontend = "kernel"

    def __init__(self, env: dict[str, str], cwd: Path, log: Path) -> None:
        from jupyter_client.manager import KernelManager

        self.log = log.open("ab")
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(env=env, cwd=str(cwd), stdout=self.log, stderr=self.log)
        self.kc = self.km.blocking_client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=300)
        self.imports_from = self.run("import nbmemory; print(nbmemory.__file__)").strip()
        self.run("%load_ext nbmemory")
        stats = json.loads(self.run("%memstats --json"))
        self.role = stats.get("role")

    def run(self, code: str) -> str:
        """Run one cell; its printed output, or OpError with the cell's error."""
        out: list[str] = []
        errors: list[str] = []
        results: list[dict[str, Any]] = []

        def hook(msg: dict[str, Any]) -> None:
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                (errors if content["name"] == "stderr" else out).append(content["text"])
            elif kind == "error":
                errors.append(f"{content['ename']}: {content['evalue']}")
            elif kind == "execute_result":
                results.append(content["data"])

        reply = self.kc.execute_interactive(code, timeout=OP_TIMEOUT, output_hook=hook, allow_stdin=False)
        if reply["content"]["status"] != "ok" or errors:
            content = reply["content"]
            detail = "".join(errors) or f"{content.get('ename')}: {content.get('evalue')}"
            raise OpError(f"{code[:60]!r}: {detail.strip()}")
        self.last_results = results
        return "".join(out)

    def remember(self, text: str) -> int:
        return _single_id(self.run(f"%remember --tag load {text}"), r"remembered #(\d+)", "%remember")

    def search(self, query: str, ids: bool = False) -> list[int]:
        if ids:
            return [h["id"] for h in json.loads(self.run(f"%memsearch -k 10 --json {query}"))["hits"]]
        self.run(f"%memsearch -k 5 {query}")
        if not self.last_results:
            raise OpError(f"%memsearch {query!r} displayed nothing")
        return []

    def forget(self, item_id: int) -> None:
        out = self.run(f"%memforget {item_id}")
        if f"forgot 1 item(s): {item_id}" not in out:
            raise OpError(f"%memforget {item_id}: {out.strip()!r}")

    def close(self) -> None:
        self.kc.stop_channels()
        # A shutdown request: the kernel exits normally and its connection is closed at exit.
        self.km.shutdown_kernel(now=False)
        self.log.close()


class RestActor(Actor):
    """The Jupyter server extension's REST routes, as the JupyterLab sidebar calls them."""

    frontend = "server"

    def __init__(self, base: str, token: str) -> None:
        self.base, self.token = base, token

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """``method`` on ``/nbmemory/<path>`` (``/<path>`` when it starts with a slash): the JSON reply."""
        request = urllib.request.Request(
            self.base + (path if path.startswith("/") else f"/nbmemory/{path}"),
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=OP_TIMEOUT) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise OpError(f"{method} {path}: HTTP {exc.code} {exc.read()[:300]!r}") from None

    def remember(self, text: str) -> int:
        return int(self.call("POST", "remember", {"text": text, "tags": ["load"]})["id"])

    def search(self, query: str, ids: bool = False) -> list[int]:
        found = self.call("GET", "search?" + urllib.parse.urlencode({"q": query, "k": 10 if ids else 5}))
        return [h["id"] for h in found["hits"]]

    def forget(self, item_id: int) -> None:
        forgotten = self.call("DELETE", f"items/{item_id}")["forgotten"]
        if forgotten != [item_id]:
            raise OpError(f"DELETE items/{item_id} forgot {forgotten}")


class McpActor(Actor):
    """An agent on ``nbmemory mcp --http``: the SDK's streamable HTTP client with the bearer token."""

    frontend = "mcp"

    def __init__(self, url: str, token: str) -> None:
        from anyio.from_thread import start_blocking_portal
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        self.stack = contextlib.ExitStack()
        portal = self.stack.enter_context(start_blocking_portal())
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        client = Client(streamable_http_client(url, http_client=http))
        self.client = self.stack.enter_context(portal.wrap_async_context_manager(client))
        self.portal = portal
        # What an agent does first; the SDK's first call also imports jsonschema to check
        # structured output (seconds on a loaded machine, in this process, not the server's).
        portal.call(self.client.list_tools)
        self.tool("stats", {})

    def tool(self, name: str, arguments: dict[str, Any]) -> Any:
        result = self.portal.call(self.client.call_tool, name, arguments)
        if result.is_error:
            raise OpError(f"{name}: {result.content}"[:500])
        return result.structured_content

    def remember(self, text: str) -> int:
        return int(self.tool("remember", {"text": text, "tags": ["load"]})["item"]["id"])

    def search(self, query: str, ids: bool = False) -> list[int]:
        return [h["id"] for h in self.tool("search", {"query": query, "k": 10 if ids else 5})["hits"]]

    def forget(self, item_id: int) -> None:
        forgotten = self.tool("forget", {"ids": [item_id], "dry_run": False})["forgotten"]
        if forgotten != [item_id]:
            raise OpError(f"forget ids=[{item_id}] forgot {forgotten}")

    def close(self) -> None:
        self.stack.close()


class CliActor(Actor):
    """``nbmemory`` commands in a terminal: one process per operation."""

    frontend = "cli"

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.env, self.cwd = env, cwd

    def run(self, *argv: str) -> str:
        try:
            done = subprocess.run(
                [sys.executable, "-m", "nbmemory.cli", "-q", *argv],
                capture_output=True,
                text=True,
                env=self.env,
                cwd=self.cwd,
                timeout=OP_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            raise OpError(f"nbmemory {argv[0]}: no answer in {OP_TIMEOUT:g} s") from None
        if done.returncode != 0 or "Traceback" in done.stderr:
            raise OpError(f"nbmemory {argv[0]}: rc={done.returncode} {done.stderr[-300:]!r}")
        return done.stdout

    def remember(self, text: str) -> int:
        return _single_id(self.run("remember", text, "--tag", "load"), r"remembered #(\d+)", "remember")

    def search(self, query: str, ids: bool = False) -> list[int]:
        if ids:
            return [h["id"] for h in json.loads(self.run("search", query, "-k", "10", "--json"))["hits"]]
        self.run("search", query, "-k", "5")
        return []

    def forget(self, item_id: int) -> None:
        out = self.run("forget", str(item_id))
        if f"forgot 1 item(s): {item_id}" not in out:
            raise OpError(f"nbmemory forget {item_id}: {out.strip()!r}")


# -- one actor's loop --------------------------------------------------------------------------


def drive_actor(
    actor: Actor,
    record: Record,
    recent: Recent,
    run_id: str,
    seed: int,
    end: float,
    pause: float,
    mix: dict[str, float],
    recheck: float,
) -> None:
    """Operations until ``end``: the mix's pick, timed, then a pause.

    A ``recheck`` share of the searches look for the text of a recent acknowledged write (any
    actor's): the memory promises that the very next search finds it, whichever process wrote it.
    """
    rng = random.Random(seed)
    kinds, weights = list(mix), list(mix.values())
    live: list[int] = []  # this actor's acknowledged, not yet forgotten items
    n = 0
    first = ["remember", "search"]
    while time.time() < end:
        # A remember and a search first: even a short run sees each front end write and read.
        kind = first.pop(0) if first else rng.choices(kinds, weights)[0]
        if kind == "forget" and not live:
            kind = "remember"
        started = time.perf_counter()
        try:
            if kind == "remember":
                n += 1
                token = f"lt{run_id}-{record.actor}-{n:05d}"
                words = " ".join(rng.choices(WORDS, k=rng.randrange(6, 20)))
                text = f"{record.actor} note {n}: {words} (ref {token})"
                item_id = actor.remember(text)
                record.written[token] = (item_id, text)
                recent.wrote(record.actor, item_id, text)
                live.append(item_id)
            elif kind == "search":
                target = recent.pick(rng) if rng.random() < recheck else None
                if target is None:
                    actor.search(" ".join(rng.choices(WORDS, k=rng.randrange(1, 5))))
                else:
                    record.read_checks += 1
                    found = actor.search(target[2], ids=True)
                    with recent.lock:
                        forgotten = target[1] in recent.forgets  # since: not a miss
                    if target[1] not in found and not forgotten:
                        record.read_misses.append(f"#{target[1]} written by {target[0]}: got {found}")
            else:
                item_id = live.pop(rng.randrange(len(live)))
                record.forget_tried.append(item_id)
                with recent.lock:
                    recent.forgets.add(item_id)
                actor.forget(item_id)
                record.forgotten.append(item_id)
        except Exception as exc:  # counted and reported, never hidden
            record.error(kind, f"{type(exc).__name__}: {exc}")
        ms = round((time.perf_counter() - started) * 1000, 1)
        record.latencies[kind].append(ms)
        if len(record.first_ops) < 3:
            record.first_ops.append((kind, ms))
        time.sleep(pause)


# -- the processes ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(what: str, ready: Callable[[], bool], proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 300
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start:\n" + log.read_text(errors="replace")[-3000:])
        time.sleep(0.5)


def start_server(env: dict[str, str], root: Path, log: Path) -> tuple[subprocess.Popen[bytes], RestActor]:
    port, token = free_port(), secrets.token_hex(16)
    argv = [
        sys.executable,
        "-m",
        "jupyter_server",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.jpserver_extensions={'nbmemory': True}",
        *(["--allow-root"] if os.getuid() == 0 else []),
    ]
    proc = subprocess.Popen(argv, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, cwd=root)
    rest = RestActor(f"http://127.0.0.1:{port}", token)

    def up() -> bool:
        try:
            rest.call("GET", "stats")  # also opens the memory: the server becomes its owner
            return True
        except (OSError, OpError):
            return False

    wait_for("the Jupyter server", up, proc, log)
    return proc, rest


def start_mcp(env: dict[str, str], cwd: Path, log: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    port, token = free_port(), secrets.token_urlsafe(32)
    argv = [sys.executable, "-m", "nbmemory.cli", "mcp", "--http", str(port)]
    proc = subprocess.Popen(
        argv,
        env={**env, "NBMEMORY_MCP_TOKEN": token},
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        cwd=cwd,
    )

    def up() -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) == 0

    wait_for("nbmemory mcp --http", up, proc, log)
    return proc, f"http://127.0.0.1:{port}/mcp", token


def stop(proc: subprocess.Popen[bytes], how: Callable[[], None], timeout: float = 120) -> str:
    """Stop a process the way its user would; how it ended ("clean", or what it took)."""
    if proc.poll() is not None:
        return f"had exited (rc={proc.returncode})"
    with contextlib.suppress(Exception):
        how()
    try:
        rc = proc.wait(timeout=timeout)
        return "clean" if rc in (0, -signal.SIGTERM, -signal.SIGINT) else f"rc={rc}"
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return f"killed after {timeout:g} s"


def close(actor: Actor) -> str:
    """Close one actor; "clean" or what went wrong."""
    try:
        actor.close()
        return "clean"
    except Exception as exc:  # reported
        return f"{type(exc).__name__}: {exc}"[:300]


# -- the check at the end ---------------------------------------------------------------------


def check_store(db: Path, records: list[Record]) -> dict[str, Any]:
    """Open the file (no other process holds it now) and account for every acknowledged write."""
    from nbmemory import Memory

    lost: list[str] = []
    duplicates: list[str] = []
    wrong_id: list[str] = []
    unforgotten: list[int] = []
    forgotten_ids = {i for r in records for i in r.forgotten}
    tried = {i for r in records for i in r.forget_tried}
    with Memory(db) as mem:
        for record in records:
            for token, (item_id, text) in record.written.items():
                rows = mem.db.fetchall("SELECT id, deleted_at FROM chunks WHERE text = ?", [text])
                if not rows:
                    lost.append(f"{token} (#{item_id})")
                elif len(rows) > 1:
                    duplicates.append(f"{token}: {[r[0] for r in rows]}")
                elif int(rows[0][0]) != item_id:
                    wrong_id.append(f"{token}: acknowledged #{item_id}, stored #{rows[0][0]}")
                elif (rows[0][1] is not None) != (item_id in forgotten_ids):
                    if item_id in forgotten_ids:
                        unforgotten.append(item_id)
                    elif item_id not in tried:  # a forget that reported an error may have run
                        lost.append(f"{token} (#{item_id} forgotten without a forget)")
        # Writes that errored may still have been stored: reported, not counted as lost.
        acknowledged = {text for r in records for _, text in r.written.values()}
        stored = {t for (t,) in mem.db.fetchall("SELECT text FROM chunks WHERE text LIKE '% (ref lt%'")}
        doctor = mem.doctor()
        items = mem.stats()["items"]
    return {
        "acknowledged_writes": sum(len(r.written) for r in records),
        "acknowledged_forgets": len(forgotten_ids),
        "lost_writes": len(lost),
        "lost": lost[:20],
        "duplicates": len(duplicates),
        "duplicate_examples": duplicates[:20],
        "wrong_ids": wrong_id[:20],
        "unforgotten": unforgotten[:20],
        "stored_without_acknowledgement": len(stored - acknowledged),
        "live_items_at_end": items,
        "doctor_ok": doctor.ok,
        "doctor": doctor.summary(),
    }


# -- the run ------------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def dist(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50_ms": pct(values, 0.5),
        "p95_ms": pct(values, 0.95),
        "p99_ms": pct(values, 0.99),
        "max_ms": max(values) if values else None,
    }


def machine() -> dict[str, Any]:
    import duckdb

    names = [
        line.split(":", 1)[1].strip()
        for line in Path("/proc/cpuinfo").read_text().splitlines()
        if line.startswith("model name")
    ]
    return {
        "cpu_count": os.cpu_count(),
        "cpu": names[0] if names else platform.processor(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "duckdb": duckdb.__version__,
    }


def _mix(spec: str) -> dict[str, float]:
    mix = {}
    for part in spec.split(","):
        name, _, weight = part.partition("=")
        if name.strip() not in KINDS:
            raise SystemExit(f"unknown operation {name!r} in --mix: use {', '.join(KINDS)}")
        mix[name.strip()] = float(weight)
    return mix


@contextlib.contextmanager
def sampling(every: float) -> Iterator[list[dict[str, Any]]]:
    """The load average every ``every`` seconds while the block runs."""
    samples: list[dict[str, Any]] = []
    done = threading.Event()
    t0 = time.time()

    def sample() -> None:
        while True:
            samples.append({"t": round(time.time() - t0), "load": [round(x, 2) for x in os.getloadavg()]})
            if done.wait(every):
                return

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        done.set()
        thread.join()


def run(args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(args.dir or tempfile.mkdtemp(prefix="nbm-frontends-"))
    folder.mkdir(parents=True, exist_ok=True)
    home, root, logs = folder / "home", folder / "root", folder / "logs"
    for path in (home, root, logs):
        path.mkdir(mode=0o700, exist_ok=True)  # owner-only, as nbmemory keeps its home
    db = home / "memory.duckdb"
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {
        **os.environ,
        "PYTHONPATH": pythonpath,  # every process imports this checkout's nbmemory
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "NBMEMORY_HOME": str(home),
        "NBMEMORY_RUNTIME_DIR": str(folder / "run"),
        "JUPYTER_CONFIG_DIR": str(folder / "jconfig"),
        "JUPYTER_DATA_DIR": str(folder / "jdata"),
        "JUPYTER_RUNTIME_DIR": str(folder / "jrun"),
        "IPYTHONDIR": str(folder / "ipython"),
    }
    os.environ.update({k: env[k] for k in ("NBMEMORY_HOME", "NBMEMORY_RUNTIME_DIR", "HF_HUB_OFFLINE")})
    mix = _mix(args.mix)
    names = [a for a in args.actors.split(",") if a]
    unknown = sorted(set(names) - set(ACTORS))
    if unknown:
        raise SystemExit(f"unknown actor {unknown[0]!r} in --actors: use {', '.join(ACTORS)}")
    run_id = secrets.token_hex(2)
    started_at = time.time()
    stops: dict[str, str] = {}
    setup: dict[str, Any] = {}
    with sampling(args.sample) as load:
        t_setup = time.perf_counter()
        actors: dict[str, Actor] = {}
        server: subprocess.Popen[bytes] | None = None
        mcp_proc: subprocess.Popen[bytes] | None = None
        try:
            # The process that opens the memory first owns the file (--owner): the server opens
            # it on its first request, a kernel on its first magic, the CLI starts a background owner.
            if args.owner == "kernel1":
                actors["kernel1"] = KernelActor(env, root, logs / "kernel1.log")
            elif args.owner == "cli":
                setup["cli_first"] = CliActor(env, root).run("stats").strip().splitlines()[:1]
            server, rest = start_server(env, root, logs / "server.log")
            setup["server_role"] = rest.call("GET", "stats")["role"]
            # The owner loads the model on its first embedding: done before the clock starts.
            warm = time.perf_counter()
            rest.search("warm up")
            setup["first_search_s"] = round(time.perf_counter() - warm, 1)
            mcp_proc, mcp_url, mcp_token = start_mcp(env, root, logs / "mcp.log")
            for name in names:
                if name.startswith("kernel"):
                    kernel = actors.get(name) or KernelActor(env, root, logs / f"{name}.log")
                    assert isinstance(kernel, KernelActor)
                    setup[f"{name}_role"] = kernel.role
                    setup[f"{name}_imports"] = kernel.imports_from
                    actors[name] = kernel
                elif name == "server":
                    actors[name] = rest
                elif name == "mcp":
                    actors[name] = McpActor(mcp_url, mcp_token)
                else:
                    actors[name] = CliActor(env, root)
            setup["cli_imports"] = subprocess.run(
                [sys.executable, "-c", "import nbmemory; print(nbmemory.__file__)"],
                capture_output=True, text=True, env=env, cwd=root, check=True,
            ).stdout.strip()  # fmt: skip
            setup["seconds"] = round(time.perf_counter() - t_setup, 1)
            records = [Record(name, actors[name].frontend) for name in names]
            recent = Recent()
            end = time.time() + args.seconds
            threads = [
                threading.Thread(
                    target=drive_actor,
                    args=(actors[r.actor], r, recent, run_id, i, end, args.pause, mix, args.recheck),
                    name=r.actor,
                )
                for i, r in enumerate(records)
            ]
            t_run = time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            elapsed = time.perf_counter() - t_run
        finally:
            # Clients first, the owner last: nobody fails over to the file while it closes.
            owner = actors.get(args.owner)
            for name, actor in actors.items():
                if name != "server" and actor is not owner:
                    stops[name] = close(actor)
            if mcp_proc is not None:
                stops["mcp_server"] = stop(mcp_proc, mcp_proc.terminate)
            if server is not None:
                stops["jupyter_server"] = stop(
                    server, lambda: rest.call("POST", "/api/shutdown"), timeout=120
                )
            if owner is not None and args.owner != "server":
                stops[args.owner] = close(owner)
            # The background owner of --owner cli (none otherwise: a CLI run finds the owner).
            stopped = subprocess.run(
                [sys.executable, "-m", "nbmemory.cli", "-q", "stop"],
                capture_output=True, text=True, env=env, cwd=root, timeout=120,
            )  # fmt: skip
            stops["nbmemory stop"] = (stopped.stdout + stopped.stderr).strip()[:300]
        store = check_store(db, records)
    tracebacks = {p.name: p.read_text(errors="replace").count("Traceback") for p in sorted(logs.iterdir())}
    result = _report(args, records, elapsed, store, load, setup, stops, tracebacks, started_at)
    result["folder"] = str(folder)
    if not args.keep and args.dir is None and result["errors_total"] == 0 and store["lost_writes"] == 0:
        shutil.rmtree(folder, ignore_errors=True)
        result["folder"] = None
    return result


def _report(
    args: argparse.Namespace,
    records: list[Record],
    elapsed: float,
    store: dict[str, Any],
    load: list[dict[str, Any]],
    setup: dict[str, Any],
    stops: dict[str, str],
    tracebacks: dict[str, int],
    started_at: float,
) -> dict[str, Any]:
    per_actor = {}
    for r in records:
        per_actor[r.actor] = {
            "frontend": r.frontend,
            "ops": {k: len(v) for k, v in r.latencies.items()},
            "errors": r.errors,
            "error_messages": r.messages,
            "acknowledged_writes": len(r.written),
            "forgotten": len(r.forgotten),
            "first_ops_ms": r.first_ops,
            "read_checks": r.read_checks,
            "read_misses": r.read_misses[:10],
            "latency": {k: dist(v) for k, v in r.latencies.items() if v},
        }
    frontends = sorted({r.frontend for r in records})
    by_frontend = {
        f: {k: dist([x for r in records if r.frontend == f for x in r.latencies[k]]) for k in KINDS}
        for f in frontends
    }
    ops = sum(len(v) for r in records for v in r.latencies.values())
    loads = [s["load"][0] for s in load]
    return {
        "command": "python -m bench.system.frontends_load " + " ".join(sys.argv[1:]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started_at)),
        "seconds": args.seconds,
        "seconds_measured": round(elapsed, 1),
        "model": "bundled all-MiniLM-L6-v2 (the default; no fake embedder)",
        "actors": [r.actor for r in records],
        "owner": args.owner,
        "mix": args.mix,
        "pause_s": args.pause,
        "ops_total": ops,
        "ops_per_s": round(ops / elapsed, 2) if elapsed else None,
        "errors_total": sum(sum(r.errors.values()) for r in records),
        "lost_writes": store["lost_writes"],
        "duplicates": store["duplicates"],
        "unforgotten": len(store["unforgotten"]),
        "read_after_write": {
            "checks": sum(r.read_checks for r in records),
            "misses": sum(len(r.read_misses) for r in records),
            "what": "searches for the text of a recent acknowledged write of any actor (k=10); a miss: "
            "the write not among the hits",
        },
        "doctor_ok": store["doctor_ok"],
        "latency_by_kind": {k: dist([x for r in records for x in r.latencies[k]]) for k in KINDS},
        "latency_by_frontend": by_frontend,
        "per_actor": per_actor,
        "store": store,
        "setup": setup,
        "stops": stops,
        "log_tracebacks": tracebacks,
        "load_average": {
            "note": "1-minute load average on 2 cores shared with other workers' jobs: latencies are "
            "wall-clock under this load",
            "min": min(loads) if loads else None,
            "mean": round(sum(loads) / len(loads), 2) if loads else None,
            "max": max(loads) if loads else None,
            "samples": load[:: max(1, len(load) // 40)],
        },
        "machine": machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600, help="load duration (default 600)")
    parser.add_argument(
        "--pause", type=float, default=1.0, help="seconds each actor sleeps between operations (default 1)"
    )
    parser.add_argument("--mix", default=DEFAULT_MIX, help=f"operation weights (default {DEFAULT_MIX})")
    parser.add_argument(
        "--actors", default=",".join(ACTORS), help=f"which actors run (default {','.join(ACTORS)})"
    )
    parser.add_argument(
        "--recheck",
        type=float,
        default=0.3,
        help="share of searches that look for a recent write's text (default 0.3)",
    )
    parser.add_argument(
        "--owner",
        choices=["server", "kernel1", "cli"],
        default="server",
        help="who opens the memory first and so owns the file: the Jupyter server (default), the "
        "first kernel, or a CLI run's background owner",
    )
    parser.add_argument("--sample", type=float, default=10, help="seconds between load samples (default 10)")
    parser.add_argument("--dir", help="folder for the memory, logs and runtime files (default: a new one)")
    parser.add_argument("--keep", action="store_true", help="keep the folder (kept anyway after a failure)")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    result = run(args)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
