"""The team memory (#53) on a real PostgreSQL catalog: latency across processes, concurrent writers,
search on a large team namespace beside a personal one, kill -9 during team writes.

    python -m bench.system.team_bench [--items 50000] [--clients 4] [--remembers 1000] [--batch 1]
        [--latency-samples 30] [--kills 5] [--queries 100] [--build-batch 1000] [--out FILE]
    python -m bench.system.team_bench --items 500 --remembers 40 --latency-samples 3 --kills 1 --out /tmp/t.json

It starts its own PostgreSQL cluster (``bench/lib/postgres.py``: Debian's binaries, a temporary
folder, PostgreSQL's durable defaults), makes one lake (a catalog database, a data folder on the
local disk) and drives it from real processes, each a ``Memory`` with a personal file of its own
and the team attached (``NBMEMORY_TEAM``), the writers with the writer role, the readers with the
read-only role. Every memory uses ``FakeEmbedder(dim=384)``: these are the team memory's
plumbing (catalog commits, the replica following the lake, the search of the replica), not the
model's speed.

1. **Latency across processes.** A writer process remembers a unique text into ``team:bench``
   while a reader process polls ``search`` (every 20 ms) until a hit has that text:
   remember-to-found is the time from the writer's acknowledgement to the reader's finding (the
   same machine's clock); then the writer forgets it and forget-to-gone is measured likewise.
   Before each write a random pause of up to a second, so writes land anywhere in the reader's
   refresh interval (a search asks the lake for new snapshots at most once a second).
2. **Concurrent remembers.** ``--clients`` processes, each with ``--remembers / clients`` unique
   texts, started together; ``--batch 1`` (the default) is one ``remember`` per text, more is
   ``remember_many`` of that many. Each acknowledged id is printed by its client; then the lake's
   rows are read: lost (acknowledged, absent or with another text) and duplicated (a text twice)
   must be 0. Throughput is acknowledged items over the wall time from start to the last client's end.
3. **Search.** ``--items`` texts remembered into ``team:bench`` (``remember_many`` of
   ``--build-batch``) and the same texts into a personal memory (no team): ``--queries`` searches,
   k=10, on the personal memory and on a member's memory searching ``namespace="team:bench"``
   (its personal file empty), alternating, after 10 warm-up searches each; then the personal
   memory opened with the team attached, searched with no namespace (both sides merged). A team
   search includes the at most once-a-second snapshot check against PostgreSQL. Also: the first
   search of a new member (a full read of the lake into its replica), and how far the team's top
   10 is the personal one's (the same texts, the same search code; items of equal score may come
   in another order, their ids differing).
4. **kill -9.** A writer process remembers in a loop, printing each acknowledged id, and is
   SIGKILLed at a random moment, ``--kills`` times (restarted each time on the same personal file
   and replica): every acknowledged id must be in the lake with its text, and a reader's replica
   must converge to the lake's rows; at the end the killed writer's own replica too.

Prints one line per measurement and writes ``--out`` (default ``bench/results/team-bench.json``)
with the command, the date, the versions and the load average before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import queue
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

from bench.lib import postgres
from bench.lib.measure import dist, loadavg, log
from bench.lib.paths import REPO, RESULTS

OUT = RESULTS / "team-bench.json"
DIM = 384
#: How often the reader searches while it waits for a write (seconds).
POLL_S = 0.02
#: Protocol lines of the worker processes start with this; anything else they print is ignored.
PREFIX = "@@ "
VOCABULARY = 3000
EMBEDDER_NOTE = (
    "nbmemory.embed.FakeEmbedder(dim=384) everywhere: the team memory's plumbing (catalog commits, "
    "replica refresh, replica search), not the model's speed"
)


# -- texts -------------------------------------------------------------------------------------


def vocabulary(seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words: set[str] = set()
    while len(words) < VOCABULARY:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(4, 9))))
    return sorted(words)


def texts(n: int, label: str, seed: int) -> list[str]:
    """``n`` texts of 8-16 words, each unique by construction (``<label> n<i>``)."""
    rng = random.Random(seed)
    words = vocabulary()
    return [f"{label} n{i} " + " ".join(rng.choices(words, k=rng.randint(8, 16))) for i in range(n)]


def queries(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = vocabulary()
    return [" ".join(rng.choices(words, k=rng.randint(3, 5))) for _ in range(n)]


# -- the worker processes ----------------------------------------------------------------------


def _say(**message: Any) -> None:
    sys.stdout.write(PREFIX + json.dumps(message) + "\n")
    sys.stdout.flush()


def _await(mem: Any, cmd: dict[str, Any]) -> dict[str, Any]:
    """Search until a hit has ``text`` (``present``) or none has (not ``present``)."""
    text, namespace, present = cmd["text"], cmd["namespace"], cmd["present"]
    deadline = time.monotonic() + cmd.get("timeout", 60)
    polls = 0
    while True:
        seen = any(h.text == text for h in mem.search(text, k=10, namespace=namespace).hits)
        polls += 1
        if polls == 1:
            _say(polling=True)
        if seen == present:
            return {"t_seen": time.time(), "polls": polls, "timed_out": False}
        if time.monotonic() > deadline:
            return {"t_seen": time.time(), "polls": polls, "timed_out": True}
        time.sleep(POLL_S)


def _converge(mem: Any, cmd: dict[str, Any]) -> dict[str, Any]:
    """Search (which follows the lake) until the replica holds exactly the lake ``ids``."""
    from nbmemory.store import team_replica

    ids = [int(i) for i in cmd["ids"]]
    started = time.monotonic()
    while True:
        mem.search("converge", k=1, namespace=cmd["namespace"])
        db = mem._team.replica().db
        held, total = len(team_replica.present(db, ids)), team_replica.count(db)
        if held == len(ids) and total == len(ids):
            return {
                "seconds": round(time.monotonic() - started, 3),
                "held": held,
                "total": total,
                "converged": True,
            }
        if time.monotonic() - started > cmd.get("timeout", 60):
            return {
                "seconds": round(time.monotonic() - started, 3),
                "held": held,
                "total": total,
                "converged": False,
            }
        time.sleep(0.1)


def _write(mem: Any, cmd: dict[str, Any]) -> dict[str, Any]:
    """Remember ``texts`` one by one (``batch`` 1) or in ``remember_many`` batches, each
    acknowledgement printed as it comes."""
    items, namespace, batch = cmd["texts"], cmd["namespace"], int(cmd["batch"])
    started = time.time()
    for lo in range(0, len(items), batch):
        chunk = items[lo : lo + batch]
        t0 = time.perf_counter()
        try:
            if batch == 1:
                ids = [mem.remember(chunk[0], namespace=namespace).id]
            else:
                ids = mem.remember_many(chunk, namespace=namespace)
        except Exception as exc:  # reported, not acknowledged
            _say(failed=list(range(lo, lo + len(chunk))), error=f"{type(exc).__name__}: {exc}"[:400])
            continue
        _say(ack=[[i, lo + j] for j, i in enumerate(ids)], ms=(time.perf_counter() - t0) * 1000)
    return {"done": True, "t_start": started, "t_end": time.time()}


def _remember(mem: Any, cmd: dict[str, Any]) -> dict[str, Any]:
    t0 = time.time()
    item = mem.remember(cmd["text"], namespace=cmd["namespace"])
    t1 = time.time()
    # The writer finds its own write at once (it applies its own snapshot before answering).
    own = any(h.id == item.id for h in mem.search(cmd["text"], k=10, namespace=cmd["namespace"]).hits)
    return {"id": item.id, "t_start": t0, "t_ack": t1, "found_by_writer": own}


def _forget(mem: Any, cmd: dict[str, Any]) -> dict[str, Any]:
    t0 = time.time()
    gone = mem.forget(int(cmd["id"]))
    return {"forgotten": gone, "t_start": t0, "t_ack": time.time()}


def _loop(mem: Any, namespace: str, label: str, seconds: float) -> None:
    """Remember unique texts until killed (or ``seconds``), printing each acknowledgement."""
    rng = random.Random(os.getpid())
    words = vocabulary()
    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        text = f"{label} n{i} " + " ".join(rng.choices(words, k=10))
        item = mem.remember(text, namespace=namespace)
        _say(ack=item.id, text=text)
        i += 1


OPS = {"await": _await, "converge": _converge, "write": _write, "remember": _remember, "forget": _forget}


def worker(args: argparse.Namespace) -> int:
    """A client process: its memory (the team from ``NBMEMORY_TEAM``), commands on stdin."""
    from nbmemory import Memory
    from nbmemory.embed import FakeEmbedder

    home = Path(args.home)
    with Memory(home / "memory.duckdb", embedder=FakeEmbedder(dim=DIM)) as mem:
        _say(ready=True, pid=os.getpid())
        if args.worker == "loop":
            _loop(mem, args.namespace, args.label, seconds=120)
            return 0
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd["op"] == "quit":
                break
            try:
                _say(**OPS[cmd["op"]](mem, cmd))
            except Exception as exc:
                _say(error=f"{type(exc).__name__}: {exc}"[:1000])
    return 0


class Client:
    """A worker process with a personal file under ``home`` and the team attached as ``role``."""

    def __init__(self, home: Path, team: str, kind: str = "client", extra: tuple[str, ...] = ()) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.home = home
        env = {
            **os.environ,
            "NBMEMORY_HOME": str(home),
            "NBMEMORY_CACHE": str(home / "cache"),
            "NBMEMORY_TEAM": team,
            "HF_HUB_OFFLINE": "1",
        }
        self.stderr: TextIO = (home / "stderr.log").open("a", encoding="utf-8")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.system.team_bench", "--worker", kind, "--home", str(home), *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            env=env,
            cwd=REPO,
        )
        self.messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            # A line cut by a kill has no newline: it was never acknowledged.
            if line.startswith(PREFIX) and line.endswith("\n"):
                self.messages.put(json.loads(line[len(PREFIX) :]))
        self.messages.put(None)

    def reply(self, timeout: float = 120) -> dict[str, Any]:
        message = self.messages.get(timeout=timeout)
        if message is None:
            self.proc.wait()
            tail = (self.home / "stderr.log").read_text(encoding="utf-8")[-2000:]
            raise RuntimeError(f"worker {self.home.name} ended (rc {self.proc.returncode}):\n{tail}")
        if "error" in message:
            raise RuntimeError(f"worker {self.home.name}: {message['error']}")
        return message

    def ready(self) -> float:
        """Wait until the memory is open; the seconds since the process started."""
        self.reply(timeout=180)
        return time.monotonic() - self.started

    def send(self, **cmd: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def call(self, timeout: float = 120, **cmd: Any) -> dict[str, Any]:
        self.send(**cmd)
        return self.reply(timeout)

    def close(self) -> None:
        with contextlib.suppress(BrokenPipeError, OSError):
            self.send(op="quit")
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()

    def kill(self) -> list[dict[str, Any]]:
        """SIGKILL the process; every complete message it printed, in order."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        out = []
        while (message := self.messages.get(timeout=30)) is not None:
            out.append(message)
        self.stderr.close()
        return out


@contextlib.contextmanager
def clients(*made: Client) -> Iterator[tuple[Client, ...]]:
    try:
        yield made
    finally:
        for client in made:
            if client.proc.poll() is None:
                client.close()


# -- the lake ----------------------------------------------------------------------------------


@dataclass
class Lake:
    cluster: postgres.Cluster
    database: str
    data: Path

    def team(self, role: str) -> str:
        return f"{self.cluster.catalog(self.database, role)}|{self.data}"

    def rows(self) -> dict[int, tuple[str, str]]:
        """Every item of the lake now: id -> (namespace, text), read by a fresh attachment."""
        from nbmemory.store.team import TeamLake

        lake = TeamLake(self.cluster.catalog(self.database, "nbm_reader"), str(self.data))
        try:
            found = lake.read_all(lake.current_snapshot())
        finally:
            lake.close()
        ids = Counter(r.id for r in found)
        if any(n > 1 for n in ids.values()):
            raise RuntimeError(f"the lake holds an id twice: {[i for i, n in ids.items() if n > 1][:5]}")
        return {r.id: (r.namespace, r.text) for r in found}


def check(acked: dict[int, str], rows: dict[int, tuple[str, str]], namespace: str) -> dict[str, Any]:
    """Acknowledged writes against the lake's rows of ``namespace``."""
    mine = {i: text for i, (ns, text) in rows.items() if ns == namespace}
    lost = sorted(i for i, text in acked.items() if mine.get(i) != text)
    texts_seen = Counter(mine.values())
    return {
        "acknowledged": len(acked),
        "rows": len(mine),
        "lost": len(lost),
        "lost_ids": lost[:20],
        "duplicated": sum(n - 1 for n in texts_seen.values() if n > 1),
        "unacknowledged_rows": len(set(mine) - set(acked)),
    }


# -- 1. latency across processes ---------------------------------------------------------------


def bench_latency(lake: Lake, work: Path, samples: int, rng: random.Random) -> dict[str, Any]:
    namespace = "team:bench"
    writer = Client(work / "latency-writer", lake.team("nbm_writer"))
    writer_open = writer.ready()  # the first writer creates the lake's table before a reader attaches
    reader = Client(work / "latency-reader", lake.team("nbm_reader"))
    reader_open = reader.ready()
    found: list[float] = []
    gone: list[float] = []
    remember_ms: list[float] = []
    forget_ms: list[float] = []
    polls: list[int] = []
    timeouts = 0
    own_misses = 0
    with clients(writer, reader):
        for s in range(samples + 1):  # the first is a warm-up
            text = f"latency probe s{s} {rng.getrandbits(48):012x} " + " ".join(
                rng.choices(vocabulary(), k=8)
            )
            reader.send(op="await", text=text, namespace=namespace, present=True)
            reader.reply()  # polling
            time.sleep(rng.uniform(0, 1.0))
            wrote = writer.call(op="remember", text=text, namespace=namespace)
            seen = reader.reply(timeout=90)
            reader.send(op="await", text=text, namespace=namespace, present=False)
            reader.reply()
            time.sleep(rng.uniform(0, 1.0))
            forgot = writer.call(op="forget", id=wrote["id"])
            left = reader.reply(timeout=90)
            if s == 0:
                continue
            timeouts += seen["timed_out"] + left["timed_out"]
            own_misses += not wrote["found_by_writer"]
            found.append((seen["t_seen"] - wrote["t_ack"]) * 1000)
            gone.append((left["t_seen"] - forgot["t_ack"]) * 1000)
            remember_ms.append((wrote["t_ack"] - wrote["t_start"]) * 1000)
            forget_ms.append((forgot["t_ack"] - forgot["t_start"]) * 1000)
            polls.append(seen["polls"])
            log(f"latency {s}/{samples}: found {found[-1]:.0f} ms, gone {gone[-1]:.0f} ms")
    out = {
        "samples": len(found),
        "remember_to_found_ms": dist(found),
        "forget_to_gone_ms": dist(gone),
        "remember_ack_ms": dist(remember_ms),
        "forget_ack_ms": dist(forget_ms),
        "reader_searches_per_sample_p50": sorted(polls)[len(polls) // 2] if polls else None,
        "timeouts": timeouts,
        "writer_missed_own_write": own_misses,
        "writer_open_s": round(writer_open, 2),
        "reader_open_s": round(reader_open, 2),
        "note": "from the writer's acknowledgement to the reader's first search that finds the text "
        f"(gone: that no longer finds it); the reader searches every {POLL_S * 1000:.0f} ms plus a "
        "search's time; a random pause of 0-1 s before each write",
    }
    print("latency", json.dumps(out), flush=True)
    return out


# -- 2. concurrent remembers -------------------------------------------------------------------


def bench_concurrent(lake: Lake, work: Path, n_clients: int, remembers: int, batch: int) -> dict[str, Any]:
    namespace = "team:concurrent"
    per = remembers // n_clients
    made = [Client(work / f"concurrent-{c}", lake.team("nbm_writer")) for c in range(n_clients)]
    with clients(*made):
        for client in made:
            client.ready()
        own = [texts(per, f"concurrent client c{c}", seed=100 + c) for c in range(n_clients)]
        started = time.monotonic()
        for client, items in zip(made, own, strict=True):
            client.send(op="write", texts=items, namespace=namespace, batch=batch)
        acked: dict[int, str] = {}
        ids_twice = 0
        op_ms: list[float] = []
        errors: list[str] = []
        for client, items in zip(made, own, strict=True):
            while True:
                message = client.reply(timeout=600)
                if "done" in message:
                    break
                if "failed" in message:
                    errors.append(message["error"])
                    continue
                op_ms.append(message["ms"])
                for item_id, index in message["ack"]:
                    ids_twice += item_id in acked
                    acked[item_id] = items[index]
        wall = time.monotonic() - started
    result = check(acked, lake.rows(), namespace)
    out = {
        "clients": n_clients,
        "per_client": per,
        "call": "remember (one text per call)" if batch == 1 else f"remember_many of {batch}",
        **result,
        "acknowledged_id_twice": ids_twice,
        "errors": len(errors),
        "error_samples": errors[:5],
        "wall_s": round(wall, 2),
        "throughput_items_per_s": round(len(acked) / wall, 1),
        "call_ms": dist(op_ms) if op_ms else None,
    }
    print("concurrent", json.dumps(out), flush=True)
    return out


# -- 3. search on a large team namespace --------------------------------------------------------


def _timed_search(mem: Any, query: str, **kwargs: Any) -> tuple[float, list[tuple[str, float]]]:
    """Milliseconds of one search, k=10; its hits' texts and scores."""
    t0 = time.perf_counter()
    hits = mem.search(query, k=10, **kwargs).hits
    return (time.perf_counter() - t0) * 1000, [(h.text, round(h.score, 6)) for h in hits]


def bench_search(lake: Lake, work: Path, n: int, n_queries: int, build_batch: int) -> dict[str, Any]:
    from nbmemory import Memory
    from nbmemory.embed import FakeEmbedder
    from nbmemory.team import REFRESH_S

    namespace = "team:bench"
    items = texts(n, "search item", seed=7)
    personal_path = work / "search-personal" / "memory.duckdb"
    t0 = time.perf_counter()
    with Memory(personal_path, embedder=FakeEmbedder(dim=DIM), team="") as mem:
        mem.remember_many(items, namespace="default")
    build_personal = time.perf_counter() - t0
    log(f"personal memory of {n}: {build_personal:.1f} s")
    t0 = time.perf_counter()
    with Memory(
        work / "search-writer" / "memory.duckdb", embedder=FakeEmbedder(dim=DIM), team=lake.team("nbm_writer")
    ) as mem:
        for lo in range(0, n, build_batch):
            mem.remember_many(items[lo : lo + build_batch], namespace=namespace)
    build_team = time.perf_counter() - t0
    log(f"team namespace of {n}: {build_team:.1f} s")
    asked = queries(n_queries, seed=11)
    warm = queries(10, seed=12)
    team_ms: list[float] = []
    personal_ms: list[float] = []
    same_order = 0
    overlap: list[float] = []
    score_gap = 0.0
    empty_team = 0
    with (
        Memory(personal_path, embedder=FakeEmbedder(dim=DIM), team="") as personal,
        Memory(
            work / "search-member" / "memory.duckdb",
            embedder=FakeEmbedder(dim=DIM),
            team=lake.team("nbm_reader"),
        ) as member,
    ):
        first_member, _ = _timed_search(member, warm[0], namespace=namespace)
        log(f"a new member's first search (full read of the lake): {first_member / 1000:.1f} s")
        for query in warm:
            _timed_search(personal, query)
            _timed_search(member, query, namespace=namespace)
        for q, query in enumerate(asked):
            # Alternated, so neither side always runs on the caches the other warmed.
            if q % 2:
                t_ms, t_hits = _timed_search(member, query, namespace=namespace)
                p_ms, p_hits = _timed_search(personal, query)
            else:
                p_ms, p_hits = _timed_search(personal, query)
                t_ms, t_hits = _timed_search(member, query, namespace=namespace)
            team_ms.append(t_ms)
            personal_ms.append(p_ms)
            same_order += [t for t, _ in t_hits] == [t for t, _ in p_hits]
            overlap.append(len({t for t, _ in t_hits} & {t for t, _ in p_hits}) / max(len(p_hits), 1))
            gaps = [abs(a[1] - b[1]) for a, b in zip(t_hits, p_hits, strict=False)]
            score_gap = max([score_gap, *gaps])
            empty_team += not t_hits
        assert member._team is not None
        check_ms = []
        for _ in range(20):
            t0 = time.perf_counter()
            member._team.lake.current_snapshot()
            check_ms.append((time.perf_counter() - t0) * 1000)
    both_ms: list[float] = []
    with Memory(personal_path, embedder=FakeEmbedder(dim=DIM), team=lake.team("nbm_reader")) as both:
        first_both, _ = _timed_search(both, warm[0])
        for query in warm:
            _timed_search(both, query)
        stores: Counter[str] = Counter()
        for query in asked:
            t0 = time.perf_counter()
            hits = both.search(query, k=10).hits
            both_ms.append((time.perf_counter() - t0) * 1000)
            stores.update(h.store for h in hits)
    parquet = list(lake.data.rglob("*.parquet"))
    out = {
        "items": n,
        "k": 10,
        "queries": n_queries,
        "build_personal_s": round(build_personal, 1),
        "build_team_s": round(build_team, 1),
        "build_team_call": f"remember_many of {build_batch} (one lake snapshot each)",
        "personal_ms": dist(personal_ms),
        "team_ms": dist(team_ms),
        "team_over_personal_p50": round(dist(team_ms)["p50"] / dist(personal_ms)["p50"], 2),
        "team_over_personal_p95": round(dist(team_ms)["p95"] / dist(personal_ms)["p95"], 2),
        "both_ms": dist(both_ms),
        "both_hits_by_store": dict(stores),
        "top10_overlap_with_personal_mean": round(sum(overlap) / len(overlap), 3),
        "same_top10_order_as_personal": same_order,
        "max_score_difference_at_a_rank": round(score_gap, 6),
        "team_searches_with_no_hit": empty_team,
        "new_member_first_search_s": round(first_member / 1000, 2),
        "both_first_search_s": round(first_both / 1000, 2),
        "snapshot_check_ms": dist(check_ms),
        "refresh_s": REFRESH_S,
        "lake_parquet_files": len(parquet),
        "lake_parquet_mb": round(sum(p.stat().st_size for p in parquet) / 2**20, 1),
        "note": "personal: a memory with no team, the texts in 'default'; team: a member (read-only role, "
        "its personal file empty) searching namespace='team:bench', which searches the personal file "
        "(nothing there) and the replica, and asks the lake for new snapshots at most once every "
        "refresh_s; both: the personal memory opened with the team attached, no namespace (both sides "
        "searched and merged). Warm: 10 searches each before the timed ones. top10_overlap: the share of "
        "the personal top 10's texts in the team's; same_top10_order: queries whose 10 texts are the "
        "personal ones in order (items of equal score may come in another order: ids differ; the "
        "personal file's searches are logged and lift what they retrieved, the replica's are not)",
    }
    print("search", json.dumps(out), flush=True)
    return out


# -- 4. kill -9 during team writes --------------------------------------------------------------


def bench_kills(lake: Lake, work: Path, kills: int, rng: random.Random) -> dict[str, Any]:
    namespace = "team:kill"
    writer_home = work / "kill-writer"
    reader = Client(work / "kill-reader", lake.team("nbm_reader"))
    reader.ready()
    rounds = []
    acked: dict[int, str] = {}
    with clients(reader):
        for r in range(kills):
            writer = Client(
                writer_home,
                lake.team("nbm_writer"),
                kind="loop",
                extra=("--namespace", namespace, "--label", f"kill round r{r}"),
            )
            reopen = writer.ready()
            first = writer.reply(timeout=60)  # the first acknowledgement: the loop is writing
            delay = rng.uniform(0.1, 3.0)
            time.sleep(delay)
            messages = [first, *writer.kill()]
            mine = {m["ack"]: m["text"] for m in messages if "ack" in m}
            acked.update(mine)
            rows = lake.rows()
            result = check(
                mine, {i: v for i, v in rows.items() if v[1].startswith(f"kill round r{r} ")}, namespace
            )
            ids = sorted(rows)
            converged = reader.call(op="converge", ids=ids, namespace=namespace, timeout=60)
            rounds.append(
                {
                    "killed_after_s": round(delay, 2),
                    "writer_open_s": round(reopen, 2),
                    **result,
                    "reader_converged": converged["converged"],
                    "reader_converge_s": converged["seconds"],
                }
            )
            log(f"kill {r + 1}/{kills}: {rounds[-1]}")
    # The killed writer's own replica, restarted once more, follows the lake too.
    rows = lake.rows()
    writer = Client(writer_home, lake.team("nbm_writer"))
    with clients(writer):
        writer_open = writer.ready()
        own = writer.call(op="converge", ids=sorted(rows), namespace=namespace, timeout=60)
    total = check(acked, rows, namespace)
    out = {
        "kills": kills,
        "call": "remember (one text per call) in a loop",
        "acknowledged": total["acknowledged"],
        "lost": total["lost"],
        "duplicated": total["duplicated"],
        "landed_unacknowledged": total["unacknowledged_rows"],
        "every_reader_converged": all(r["reader_converged"] for r in rounds),
        "killed_writer_replica_converged": own["converged"],
        "killed_writer_reopen_s": round(writer_open, 2),
        "killed_writer_converge_s": own["seconds"],
        "rounds": rounds,
        "note": "landed_unacknowledged: committed to the lake by a write whose acknowledgement the kill cut "
        "off (not an error); the killed writer is restarted on its personal file and replica each round",
    }
    print("kill", json.dumps({k: v for k, v in out.items() if k != "rounds"}), flush=True)
    return out


# -- the run -----------------------------------------------------------------------------------


def versions(cluster: postgres.Cluster) -> dict[str, Any]:
    import duckdb

    found: dict[str, Any] = {
        "duckdb": duckdb.__version__,
        "postgres": cluster.psql("SHOW server_version").strip(),
    }
    for package in ("duckdb_extension_ducklake", "duckdb_extension_postgres"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[package] = metadata.version(package)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=50_000, help="items of the searched team namespace")
    parser.add_argument("--clients", type=int, default=4, help="concurrent writer processes")
    parser.add_argument("--remembers", type=int, default=1000, help="remembers of all clients together")
    parser.add_argument(
        "--batch", type=int, default=1, help="texts per call of a concurrent client (1: remember)"
    )
    parser.add_argument("--latency-samples", type=int, default=30, help="remember-to-found samples")
    parser.add_argument("--kills", type=int, default=5, help="writers killed with SIGKILL")
    parser.add_argument("--queries", type=int, default=100, help="timed searches per side")
    parser.add_argument(
        "--build-batch", type=int, default=1000, help="remember_many size building the team side"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(OUT), help="write the JSON here (default %(default)s)")
    parser.add_argument("--worker", choices=["client", "loop"], help=argparse.SUPPRESS)
    parser.add_argument("--home", help=argparse.SUPPRESS)
    parser.add_argument("--namespace", help=argparse.SUPPRESS)
    parser.add_argument("--label", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    for name, value in (("clients", args.clients), ("batch", args.batch), ("build-batch", args.build_batch)):
        if value <= 0:
            raise SystemExit(f"--{name} must be greater than 0, got {value}")
    if args.remembers < args.clients:
        raise SystemExit(f"--remembers ({args.remembers}) must be at least --clients ({args.clients})")
    rng = random.Random(args.seed)
    load_before = loadavg()
    started = time.perf_counter()
    date = datetime.now(UTC).isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory(prefix="team-bench-") as tmp, postgres.cluster() as pg:
        work = Path(tmp)
        # This process's own memories and replicas stay in the run's folder too.
        os.environ["NBMEMORY_HOME"] = str(work / "home")
        os.environ["NBMEMORY_CACHE"] = str(work / "cache")
        os.environ.pop("NBMEMORY_TEAM", None)
        pg.create_lake("teambench")
        lake = Lake(pg, "teambench", work / "lake-data")
        lake.data.mkdir()
        log(f"PostgreSQL on port {pg.port}, lake data in {lake.data}")
        found_versions = versions(pg)
        latency = bench_latency(lake, work, args.latency_samples, rng)
        concurrent = bench_concurrent(lake, work, args.clients, args.remembers, args.batch)
        kills = bench_kills(lake, work, args.kills, rng)
        search = bench_search(lake, work, args.items, args.queries, args.build_batch)
    load_after = loadavg()
    seconds = round(time.perf_counter() - started, 1)
    print(f"load before {load_before}, after {load_after}; {seconds} s", flush=True)
    payload = {
        "command": ["python", "-m", "bench.system.team_bench", *(argv if argv is not None else sys.argv[1:])],
        "date": date,
        "embedder": EMBEDDER_NOTE,
        "catalog": "PostgreSQL in a temporary cluster on this machine (localhost TCP, scram-sha-256, "
        "fsync and synchronous_commit on); lake data on the local disk",
        "roles": "writers: nbm_writer; readers and the searching member: nbm_reader (SELECT only)",
        "latency": latency,
        "concurrent": concurrent,
        "kill": kills,
        "search": search,
        "versions": found_versions,
        "machine": {
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "seconds": seconds,
        "load_before": load_before,
        "load_after": load_after,
    }
    from nbmemory.eval.report import write_json

    write_json(payload, args.out)
    print(f"wrote {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
