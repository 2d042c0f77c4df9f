"""Kill a process that writes to a memory file, many times, and check what survives.

Each run starts :mod:`tests.reliability.crash_child` on one of a few memory files with a workload
(a *phase*: remember, remember_many, forget, index, reembed, fts, hnsw, checkpoint, wal, passages,
hot, queue, owner, adopt), SIGKILLs it at a random point, then reopens the file in this process
and checks:

* the store opens (a write-ahead log left behind is replayed: ``Database`` loads vss before ATTACH);
* ``doctor()`` passes, or fails only on derived indexes (HNSW, full-text, a half-written re-embed)
  and passes after ``doctor(repair=True)``;
* every acknowledged item is there with its exact text (or, for an update or forget in flight,
  in one of its two possible states), and every acknowledged forget holds;
* BM25 finds each acknowledged item by its unique token, and the HNSW index agrees with the
  table: a scan of the whole graph returns exactly the stored vectors, an item's own vector finds
  it, and HNSW top-k equals the exact scan's top-k; every stored vector is the embedding of the
  item's current text (nothing stale after an update or a re-embed);
* for the phases that index a folder (index, passages, queue), indexing it again makes the store
  match the files on disk;
* every chunk of prose has its passage vectors, and they are the embeddings of its windows;
* an active tuned model version always has its vectors in place (adopt); a killed change queue is
  not reported as watching (queue);
* searches rank exactly as they do once every derived index (vector index, passages, the
  memory-resident index) is rebuilt from the tables.

A kill is placed by time (a random delay after the child is ready) or by name: the child kills
itself a random few milliseconds after the N-th ``mark NAME`` (``commit``, ``checkpoint``,
``hnsw-create``, ``fts-build``, ...). Some runs kill a second child while it recovers the file.
Everything is drawn from one seeded RNG; a failing run keeps a copy of its store.

Standalone, from the repository root: ``python -m tests.reliability.crash_harness --runs 50 --seed 1
-v`` (one line per kill on stderr with ``-v``, the figures as JSON on stdout; exit status 1 if a
run failed, its store kept under ``--workdir``/failures).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tests.reliability.crash_child import WORDS

REPO = Path(__file__).resolve().parents[2]
PHASES = (
    "remember",
    "remember_many",
    "forget",
    "index",
    "reembed",
    "fts",
    "hnsw",
    "checkpoint",
    "wal",
    "passages",
    "hot",
    "queue",
    "owner",
    "adopt",
)
#: Workloads that index a folder: their files are checked against the disk after a kill.
FILE_PHASES = ("index", "passages", "queue")
DIM = 48
# doctor findings about data that is derived and rebuilt from the table (docs/architecture.md, note 2).
DERIVED_CHECKS = {"vector index", "full-text index", "interrupted re-embed", "passages"}
# Named kill points per phase: (mark, highest N to draw, highest delay in ms to draw).
KILL_POINTS: dict[str, list[tuple[str, int, float]]] = {
    "remember": [("commit", 60, 2), ("committed", 60, 0), ("op:update", 6, 1)],
    "remember_many": [("commit", 25, 3), ("hnsw-drop", 3, 0), ("hnsw-create", 3, 60), ("committed", 25, 0)],
    "forget": [("op:forget", 12, 5), ("hnsw-create", 3, 40), ("hnsw-drop", 3, 0), ("commit", 20, 2)],
    "index": [("commit", 30, 3), ("op:index", 6, 200), ("committed", 30, 0)],
    "reembed": [
        ("reembed-batch", 10, 5),
        ("reembed-swap", 2, 2),
        ("hnsw-create", 3, 80),
        ("hnsw-drop", 2, 0),
    ],
    "fts": [("fts-build", 8, 40), ("commit", 20, 2)],
    "hnsw": [("hnsw-create", 6, 150), ("hnsw-drop", 6, 0), ("checkpoint", 4, 30), ("commit", 10, 2)],
    "checkpoint": [("checkpoint", 5, 60), ("commit", 12, 3), ("op:close", 3, 20)],
    "wal": [("wal-ready", 1, 0)],
    "passages": [("passages-insert", 12, 3), ("commit", 30, 2), ("committed", 30, 0), ("op:index", 4, 150)],
    "hot": [("op:search", 12, 30), ("op:hot-reset", 3, 60), ("commit", 40, 2), ("committed", 40, 0)],
    "queue": [("op:queue", 6, 150), ("commit", 30, 3), ("committed", 30, 0)],
    "owner": [("commit", 40, 2), ("committed", 40, 0), ("op:remember", 30, 1), ("op:forget", 4, 3)],
    "adopt": [
        ("op:adopt", 3, 20),
        ("reembed-swap", 2, 2),
        ("version-record", 2, 0),
        ("reembed-batch", 6, 5),
        ("committed", 20, 0),
    ],
    "recovery": [("op:doctor", 1, 30), ("checkpoint", 1, 20), ("committed", 3, 0)],
}
TIMER_MAX_S = {"reembed": 4.0, "checkpoint": 4.0, "recovery": 1.2, "adopt": 4.0, "passages": 3.0}
CHILD_DEADLINE_S = 30.0


@dataclass
class Expect:
    """What an acknowledged item may look like after a kill."""

    texts: set[str]
    state: str = "live"  # "live", "forgotten" or "either" (a forget was in flight)
    run: int = 0


@dataclass
class Store:
    """One memory file and everything its children acknowledged."""

    phase: str
    path: Path
    docs: Path
    tag: str = "a"
    pending_tag: str | None = None
    items: dict[int, Expect] = field(default_factory=dict)
    files: dict[str, list[str]] = field(default_factory=dict)
    pending_unlink: set[str] = field(default_factory=set)
    unlinked: set[str] = field(default_factory=set)


@dataclass
class Summary:
    runs: int = 0
    kills_by_phase: Counter[str] = field(default_factory=Counter)
    kills_by_mode: Counter[str] = field(default_factory=Counter)
    landed_in: Counter[str] = field(default_factory=Counter)
    nested_recovery_kills: int = 0
    wal_replays: int = 0
    recoveries: int = 0
    repairs: Counter[str] = field(default_factory=Counter)
    items_verified: int = 0
    tokens_searched: int = 0
    vectors_checked: int = 0
    dead_entries: int = 0
    graph_scans: int = 0
    files_verified: int = 0
    passages_checked: int = 0
    rebuild_queries: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def line(self) -> str:
        return (
            f"crash harness: runs={self.runs} kills_by_phase={dict(sorted(self.kills_by_phase.items()))} "
            f"modes={dict(self.kills_by_mode)} landed_in={dict(self.landed_in.most_common())} "
            f"nested_recovery_kills={self.nested_recovery_kills} wal_replays={self.wal_replays} "
            f"recoveries={self.recoveries} repairs={dict(self.repairs)} items_verified={self.items_verified} "
            f"tokens_searched={self.tokens_searched} vectors_checked={self.vectors_checked} "
            f"dead_hnsw_entries_seen={self.dead_entries} full_graph_scans={self.graph_scans} "
            f"files_verified={self.files_verified} passages_checked={self.passages_checked} "
            f"rebuild_queries={self.rebuild_queries} failures={len(self.failures)} seconds={self.seconds:.0f}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "kills_by_phase": dict(self.kills_by_phase),
            "kills_by_mode": dict(self.kills_by_mode),
            "landed_in": dict(self.landed_in),
            "nested_recovery_kills": self.nested_recovery_kills,
            "wal_replays": self.wal_replays,
            "recoveries": self.recoveries,
            "repairs": dict(self.repairs),
            "items_verified": self.items_verified,
            "tokens_searched": self.tokens_searched,
            "vectors_checked": self.vectors_checked,
            "dead_hnsw_entries_seen": self.dead_entries,
            "full_graph_scans": self.graph_scans,
            "files_verified": self.files_verified,
            "passages_checked": self.passages_checked,
            "rebuild_queries": self.rebuild_queries,
            "failures": self.failures,
            "seconds": round(self.seconds, 1),
        }


@dataclass
class Kill:
    """Where a child is killed: by name (``mark``), by time (``timer``), or not before its end."""

    mode: str
    spec: str = ""
    delay_s: float = 0.0

    def describe(self) -> str:
        return self.spec if self.mode == "mark" else f"{self.mode} {self.delay_s:.2f}s"


def draw_kill(phase: str, rng: random.Random) -> Kill:
    if phase == "wal" or rng.random() < 0.65:
        name, nth, delay = rng.choice(KILL_POINTS[phase])
        ms = 0.0 if delay == 0 or rng.random() < 0.2 else round(rng.uniform(0, delay), 2)
        return Kill("mark", f"{name}:{rng.randint(1, nth)}:{ms}")
    return Kill("timer", delay_s=round(rng.uniform(0.05, TIMER_MAX_S.get(phase, 2.5)), 3))


# -- one child ------------------------------------------------------------------------------
@dataclass
class ChildResult:
    lines: list[str]
    returncode: int
    stderr: str
    killed_by: str  # "self", "parent", "deadline" or "exit"


def run_child(store: Store, phase: str, run: int, seed: int, kill: Kill) -> ChildResult:
    spec = {
        "path": str(store.path),
        "docs": str(store.docs),
        "phase": phase,
        "seed": seed,
        "run": run,
        "dim": DIM,
        "tag": store.tag,
    }
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
        "NBMEMORY_HOME": str(store.path.parent / "home"),
        "NBMEMORY_CRASH_AT": kill.spec if kill.mode == "mark" else "",
    }
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.reliability.crash_child", json.dumps(spec)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=REPO,
            env=env,
        )
        lines: list[str] = []
        ready, done, eof = threading.Event(), threading.Event(), threading.Event()

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:  # after the kill the pipe still holds what was written
                lines.append(line.rstrip("\n"))
                if line.startswith("ready"):
                    ready.set()
                elif line.startswith("done"):
                    done.set()
            ready.set()
            eof.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        killed_by = "self"
        started = time.monotonic()
        if kill.mode == "timer":
            ready.wait(CHILD_DEADLINE_S)
            started = time.monotonic()
        while proc.poll() is None:
            elapsed = time.monotonic() - started
            if kill.mode == "timer" and elapsed >= kill.delay_s:
                killed_by = "parent"
            elif done.is_set():
                killed_by = "exit"  # the workload finished (recovery) before its kill point
            elif elapsed > CHILD_DEADLINE_S:
                killed_by = "deadline"  # a named point never reached: kill it anyway
            else:
                eof.wait(min(0.005, max(0.0, kill.delay_s - elapsed)) if kill.mode == "timer" else 0.02)
                continue
            os.kill(proc.pid, signal.SIGKILL)
            break
        proc.wait()
        reader.join(30)
        err.seek(0)
        return ChildResult(lines, proc.returncode, err.read(), killed_by)


def apply_lines(store: Store, lines: list[str], run: int) -> int:
    """Fold the child's intents and acknowledgements into ``store``; returns the acks read."""
    acks = 0
    for line in lines:
        kind, _, payload = line.partition(" ")
        if kind not in ("intent", "ack"):
            continue
        event = json.loads(payload)
        op = event["op"]
        if kind == "ack":
            acks += 1
        if op == "put" and kind == "ack":
            store.items[event["id"]] = Expect({event["text"]}, "live", run)
        elif op == "update" and event["id"] in store.items:
            store.items[event["id"]].texts.add(event["text"])
        elif op == "forget" and event["id"] in store.items:
            store.items[event["id"]].state = "forgotten" if kind == "ack" else "either"
            store.items[event["id"]].run = run
        elif op == "model":
            if kind == "ack":
                store.tag, store.pending_tag = event["tag"], None
            else:
                store.pending_tag = event["tag"]
        elif op == "unlink":
            if kind == "ack":
                store.files.pop(event["path"], None)
                store.pending_unlink.discard(event["path"])
                store.unlinked.add(event["path"])
            else:
                store.pending_unlink.add(event["path"])
        elif op == "file":
            store.files[event["path"]] = event["tokens"]
    return acks


# -- checks after a kill --------------------------------------------------------------------
def token_of(text: str) -> str:
    return text.split()[0]


class Verifier:
    def __init__(self, store: Store, summary: Summary, run: int, rng: random.Random) -> None:
        self.store = store
        self.summary = summary
        self.run = run
        self.rng = rng
        self.errors: list[str] = []

    def fail(self, message: str) -> None:
        self.errors.append(message)

    def open(self) -> Any:
        from nbmemory import Memory
        from nbmemory.embed import FakeEmbedder

        store = self.store
        mem = Memory(store.path, embedder=FakeEmbedder(dim=DIM, tag=store.tag), on_model_change="defer")
        stored = mem.db.get_meta("model_fingerprint")
        allowed = {f"fake:{t}:{DIM}" for t in (store.tag, store.pending_tag) if t}
        if stored is not None and stored not in allowed:
            self.fail(f"model fingerprint {stored} is none of {sorted(allowed)}")
        elif stored is not None and stored != f"fake:{store.tag}:{DIM}":
            # The switch committed but its acknowledgement never left the child: both are right.
            mem.close()
            store.tag = stored.split(":")[1]
            mem = Memory(store.path, embedder=FakeEmbedder(dim=DIM, tag=store.tag), on_model_change="defer")
        store.pending_tag = None
        return mem

    def doctor(self, mem: Any) -> None:
        report = mem.doctor()
        if report.ok:
            return
        failing = {c.name for c in report.checks if not c.ok}
        if not failing <= DERIVED_CHECKS:
            self.fail(f"doctor found damage beyond derived indexes: {sorted(failing)}\n{report.summary()}")
        mem.doctor(repair=True)
        for name in failing:
            self.summary.repairs[name] += 1
        after = mem.doctor()
        if not after.ok:
            self.fail(f"doctor still fails after repair:\n{after.summary()}")

    def items(self, mem: Any) -> list[tuple[int, str]]:
        """Check every acknowledged item; returns (id, text) of those that must be live."""
        store = self.store
        ids = list(store.items)
        rows = {
            int(r[0]): (r[1], r[2], r[3])
            for r in mem.db.fetchall(
                "SELECT id, text, deleted_at, heading FROM chunks WHERE id IN (SELECT unnest(?::BIGINT[]))",
                [ids],
            )
        }
        live: list[tuple[int, str]] = []
        for item_id, expect in store.items.items():
            row = rows.get(item_id)
            if row is None:
                self.fail(f"acknowledged item {item_id} is gone")
                continue
            text, deleted_at, _ = row
            if text not in expect.texts:
                self.fail(f"item {item_id} has text {text[:80]!r}, expected one of {sorted(expect.texts)}")
            state = "live" if deleted_at is None else "forgotten"
            if expect.state != "either" and state != expect.state:
                self.fail(f"item {item_id} is {state}, acknowledged as {expect.state}")
            expect.texts, expect.state = {text}, state
            if state == "live":
                live.append((item_id, text))
        self.summary.items_verified += len(store.items)
        return live

    def bm25(self, mem: Any, live: list[tuple[int, str]]) -> None:
        from nbmemory.store import fts

        # Items acknowledged in this run (the last ones always), and a sample of older ones.
        recent = [(i, t) for i, t in live if self.store.items[i].run >= self.run]
        older = [(i, t) for i, t in live if self.store.items[i].run < self.run]
        sample = recent[-50:] + self.rng.sample(recent[:-50], min(max(len(recent) - 50, 0), 150))
        sample += self.rng.sample(older, min(len(older), 100))
        for item_id, text in sample:
            token = token_of(text)
            found = [i for i, _ in fts.search(mem.db, fts.query_terms(mem.db, token), 20)]
            if item_id not in found:
                self.fail(f"BM25 does not find item {item_id} by its token {token!r} (got {found[:5]})")
        self.summary.tokens_searched += len(sample)
        forgotten = [i for i, e in self.store.items.items() if e.state == "forgotten" and e.run >= self.run]
        for item_id in forgotten[:30]:
            (text,) = self.store.items[item_id].texts
            if item_id in mem.search(token_of(text), k=10, log=False).ids:
                self.fail(f"forgotten item {item_id} is still returned by search")

    def vectors(self, mem: Any, live: list[tuple[int, str]]) -> None:
        from nbmemory.store import chunks as chunk_rows
        from nbmemory.store import vectors

        db = mem.db
        ids = [i for i, _ in live]
        rows = db.fetchall(
            "SELECT c.id, c.heading, c.text, v.vec FROM chunks c JOIN vectors v ON v.chunk_id = c.id "
            "WHERE c.id IN (SELECT unnest(?::BIGINT[])) ORDER BY c.id",
            [ids],
        )
        if len(rows) != len(ids):
            self.fail(f"{len(ids) - len(rows)} live acknowledged items have no vector")
        if rows:
            stored = np.asarray([r[3] for r in rows], np.float32)
            fresh = mem.embedder.embed_documents([chunk_rows.embedding_text(r[1] or "", r[2]) for r in rows])
            stale = [
                int(r[0])
                for r, a, b in zip(rows, stored, fresh, strict=True)
                if not np.allclose(a, b, atol=1e-5)
            ]
            if stale:
                self.fail(f"{len(stale)} vectors are not the embedding of their item's text: {stale[:5]}")
        self.summary.vectors_checked += len(rows)

        total = int(db.scalar("SELECT count(*) FROM vectors"))
        if total == 0 or vectors.IN_MEMORY:
            return  # the memory-resident index serves without the HNSW index
        if not vectors.index_exists(db):
            self.fail("no HNSW index over a non-empty vectors table after repair")
            return
        hnsw_sql = f"SELECT chunk_id, array_cosine_distance(vec, ?::FLOAT[{DIM}]) AS d FROM vectors ORDER BY d LIMIT ?"
        exact_sql = (
            f"SELECT chunk_id, array_cosine_distance(vec, ?::FLOAT[{DIM}]) + 0 AS d FROM vectors "
            "ORDER BY d, chunk_id LIMIT ?"
        )
        probe = np.asarray(db.fetchone("SELECT vec FROM vectors LIMIT 1")[0], np.float32).tolist()
        if not uses_hnsw(db, hnsw_sql, [probe, 10]):
            self.fail("the vector query does not use the HNSW index")
            return
        entries = db.scalar(
            "SELECT count FROM pragma_hnsw_index_info() WHERE catalog_name = 'mem' AND index_name = ?",
            [vectors.INDEX_NAME],
        )
        # Dead entries (rows deleted after the index was loaded from the file) are a known
        # duckdb-vss behaviour, counted; a stored vector missing from the graph is a failure.
        if entries < total:
            self.fail(f"the HNSW index holds {entries} entries for {total} stored vectors")
        self.summary.dead_entries += max(0, entries - total)
        with db.lock:
            # The whole graph walked from one vector returns every stored row (the optimizer
            # may prefer a plain scan for a LIMIT this large: then the count above must do).
            db.execute(f"SET hnsw_ef_search = {max(64, entries)}")
            if uses_hnsw(db, hnsw_sql, [probe, entries]):
                graph = {int(r[0]) for r in db.fetchall(hnsw_sql, [probe, entries])}
                table = {int(r[0]) for r in db.fetchall("SELECT chunk_id FROM vectors")}
                if graph != table:
                    self.fail(
                        f"HNSW graph and vectors table disagree: {len(graph - table)} ids only in the "
                        f"graph, {len(table - graph)} only in the table"
                    )
                self.summary.graph_scans += 1
            # HNSW is approximate (near-duplicates can hide a vector from itself in a healthy
            # graph): nearly every probe must find itself, and top-10 recall against the exact
            # scan (by distance, so ties between equal vectors count) must stay high.
            db.execute("SET hnsw_ef_search = 64")
            recalls, misses = [], []
            for item_id, _, _, vec in self.rng.sample(rows, min(len(rows), 40)):
                query = np.asarray(vec, np.float32).tolist()
                approx = db.fetchall(hnsw_sql, [query, 10])
                exact = db.fetchall(exact_sql, [query, 10])
                if not any(i == item_id or d <= 1e-6 for i, d in approx):
                    misses.append(item_id)
                cutoff = max(d for _, d in exact) + 1e-6
                recalls.append(min(1.0, sum(d <= cutoff for _, d in approx) / len(exact)))
            if len(misses) > max(1, len(recalls) // 20):
                self.fail(f"HNSW does not find {len(misses)} of {len(recalls)} items by their own vector")
            if recalls and float(np.mean(recalls)) < 0.9:
                self.fail(f"HNSW top-10 recall against the exact scan is {np.mean(recalls):.2f} (< 0.9)")

    def files(self, mem: Any) -> None:
        """Acknowledged files are searchable; then a re-index makes the store match the disk."""
        from nbmemory.store import fts

        store = self.store

        def sources_of(token: str) -> set[str]:
            found = [i for i, _ in fts.search(mem.db, fts.query_terms(mem.db, token), 50)]
            rows = mem.db.fetchall(
                "SELECT source, text, heading FROM chunks WHERE id IN (SELECT unnest(?::BIGINT[]))", [found]
            )
            return {r[0] for r in rows if token in r[1] or token in r[2]}

        for path, tokens in store.files.items():
            if path in store.pending_unlink:
                continue
            for token in tokens:
                if path not in sources_of(token):
                    self.fail(f"acknowledged file {path} is not found by its token {token}")
        if not store.docs.exists():
            return
        report = mem.index(store.docs)
        if report.skipped:
            self.fail(f"re-index skipped files: {report.skipped}")
        on_disk = {
            str(p): _file_tokens(p)
            for p in store.docs.iterdir()
            if p.is_file() and not p.name.startswith(".")
        }
        for path, tokens in on_disk.items():
            for token in tokens:
                if path not in sources_of(token):
                    self.fail(f"after re-indexing, file {path} is not found by its token {token}")
        stale = mem.db.fetchall(
            "SELECT DISTINCT source FROM chunks WHERE source IS NOT NULL AND source NOT IN "
            "(SELECT unnest(?::VARCHAR[]))",
            [list(on_disk)],
        )
        if stale:
            self.fail(f"after re-indexing, chunks of deleted files remain: {[r[0] for r in stale][:5]}")
        store.files = on_disk
        store.pending_unlink.clear()
        self.summary.files_verified += len(on_disk)

    def passages(self, mem: Any) -> None:
        """Every chunk of prose has its window vectors, and they embed its windows' text."""
        from nbmemory.store import passages

        db = mem.db
        fingerprint = db.get_meta("model_fingerprint")
        if fingerprint is None:
            return
        lacking = passages.missing(db, fingerprint)
        if lacking:
            self.fail(f"{len(lacking)} chunks of prose lack passages after repair")
        rows = db.fetchall(
            "SELECT content_hash, heading, text, kind FROM chunks WHERE deleted_at IS NULL ORDER BY id"
        )
        planned = [(r[0], passages.texts_of(r[1] or "", r[2], r[3])) for r in rows]
        planned = [(h, texts) for h, texts in planned if len(texts) >= 2]
        sample = self.rng.sample(planned, min(len(planned), 25))
        stored = passages.vectors_of(db, fingerprint, [h for h, _ in sample])
        for digest, texts in sample:
            got = stored.get(digest)
            want = mem.embedder.embed_documents(texts)
            if got is None or got.shape != want.shape or not np.allclose(got, want, atol=1e-5):
                self.fail(f"passages of chunk {digest[:12]} are not the embeddings of its windows")
        self.summary.passages_checked += len(sample)

    def versions(self, mem: Any) -> None:
        """An active tuned version always has its vectors in place."""
        from nbmemory.tune import versions

        active = versions.active(mem.db)
        stored = mem.db.get_meta("model_fingerprint")
        if active is not None and active.status == "adopted" and active.fingerprint != stored:
            self.fail(f"version {active.version} is active ({active.fingerprint}) over vectors of {stored}")

    def queue_status(self) -> None:
        """A killed queue's status file names no live watcher."""
        from nbmemory import runtime

        alive = [w for w in runtime.watchers(self.store.path) if w.get("pid") != os.getpid()]
        if alive:
            self.fail(f"a killed change queue is still reported as watching: {alive}")

    def same_as_rebuilt(self, mem: Any, live: list[tuple[int, str]]) -> None:
        """Searches give what they give once every derived index is rebuilt from the tables.

        The full-text snapshot is rebuilt first: between snapshots, BM25 scores what was written
        since with the snapshot's statistics (:mod:`nbmemory.store.fts`), so a fresh one shifts
        scores by design, crash or not; what it holds is checked by :meth:`bm25`. The HNSW index
        (the SQL path) is left as it is: it is approximate, a graph built again finds other near
        neighbours, and :meth:`vectors` checks it against an exact scan instead. Equal scores
        may come in either order.
        """
        from nbmemory.search import hot
        from nbmemory.store import fts, passages

        db = mem.db
        fts.rebuild(db)
        words = [token_of(t) for _, t in self.rng.sample(live, min(len(live), 6))]
        queries = words + [" ".join(self.rng.sample(WORDS, 2)) for _ in range(6)]

        def ranked() -> list[list[tuple[float, int]]]:
            return [
                sorted((-h.score, h.id) for h in mem.search(query, k=10, log=False).hits) for query in queries
            ]

        before = ranked()
        with db.lock:
            with db.transaction():
                db.execute("DELETE FROM passages")
            db.passage_cache.clear()
        fingerprint = db.get_meta("model_fingerprint")
        if fingerprint is not None:
            passages.fill(db, mem.embedder, passages.missing(db, fingerprint))
        hot.reset(db)
        after = ranked()
        for query, a, b in zip(queries, before, after, strict=True):
            problem = ranking_difference(a, b)
            if problem:
                self.fail(f"search {query!r} differs from a rebuilt memory's: {problem}")
        self.summary.rebuild_queries += len(queries)


#: Scores of one vector computed over matrices of other shapes (a copy grown by appends, one read
#: whole) may differ in their last float32 bits.
SCORE_TOLERANCE = 1e-5


def ranking_difference(a: list[tuple[float, int]], b: list[tuple[float, int]]) -> str | None:
    """What differs between two rankings of ``(-score, id)``, sorted; None if they agree: the
    same scores rank by rank (within :data:`SCORE_TOLERANCE`) and the same ids, except that
    which of several equal scores (within it) make the cut, or come first, is arbitrary."""
    if len(a) != len(b):
        return f"{len(a)} hits vs {len(b)}: {a[:4]} vs {b[:4]}"
    for rank, ((sa, ia), (sb, ib)) in enumerate(zip(a, b, strict=True), 1):
        if abs(sa - sb) > SCORE_TOLERANCE:
            return f"score at rank {rank}: {-sa:.7f} (id {ia}) vs {-sb:.7f} (id {ib})"
    if not a:
        return None
    cut = a[-1][0]
    scores_b = {i: s for s, i in b}
    for score, item in a:
        if score < cut - SCORE_TOLERANCE and (
            item not in scores_b or abs(scores_b[item] - score) > SCORE_TOLERANCE
        ):
            return f"id {item} ({-score:.7f}) is not ranked the same: {a[:4]} vs {b[:4]}"
    return None


def uses_hnsw(db: Any, sql: str, params: list[Any]) -> bool:
    return "HNSW_INDEX_SCAN" in "".join(str(r[1]) for r in db.fetchall("EXPLAIN " + sql, params))


def _file_tokens(path: Path) -> list[str]:
    return sorted(set(re.findall(r"\btk\d+x\d+\b", path.read_text())))


def verify(store: Store, summary: Summary, run: int, rng: random.Random) -> list[str]:
    """Reopen ``store`` after a kill and check it; returns the problems found."""
    from nbmemory.store import vectors

    checker = Verifier(store, summary, run, rng)
    serving = vectors.IN_MEMORY
    # The hot workload is checked as it serves: through the memory-resident index.
    vectors.IN_MEMORY = serving or store.phase == "hot"
    try:
        return _verify(checker, store, summary)
    finally:
        vectors.IN_MEMORY = serving


def _verify(checker: Verifier, store: Store, summary: Summary) -> list[str]:
    from nbmemory.errors import NbMemoryError

    wal = Path(f"{store.path}.wal")
    if wal.exists() and wal.stat().st_size > 0:
        summary.wal_replays += 1
    try:
        mem = checker.open()
    except (NbMemoryError, OSError) as exc:
        return [f"the store does not open: {exc}"]
    try:
        checker.doctor(mem)
        live = checker.items(mem)
        checker.bm25(mem, live)
        if mem.db.table_exists("vectors"):
            checker.vectors(mem, live)
        if store.phase in FILE_PHASES:
            checker.files(mem)
        checker.passages(mem)
        if store.phase == "adopt":
            checker.versions(mem)
        if store.phase == "queue":
            checker.queue_status()
        checker.same_as_rebuilt(mem, live)
    except Exception as exc:  # a crash of the checks is a failure to report, not to hide
        checker.fail(f"verification raised {type(exc).__name__}: {exc}")
    finally:
        mem.close()
    if not checker.errors:
        summary.recoveries += 1
    return checker.errors


# -- the campaign ---------------------------------------------------------------------------
def run_campaign(
    runs: int,
    seed: int,
    workdir: Path,
    phases: tuple[str, ...] = PHASES,
    nested: float = 0.25,
    log: Any = None,
    plan: list[tuple[str, Kill, Kill | None]] | None = None,
) -> Summary:
    """Kill ``runs`` children (plus nested recovery kills), checking the store after each.

    ``plan`` fixes the first runs: (phase, kill, kill of a recovery child or None); the rest
    are drawn from ``seed``.
    """
    rng = random.Random(seed)
    plan = list(plan or [])
    summary = Summary()
    started = time.perf_counter()
    stores: dict[str, Store] = {}
    order: list[str] = []
    child_serial = 0
    for run in range(1, runs + 1):
        if plan:
            phase, first_kill, nested_kill = plan.pop(0)
            attempts = [(phase, first_kill)] + ([("recovery", nested_kill)] if nested_kill else [])
        else:
            if not order:
                order = list(phases)
                rng.shuffle(order)
            phase = order.pop()
            attempts = [(phase, draw_kill(phase, rng))]
            if rng.random() < nested:
                attempts.append(("recovery", draw_kill("recovery", rng)))
        if phase not in stores:
            folder = workdir / phase
            folder.mkdir(parents=True, exist_ok=True)
            stores[phase] = Store(phase, folder / "memory.duckdb", folder / "docs")
        store = stores[phase]
        problems: list[str] = []
        first_serial = child_serial + 1
        for child_phase, kill in attempts:
            child_serial += 1
            t0 = time.perf_counter()
            result = run_child(store, child_phase, child_serial, rng.randrange(2**31), kill)
            child_s = time.perf_counter() - t0
            apply_lines(store, result.lines, child_serial)
            marks = [line[5:] for line in result.lines if line.startswith("mark ")]
            landed = marks[-1] if marks else "startup"
            if result.returncode != -signal.SIGKILL:
                problems.append(
                    f"{child_phase} child ended with rc={result.returncode} instead of being killed:\n"
                    f"{result.stderr[-2000:]}"
                )
            summary.kills_by_mode[result.killed_by if kill.mode == "mark" else "timer"] += 1
            summary.landed_in[landed] += 1
            if child_phase == "recovery":
                summary.nested_recovery_kills += 1
            else:
                summary.kills_by_phase[child_phase] += 1
            if log:
                log(
                    f"run {run:3d} {child_phase:>13} kill {kill.describe():<24} landed in {landed:<14} "
                    f"({child_s:.1f} s)"
                )
        # The files as the kill left them, before recovery touches them: kept if the run fails.
        snapshot = workdir / "last-kill"
        shutil.rmtree(snapshot, ignore_errors=True)
        shutil.copytree(store.path.parent, snapshot)
        t0 = time.perf_counter()
        problems += verify(store, summary, first_serial, rng)
        summary.runs += 1
        if log:
            log(
                f"        verified in {time.perf_counter() - t0:.1f} s: {len(store.items)} items acknowledged"
            )
        if problems:
            keep = workdir / "failures" / f"run-{run:03d}-{phase}"
            shutil.copytree(snapshot, keep, dirs_exist_ok=True)
            summary.failures += [f"run {run} ({phase}, seed {seed}): {p}" for p in problems]
            if log:
                for p in problems:
                    log(f"  FAIL {p}")
            # Start that phase again on a fresh file: later runs must not inherit the damage.
            stores.pop(phase)
            shutil.rmtree(store.path.parent)
    summary.seconds = time.perf_counter() - started
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=50, help="children to kill (default 50)")
    parser.add_argument("--seed", type=int, default=1, help="seed of every random choice (default 1)")
    parser.add_argument("--phases", default=",".join(PHASES), help="comma-separated workloads")
    parser.add_argument("--nested", type=float, default=0.25, help="share of runs that also kill a recovery")
    parser.add_argument("--workdir", help="keep the memory files here (default: a temporary folder)")
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per kill on stderr")
    args = parser.parse_args(argv)
    phases = tuple(p for p in args.phases.split(",") if p)
    unknown = set(phases) - set(PHASES)
    if unknown:
        parser.error(f"unknown phases {sorted(unknown)}; choose from {', '.join(PHASES)}")
    log = (lambda message: print(message, file=sys.stderr, flush=True)) if args.verbose else None
    with tempfile.TemporaryDirectory(prefix="nbmemory-crash-") as tmp:
        workdir = Path(args.workdir) if args.workdir else Path(tmp)
        summary = run_campaign(args.runs, args.seed, workdir, phases, args.nested, log)
    print(summary.line(), file=sys.stderr)
    print(json.dumps(summary.to_dict()))
    return 1 if summary.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
