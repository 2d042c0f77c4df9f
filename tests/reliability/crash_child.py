"""One workload on one memory file, until the process is killed: the child of the crash harness.

Started by :mod:`tests.reliability.crash_harness`, never by pytest directly::

    python -m tests.reliability.crash_child '{"path": ..., "phase": "remember", ...}'

It writes one line per event to stdout and flushes it, so what the parent has read is exactly
what the child had finished when it died:

* ``ready``: the store is open;
* ``mark NAME``: about to run step NAME (an API call, or a SQL statement such as ``commit``,
  ``checkpoint``, ``hnsw-create``, ``fts-build``), and ``mark committed`` just after a COMMIT;
* ``intent JSON``: a change that may or may not land (an update, a forget, a model switch, a
  file deletion): both outcomes are correct after a kill;
* ``ack JSON``: a change whose call returned; it must survive any kill that follows.

``NBMEMORY_CRASH_AT=NAME:N:MS`` makes the child SIGKILL itself MS milliseconds after the N-th
``mark NAME`` (0 ms: at once, before the step runs); a timer thread fires while DuckDB runs the
statement, because DuckDB releases the GIL.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nbmemory import Memory, private
from nbmemory.embed import FakeEmbedder
from nbmemory.ingest.redact import redact
from nbmemory.store import fts, vectors
from nbmemory.store.db import Database

#: How long a workload waits for the change queue to take a batch before it gives up.
CHILD_WAIT_S = 20.0

WORDS = [
    "alpha",
    "bravo",
    "cache",
    "delta",
    "engine",
    "fabric",
    "garden",
    "harbor",
    "index",
    "jacket",
    "kernel",
    "ladder",
    "matrix",
    "notebook",
    "orbit",
    "parser",
    "quartz",
    "river",
    "signal",
    "tensor",
    "update",
    "vector",
    "window",
    "yellow",
    "zebra",
    "deploy",
    "rotate",
    "backup",
    "schema",
    "cluster",
    "latency",
    "budget",
    "sprint",
    "ticket",
    "review",
]

# SQL statements worth a named kill point: (text the statement contains, mark name).
SQL_MARKS = (
    ("PRAGMA create_fts_index", "fts-build"),
    ("USING HNSW", "hnsw-create"),
    ("DROP INDEX", "hnsw-drop"),
    ("hnsw_compact_index", "hnsw-compact"),
    ("INSERT INTO vectors_new", "reembed-batch"),
    ("RENAME TO vectors", "reembed-swap"),
    ("INSERT INTO passages", "passages-insert"),
    ("INSERT INTO model_versions", "version-record"),
)


def emit(kind: str, payload: Any = None) -> None:
    line = (
        kind if payload is None else f"{kind} {payload if isinstance(payload, str) else json.dumps(payload)}"
    )
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class Marks:
    """Counts named points and kills the process at the one named by ``NBMEMORY_CRASH_AT``."""

    def __init__(self, spec: str | None) -> None:
        self.counts: Counter[str] = Counter()
        self.target: tuple[str, int, float] | None = None
        if spec:
            name, nth, delay = spec.rsplit(":", 2)
            self.target = (name, int(nth), float(delay))

    def __call__(self, name: str) -> None:
        self.counts[name] += 1
        emit("mark", name)
        if self.target is None or self.target[0] != name or self.counts[name] != self.target[1]:
            return
        delay = self.target[2] / 1000
        if delay <= 0:
            os.kill(os.getpid(), signal.SIGKILL)
        timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGKILL))
        timer.daemon = True
        timer.start()


class MarkingConnection:
    """A DuckDB connection that announces the statements the harness can kill in."""

    def __init__(self, con: Any, marks: Marks) -> None:
        self._con = con
        self._marks = marks

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)

    def execute(self, sql: str, *args: Any) -> Any:
        head = sql.strip()
        if head == "COMMIT":
            self._marks("commit")
            result = self._con.execute(sql, *args)
            self._marks("committed")
            return result
        if head == "CHECKPOINT":
            self._marks("checkpoint")
        else:
            for needle, name in SQL_MARKS:
                if needle in sql:
                    self._marks(name)
                    break
        return self._con.execute(sql, *args)


def install(marks: Marks) -> None:
    original = Database.__init__

    def init(self: Database, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.con = MarkingConnection(self.con, marks)  # type: ignore[assignment]

    Database.__init__ = init  # type: ignore[method-assign]


class Child:
    def __init__(self, spec: dict[str, Any], marks: Marks) -> None:
        self.spec = spec
        self.mark = marks
        self.rng = random.Random(spec["seed"])
        self.path = Path(spec["path"])
        self.dim = int(spec["dim"])
        self.tag = str(spec["tag"])
        self.serial = 0
        self.mem = self.open(self.tag)
        self.live = [
            int(r[0])
            for r in self.mem.db.fetchall(
                "SELECT id FROM chunks WHERE deleted_at IS NULL AND kind = 'memory' ORDER BY id"
            )
        ]

    def open(self, tag: str, policy: str = "reembed") -> Memory:
        self.mark("op:open")
        return Memory(self.path, embedder=FakeEmbedder(dim=self.dim, tag=tag), on_model_change=policy)  # type: ignore[arg-type]

    # -- content --------------------------------------------------------------------------
    def token(self) -> str:
        self.serial += 1
        return f"tk{self.spec['run']}x{self.serial}"

    def text(self, token: str) -> str:
        words = " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(4, 24)))
        extra = self.rng.choice(
            ["", "", " Ünïcødé café, 東京.", " (see #42; ports 8080/443)", "\n- a list item"]
        )
        return f"{token} {words}{extra}"

    def prose(self, token: str) -> str:
        """Several sentences, well past one passage window (``store.windows.WINDOW_CHARS``)."""
        sentences = [
            " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(8, 16))).capitalize() + "."
            for _ in range(self.rng.randint(8, 14))
        ]
        return f"{token} " + " ".join(sentences)

    # -- acknowledged operations ------------------------------------------------------------
    def remember(self) -> None:
        token = self.token()
        self.mark("op:remember")
        item = self.mem.remember(self.text(token), tags=self.rng.choice([(), ("ops",), ("a", "b")]))
        emit("ack", {"op": "put", "id": item.id, "text": item.text})
        self.live.append(item.id)

    def remember_many(self, count: int, batch_size: int = 512, long: bool = False) -> None:
        texts = [(self.prose if long else self.text)(self.token()) for _ in range(count)]
        self.mark("op:remember_many")
        ids = self.mem.remember_many(texts, batch_size=batch_size)
        for item_id, text in zip(ids, texts, strict=True):
            emit("ack", {"op": "put", "id": item_id, "text": redact(text.strip()).text})
        self.live += ids

    def update(self) -> None:
        item_id = self.rng.choice(self.live)
        text = self.text(self.token())
        emit("intent", {"op": "update", "id": item_id, "text": text})
        self.mark("op:update")
        item = self.mem.update(item_id, text=text)
        emit("ack", {"op": "put", "id": item.id, "text": item.text})

    def forget(self, count: int) -> None:
        ids = self.rng.sample(self.live, min(count, len(self.live)))
        if not ids:
            return
        for item_id in ids:
            emit("intent", {"op": "forget", "id": item_id})
        self.mark("op:forget")
        self.mem.forget(ids)
        for item_id in ids:
            emit("ack", {"op": "forget", "id": item_id})
        self.live = [i for i in self.live if i not in set(ids)]

    def search(self) -> None:
        self.mark("op:search")
        self.mem.search(self.rng.choice(WORDS) + " " + self.rng.choice(WORDS), k=5)

    # -- workloads: each runs until the process is killed --------------------------------
    def phase_remember(self) -> None:
        while True:
            roll = self.rng.random()
            if roll < 0.1 and self.live:
                self.update()
            elif roll < 0.15 and self.live:
                self.forget(1)
            elif roll < 0.25:
                self.search()
            else:
                self.remember()

    def phase_remember_many(self) -> None:
        # Small enough that a batch of a few hundred counts as a bulk load: the HNSW index is
        # dropped for the load and rebuilt after it, the window docs/architecture.md, note 2, worries about.
        vectors.BULK_MIN = 50
        vectors.BULK_FRACTION = 0.0
        while True:
            self.remember_many(self.rng.choice([5, 40, 120, 300]), batch_size=self.rng.choice([16, 64, 128]))
            if self.rng.random() < 0.3:
                self.search()

    def phase_forget(self) -> None:
        import nbmemory.memory as memory_module

        memory_module.COMPACT_AFTER_DELETES = 25  # bulk forgets compact the HNSW graph
        while True:
            if len(self.live) < 150:
                self.remember_many(200, batch_size=64)
            self.forget(self.rng.choice([1, 3, 10, 30]))
            if self.rng.random() < 0.2:
                self.remember()

    def phase_index(self) -> None:
        from nbmemory.ingest import indexer

        indexer.BATCH_CHUNKS = 8  # one index call commits many small batches
        docs = Path(self.spec["docs"])
        docs.mkdir(parents=True, exist_ok=True)
        while True:
            deleted = self.change_files(docs)
            self.mark("op:index")
            report = self.mem.index(docs)
            if report.skipped:
                raise RuntimeError(f"files skipped: {report.skipped}")
            self.ack_files(docs, deleted)

    def change_files(self, docs: Path, long: bool = False) -> list[str]:
        """New files, appends to some, now and then a deletion (announced as an intent)."""
        for _ in range(self.rng.randint(1, 5)):
            self.new_file(docs, long)
        files = sorted(p for p in docs.iterdir() if p.is_file() and not p.name.startswith("."))
        for path in self.rng.sample(files, min(len(files), self.rng.randint(0, 3))):
            self.append_file(path)
        deleted = []
        if files and self.rng.random() < 0.3:
            victim = self.rng.choice(files)
            emit("intent", {"op": "unlink", "path": str(victim)})
            victim.unlink()
            deleted.append(str(victim))
        return deleted

    def ack_files(self, docs: Path, deleted: list[str]) -> None:
        for path in sorted(p for p in docs.iterdir() if p.is_file() and not p.name.startswith(".")):
            emit("ack", {"op": "file", "path": str(path), "tokens": file_tokens(path)})
        for path_name in deleted:
            emit("ack", {"op": "unlink", "path": path_name})

    def phase_passages(self) -> None:
        # Passage vectors are written after the chunks' own transaction, in small batches here:
        # kills land between a chunk's commit and its passages, and inside a batch of them.
        from nbmemory.ingest import indexer
        from nbmemory.store import passages

        indexer.BATCH_CHUNKS = 8
        passages.BATCH = 4
        docs = Path(self.spec["docs"])
        docs.mkdir(parents=True, exist_ok=True)
        while True:
            if self.rng.random() < 0.4:
                self.remember_many(self.rng.randint(3, 20), batch_size=8, long=True)
                continue
            deleted = self.change_files(docs, long=True)
            self.mark("op:index")
            report = self.mem.index(docs)
            if report.skipped:
                raise RuntimeError(f"files skipped: {report.skipped}")
            self.ack_files(docs, deleted)

    def phase_hot(self) -> None:
        # The memory-resident index (on in this child): built in a background thread at the first
        # search, kept in step by every write, built again after a bulk change.
        from nbmemory.search import hot

        while True:
            roll = self.rng.random()
            if roll < 0.25:
                self.remember_many(self.rng.choice([5, 40, 200]), batch_size=64)
            elif roll < 0.35 and self.live:
                self.forget(self.rng.randint(1, 20))
            elif roll < 0.45 and self.live:
                self.update()
            elif roll < 0.5:
                self.mark("op:hot-reset")
                hot.reset(self.mem.db)  # the next search builds it again, in the background
            elif roll < 0.7:
                self.remember()
            else:
                self.search()

    def phase_queue(self) -> None:
        # The live-memory change queue indexes what it is told changed, in debounced slices.
        from nbmemory.live import ChangeQueue

        docs = Path(self.spec["docs"])
        docs.mkdir(parents=True, exist_ok=True)
        self.mem.index(docs)  # the folder becomes a root the queue keeps current
        queue = ChangeQueue(self.mem, source="watch", quiet=0.02, max_wait=0.3, slice_files=3)
        while True:
            before = {str(p) for p in docs.iterdir()}
            deleted = self.change_files(docs)
            after = {str(p) for p in docs.iterdir()}
            changed = [(p, False) for p in sorted(after)] + [(p, True) for p in sorted(before - after)]
            self.mark("op:queue")
            queue.put_many(self.rng.sample(changed, len(changed)))
            if not queue.wait_idle(CHILD_WAIT_S):
                raise RuntimeError("the change queue did not finish in time")
            status = queue.status()
            if status["failures"] or status["error"]:
                raise RuntimeError(f"the change queue failed: {status['failures']} {status['error']}")
            self.ack_files(docs, deleted)

    def phase_owner(self) -> None:
        # This process owns the file and serves it on its socket, as a kernel does; the workload
        # runs as the owner's client, so every write is a request the owner is in the middle of.
        from nbmemory.remote.owner import OwnerServer
        from nbmemory.remote.shared import SharedMemory

        owner = self.mem
        server = OwnerServer(owner, threading.RLock())
        client = SharedMemory(owner.settings, {}, allow_owner=False)  # type: ignore[abstract]
        self.mem = client  # type: ignore[assignment]
        try:
            while True:
                roll = self.rng.random()
                if roll < 0.1 and self.live:
                    self.update()
                elif roll < 0.2 and self.live:
                    self.forget(self.rng.randint(1, 5))
                elif roll < 0.3:
                    self.remember_many(self.rng.choice([3, 30]), batch_size=16)
                elif roll < 0.4:
                    self.search()
                else:
                    self.remember()
        finally:
            server.close()

    def phase_adopt(self) -> None:
        # A tuned model's adoption (nbmemory.tune.run.adopt_version): vectors staged for the
        # candidate, swapped in, then its version recorded as active. A fake candidate stands in
        # for the trained one: training writes nothing to the memory.
        from nbmemory.store import reembed
        from nbmemory.tune import versions
        from nbmemory.tune.run import adopt_version

        if len(self.live) < 400:
            self.remember_many(400 - len(self.live), batch_size=128)
        db = self.mem.db
        while True:
            other = "b" if self.tag == "a" else "a"
            candidate = FakeEmbedder(dim=self.dim, tag=other)
            versions.with_base(db)
            version = versions.next_version(db)
            out = versions.models_dir(self.path) / version
            private.make_dir(out)  # as training makes it
            self.mark("op:stage")
            reembed.stage(db, candidate, None)
            emit("intent", {"op": "model", "tag": other})
            self.mark("op:adopt")
            adopt_version(db, self.mem._model.swap, candidate, version, out, "fake-base", {}, "crash test")
            emit("ack", {"op": "model", "tag": other, "version": version})
            self.tag = other
            for _ in range(self.rng.randint(1, 3)):
                self.remember()

    def new_file(self, docs: Path, long: bool = False) -> None:
        token = self.token()
        body = (self.prose if long else self.text)(token)
        kind = self.rng.choice(["md", "txt", "py", "ipynb"])
        path = docs / f"{token}.{kind}"
        if kind == "ipynb":
            cells = [{"cell_type": "markdown", "metadata": {}, "source": f"# Notes {token}\n\n{body}"}]
            write_atomic(
                path, json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells})
            )
        elif kind == "py":
            write_atomic(path, f"# {body}\ndef f_{token}():\n    return {self.serial}\n")
        else:
            write_atomic(path, f"# Notes {token}\n\n{body}\n")

    def append_file(self, path: Path) -> None:
        token = self.token()
        text = path.read_text()
        if path.suffix == ".ipynb":
            nb = json.loads(text)
            nb["cells"].append({"cell_type": "markdown", "metadata": {}, "source": self.text(token)})
            write_atomic(path, json.dumps(nb))
        elif path.suffix == ".py":
            write_atomic(path, text + f"\n\n# {self.text(token)}\ndef g_{token}():\n    return 0\n")
        else:
            write_atomic(path, text + f"\n{self.text(token)}\n")

    def phase_reembed(self) -> None:
        if len(self.live) < 1000:
            self.remember_many(1000 - len(self.live), batch_size=256)
        while True:
            other = "b" if self.tag == "a" else "a"
            self.mark("op:close")
            self.mem.close()
            emit("intent", {"op": "model", "tag": other})
            if self.rng.random() < 0.5:
                self.mem = self.open(other, policy="defer")
                self.mark("op:reembed")
                self.mem.reembed()
            else:
                # The other way in: a model change noticed on first use re-embeds everything.
                self.mem = self.open(other)
                self.mark("op:reembed-on-open")
                self.mem.search("vector index", k=3)
            emit("ack", {"op": "model", "tag": other})
            self.tag = other
            for _ in range(self.rng.randint(1, 3)):
                self.remember()

    def phase_fts(self) -> None:
        while True:
            for _ in range(self.rng.randint(1, 5)):
                self.remember()
            if self.live and self.rng.random() < 0.3:
                self.forget(1)
            self.mark("op:fts-rebuild")
            fts.rebuild(self.mem.db)
            if self.rng.random() < 0.3:
                self.search()

    def phase_hnsw(self) -> None:
        while True:
            self.remember_many(self.rng.randint(5, 40), batch_size=32)
            roll = self.rng.random()
            if roll < 0.4:
                self.mark("op:hnsw-rebuild")
                vectors.rebuild_index(self.mem.db)
            elif roll < 0.7:
                self.forget(self.rng.randint(1, 15))
                self.mark("op:hnsw-compact")
                vectors.compact_index(self.mem.db)
            else:
                self.mark("op:checkpoint")
                self.mem.db.execute("CHECKPOINT")

    def phase_checkpoint(self) -> None:
        # Enough vectors that writing the HNSW index at CHECKPOINT takes several milliseconds.
        if len(self.live) < 1200:
            self.remember_many(1200 - len(self.live), batch_size=256)
        while True:
            self.remember_many(self.rng.randint(50, 300), batch_size=128)
            self.forget(self.rng.randint(0, 10))
            if self.rng.random() < 0.5:
                self.mark("op:checkpoint")
                self.mem.db.execute("CHECKPOINT")
            else:
                self.mark("op:close")
                self.mem.close()  # close checkpoints: a kill here is a kill during persistence
                self.mem = self.open(self.tag)

    def phase_wal(self) -> None:
        # Committed writes that only the write-ahead log holds: no CHECKPOINT, then a kill.
        if self.live:
            self.mem.db.execute("CHECKPOINT")
        steps = [self.remember, self.update, lambda: self.forget(2), lambda: self.remember_many(30, 8)]
        for _ in range(self.rng.randint(3, 12)):
            step = self.rng.choice(steps)
            if step is not self.remember and not self.live:
                step = self.remember
            step()
        roll = self.rng.random()
        if roll < 0.3:
            vectors.rebuild_index(self.mem.db)  # the index itself rebuilt inside the log
        elif roll < 0.5:
            fts.rebuild(self.mem.db)
        self.mark("wal-ready")
        threading.Event().wait()

    def phase_recovery(self) -> None:
        # Opening replays whatever log the last kill left; then repair, search, write, close.
        self.mark("op:doctor")
        self.mem.doctor(repair=True)
        self.search()
        for _ in range(self.rng.randint(1, 4)):
            self.remember()
        self.mark("op:close")
        self.mem.close()
        emit("done")
        threading.Event().wait()


def write_atomic(path: Path, text: str) -> None:
    # An editor's save: a kill leaves the old file or the new one, never half a notebook.
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def file_tokens(path: Path) -> list[str]:
    import re

    return sorted(set(re.findall(r"\btk\d+x\d+\b", path.read_text())))


def main() -> None:
    spec = json.loads(sys.argv[1])
    if spec["phase"] == "hot":
        from nbmemory.store import vectors

        vectors.IN_MEMORY = True  # whatever the harness's environment says: this workload is about it
    marks = Marks(os.environ.get("NBMEMORY_CRASH_AT"))
    install(marks)
    child = Child(spec, marks)
    emit("ready")
    phase: Callable[[], None] = getattr(child, f"phase_{spec['phase']}")
    phase()


if __name__ == "__main__":
    main()
