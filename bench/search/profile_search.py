"""Where does one nbmemory search spend its time? A per-SQL-statement profile.

Builds (or reuses) a store of the first N benchmark chunks with cached vectors, then runs
queries with ``Database`` methods wrapped so that every statement a search issues is timed
(grouped by statement shape), and prints ``EXPLAIN ANALYZE`` of the BM25 and HNSW queries for
one query. Nothing in the package is changed: the wrapping is done on this process's objects.

    python -m bench.search.profile_search --n 50000 --queries 100 [--explain 3] [--threads 1] [--no-log]

The store is kept in ``bench/.cache/profile-<N>.duckdb`` for the next run.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from bench.lib.corpus import load_chunks, load_queries
from bench.lib.embed_cache import CACHE_DIR, CachedEmbedder, cached_vectors

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def summarize_plan(text: str, top: int = 14) -> str:
    """The slowest operators of a JSON ``EXPLAIN ANALYZE`` profile, one line each."""
    import json

    root = json.loads(text)
    ops: list[tuple[float, str]] = []

    def walk(node: dict[str, Any], depth: int) -> None:
        extra = node.get("extra_info") or {}
        what = extra.get("Table") or extra.get("Conditions") or extra.get("Groups") or ""
        if isinstance(what, list):
            what = ", ".join(map(str, what))
        ops.append(
            (
                float(node.get("operator_timing", 0.0)) * 1000,
                f"{node.get('operator_type', '?'):<18} rows={node.get('operator_cardinality', 0):>9,} "
                f"scanned={node.get('operator_rows_scanned', 0):>9,}  {str(what)[:70]}",
            )
        )
        for child in node.get("children", []):
            walk(child, depth + 1)

    walk(root, 0)
    lines = [
        f"latency {root.get('latency', 0) * 1000:.2f} ms, cpu {root.get('cpu_time', 0) * 1000:.2f} ms, "
        f"rows scanned {root.get('cumulative_rows_scanned', 0):,}"
    ]
    for ms, desc in sorted(ops, reverse=True)[:top]:
        lines.append(f"  {ms:8.3f} ms  {desc}")
    return "\n".join(lines)


def shape(sql: str) -> str:
    flat = " ".join(sql.split())
    flat = re.sub(r"'[^']*'", "'?'", flat)
    return flat[:100]


class Recorder:
    """Times every outermost ``Database`` call (wall and this process's CPU) by statement shape."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = defaultdict(list)
        self.cpu: dict[str, list[float]] = defaultdict(list)
        self.last: dict[str, tuple[str, Any]] = {}
        self.depth = 0
        self.orig_fetchall: Any = None

    def wrap(self, db: Any) -> None:
        rec = self
        orig_execute, orig_fetchall, orig_fetchone = db.execute, db.fetchall, db.fetchone
        orig_tx = db.transaction
        self.orig_fetchall = orig_fetchall

        def timed(fn):  # type: ignore[no-untyped-def]
            def inner(sql, params=None):  # type: ignore[no-untyped-def]
                if rec.depth:
                    return fn(sql, params)
                rec.depth += 1
                t, c = time.perf_counter(), time.process_time()
                try:
                    return fn(sql, params)
                finally:
                    rec.depth -= 1
                    key = shape(sql)
                    rec.times[key].append((time.perf_counter() - t) * 1000)
                    rec.cpu[key].append((time.process_time() - c) * 1000)
                    rec.last[key] = (sql, params)

            return inner

        @contextmanager
        def tx():  # type: ignore[no-untyped-def]
            t, c = time.perf_counter(), time.process_time()
            with orig_tx() as con:
                yield con
            key = "transaction (search log: whole block incl. COMMIT)"
            rec.times[key].append((time.perf_counter() - t) * 1000)
            rec.cpu[key].append((time.process_time() - c) * 1000)

        db.execute = timed(orig_execute)
        db.fetchall = timed(orig_fetchall)
        db.fetchone = timed(orig_fetchone)
        db.transaction = tx

    def explain(self, key: str) -> str:
        sql, params = self.last[key]
        plan = self.orig_fetchall("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        return summarize_plan(plan[0][1])


def build_store(path: Path, n: int, embedder: Any) -> None:
    from nbmemory import Memory

    chunks = load_chunks(n)
    texts = [t for _, t in chunks]
    cached_vectors(texts, embedder)
    mem = Memory(path, embedder=CachedEmbedder(embedder))
    t = time.perf_counter()
    mem.remember_many(texts, sources=[s for s, _ in chunks])
    print(f"built {n} chunks in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    mem.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--explain", type=int, default=3, help="EXPLAIN ANALYZE the N costliest reads")
    parser.add_argument("--threads", type=int, default=0, help="SET threads = N (0: DuckDB default)")
    parser.add_argument("--no-log", action="store_true", help="search(log=False)")
    args = parser.parse_args(argv)

    from nbmemory import Memory
    from nbmemory.embed.sentence import SentenceTransformerEmbedder

    real = SentenceTransformerEmbedder()
    path = CACHE_DIR / f"profile-{args.n}.duckdb"
    from nbmemory.errors import ModelMismatchError

    if not path.exists():
        build_store(path, args.n, real)
    try:
        mem = Memory(path, embedder=CachedEmbedder(real), on_model_change="error")
        _ = mem.embedder
    except ModelMismatchError:  # the fingerprint changed: rebuild rather than re-embed 50k chunks
        mem.close()
        for old in CACHE_DIR.glob(f"profile-{args.n}.duckdb*"):
            old.unlink()
        build_store(path, args.n, real)
        mem = Memory(path, embedder=CachedEmbedder(real), on_model_change="error")
    if args.threads:
        mem.db.execute(f"SET threads = {args.threads}")
    threads = mem.db.scalar("SELECT current_setting('threads')")
    queries = load_queries()
    for q in queries[:20]:
        mem.search(q, log=not args.no_log)
    rec = Recorder()
    rec.wrap(mem.db)
    e2e, embed, cpu = [], [], []
    stages: dict[str, list[float]] = defaultdict(list)
    for q in queries[20 : 20 + args.queries]:
        real._query_cache.clear()
        t, c = time.perf_counter(), time.process_time()
        r = mem.search(q, k=10, log=not args.no_log)
        e2e.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
        embed.append(r.trace.stage("vector").notes["embed_ms"])
        for s in r.trace.stages:
            stages[s.name].append(s.ms)
    nq = len(e2e)
    work = np.subtract(e2e, embed)
    print(
        f"{nq} queries at {args.n} chunks, DuckDB threads={threads}, load {os.getloadavg()[0]:.2f}: "
        f"e2e p50 {np.median(e2e):.2f} ms (process CPU {np.median(cpu):.2f} ms), "
        f"query embedding p50 {np.median(embed):.2f} ms, search work p50 {np.median(work):.2f} ms"
    )
    print("trace stages p50 ms:", {k: round(float(np.median(v)), 2) for k, v in stages.items()})
    print(f"\n{'calls/q':>7} {'p50 ms':>8} {'cpu p50':>8} {'ms/q':>7}  statement")
    rows = sorted(rec.times.items(), key=lambda kv: -sum(kv[1]))
    for key, values in rows:
        print(
            f"{len(values) / nq:7.2f} {np.median(values):8.3f} {np.median(rec.cpu[key]):8.3f} "
            f"{sum(values) / nq:7.2f}  {key}"
        )
    reads = [k for k, _ in rows if k in rec.last and k.lstrip("( ").upper().startswith(("SELECT", "WITH"))]
    for key in reads[: args.explain]:
        print(f"\n===== EXPLAIN ANALYZE (last query): {key}\n{rec.explain(key)}")
    mem.close()


if __name__ == "__main__":
    main()
