"""Filtered search beside unfiltered: what a namespace, kind, tag or path filter adds to a search.

A memory of ``N`` short items (a dozen words from a 3,000-word vocabulary) spread over 10
namespaces, 5 kinds, 8 tags (none to two per item) and 400 folders, written straight into the
store with the fake embedder's vectors (384 dimensions; stored once per size under
``bench/.cache``-like ``$NBMEMORY_CACHE/bench``). Queries are three to five words of the same
vocabulary, their vectors computed beforehand: the figures are search work alone.

For each query, every variant (no filter, ``namespace``, ``kind``, ``tags``, ``path``) runs once,
the order rotated from query to query; each variant's filter value changes from query to query
too (namespace ``ns<q mod 10>`` and so on). Per variant: p50/p95 of the whole search and of the
BM25 and vector stages, the retrievers' method (``memory`` or ``sql``), and the SQL statements a
search ran that read the ``chunks`` table (a count per search, over all its statements).

    python -m bench.search.bench_filters [--sizes 3000,50000] [--queries 200] [--warmup 20]
        [--k 10] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.lib.measure import dist, loadavg, log, machine_info
from bench.lib.paths import RESULTS
from bench.lib.shapes import fake_embedder, store_root
from bench.search.bench_shapes import Precomputed

os.environ.setdefault("HF_HUB_OFFLINE", "1")

NAMESPACES = [f"ns{i}" for i in range(10)]
KINDS = ["markdown", "notebook", "code", "text", "memory"]
TAGS = [f"tag{i}" for i in range(8)]
FOLDERS = 400
VOCABULARY = 3000
VARIANTS = ("none", "namespace", "kind", "tags", "path")


def _words(seed: int) -> list[str]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    out: set[str] = set()
    while len(out) < VOCABULARY:
        out.add("".join(rng.choice(letters) for _ in range(rng.randint(4, 9))))
    return sorted(out)


def build_store(n: int, embedder: Any, seed: int = 0) -> Path:
    """The store of ``n`` items (see the module docstring), made once per size."""
    from datetime import timedelta

    from nbmemory.store import chunks as chunk_rows
    from nbmemory.store import fts, vectors
    from nbmemory.store.db import Database, utcnow

    path = store_root() / f"filters-{n}-{seed}.duckdb"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    words = _words(seed)
    rows = []
    for i in range(n):
        ns = NAMESPACES[i % len(NAMESPACES)]
        text = " ".join(rng.choice(words) for _ in range(rng.randint(8, 16)))
        rows.append(
            chunk_rows.NewChunk(
                namespace=ns,
                kind=KINDS[rng.randrange(len(KINDS))],
                text=text,
                source=f"{ns}/dir{rng.randrange(FOLDERS)}/note{i}.md",
                tags=rng.sample(TAGS, rng.randint(0, 2)),
            )
        )
    log(f"filters-{n}: embedding {n} items (fake embedder)")
    vecs = np.asarray(embedder.embed_documents([r.text for r in rows]), dtype=np.float32)
    tmp = path.with_name(f".{path.name}.building")
    tmp.unlink(missing_ok=True)
    db = Database(tmp)
    vectors.start(db, embedder)
    start = utcnow() - timedelta(days=400)
    with db.transaction():
        for lo in range(0, n, 20_000):
            chunk_rows.insert(db, rows[lo : lo + 20_000], vecs[lo : lo + 20_000], utcnow())
        # Updated at times spread over 400 days (a since/until filter has something to cut).
        db.execute(
            "UPDATE chunks SET updated_at = ?::TIMESTAMP + to_microseconds((hash(id) % 34560000000000)::BIGINT)",
            [start],
        )
    fts.rebuild(db)
    db.execute("CHECKPOINT")
    db.close()
    os.replace(tmp, path)
    return path


def queries_for(count: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    words = _words(0)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 5))) for _ in range(count)]


def filters_of(variant: str, q: int) -> dict[str, Any]:
    """The search keywords of ``variant`` for the ``q``-th query."""
    if variant == "namespace":
        return {"namespace": NAMESPACES[q % len(NAMESPACES)]}
    if variant == "kind":
        return {"kind": KINDS[q % len(KINDS)]}
    if variant == "tags":
        return {"tags": [TAGS[q % len(TAGS)]]}
    if variant == "path":
        return {"path": f"{NAMESPACES[q % len(NAMESPACES)]}/dir{q % 40}*/*"}
    return {}


def bench_size(n: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import shutil

    from nbmemory import Memory
    from nbmemory.search import hot

    real = fake_embedder()
    store = build_store(n, real)
    copy = workdir / f"filters-{n}.duckdb"
    shutil.copy(store, copy)
    queries = queries_for(args.warmup + args.queries)
    embedder = Precomputed(real, {q: np.asarray(real.embed_query(q), dtype=np.float32) for q in queries})
    mem = Memory(copy, embedder=embedder, on_model_change="error")
    hot.ensure(mem.db)
    statements: list[str] = []
    execute = mem.db.execute

    def counted(sql: str, params: Any = None) -> Any:
        statements.append(sql)
        return execute(sql, params)

    mem.db.execute = counted  # type: ignore[method-assign]
    for q, text in enumerate(queries[: args.warmup]):
        for variant in VARIANTS:
            mem.search(text, k=args.k, log=False, **filters_of(variant, q))

    e2e: dict[str, list[float]] = {v: [] for v in VARIANTS}
    stage_ms: dict[str, dict[str, list[float]]] = {v: {"bm25": [], "vector": []} for v in VARIANTS}
    methods: dict[str, set[str]] = {v: set() for v in VARIANTS}
    chunk_reads: dict[str, list[int]] = {v: [] for v in VARIANTS}
    matching: dict[str, list[int]] = {v: [] for v in VARIANTS}
    hits: dict[str, list[int]] = {v: [] for v in VARIANTS}
    load_at = loadavg()
    for q, text in enumerate(queries[args.warmup :], start=args.warmup):
        turn = q % len(VARIANTS)
        for variant in VARIANTS[turn:] + VARIANTS[:turn]:
            statements.clear()
            t = time.perf_counter()
            result = mem.search(text, k=args.k, log=False, **filters_of(variant, q))
            e2e[variant].append((time.perf_counter() - t) * 1000)
            chunk_reads[variant].append(sum(1 for s in statements if "chunks" in s))
            hits[variant].append(len(result.hits))
            for name in ("bm25", "vector"):
                stage = result.trace.stage(name)
                if stage is not None:
                    stage_ms[variant][name].append(stage.ms)
                    methods[variant].add(str(stage.notes.get("method")))
                    if name == "vector" and "matching_rows" in stage.notes:
                        matching[variant].append(int(stage.notes["matching_rows"]))
    mem.close()
    copy.unlink(missing_ok=True)
    out: dict[str, Any] = {
        "items": n,
        "searches_per_variant": args.queries,
        "k": args.k,
        "loadavg_at_search": load_at,
    }
    for variant in VARIANTS:
        out[variant] = {
            "filter_example": filters_of(variant, args.warmup),
            "search_ms": dist(e2e[variant]),
            "bm25_ms": dist(stage_ms[variant]["bm25"]),
            "vector_ms": dist(stage_ms[variant]["vector"]),
            "methods": sorted(methods[variant]),
            "chunks_statements_per_search": dist([float(c) for c in chunk_reads[variant]]),
            "matching_rows_p50": float(np.median(matching[variant])) if matching[variant] else None,
            "hits_p50": float(np.median(hits[variant])),
        }
    out["loadavg_after"] = loadavg()
    return out


def print_table(r: dict[str, Any]) -> None:
    print(f"\n{r['items']} items, {r['searches_per_variant']} searches each, load {r['loadavg_at_search']}")
    print(
        f"{'filter':<11}{'p50':>8}{'p95':>8}{'bm25 p50':>10}{'vec p50':>9}{'chunks SQL':>12}{'rows':>8}  method"
    )
    for v in VARIANTS:
        s = r[v]
        rows = s["matching_rows_p50"]
        print(
            f"{v:<11}{s['search_ms']['p50']:>8.2f}{s['search_ms']['p95']:>8.2f}{s['bm25_ms']['p50']:>10.2f}"
            f"{s['vector_ms']['p50']:>9.2f}{s['chunks_statements_per_search']['mean']:>12.2f}"
            f"{'' if rows is None else int(rows):>8}  {','.join(s['methods'])}"
        )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="3000,50000", help="items per memory (comma-separated)")
    parser.add_argument("--queries", type=int, default=200, help="measured searches per variant")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--out", type=Path, default=RESULTS / "search-filters.json")
    args = parser.parse_args(argv)
    command = "python -m bench.search.bench_filters " + " ".join(argv if argv is not None else sys.argv[1:])
    result: dict[str, Any] = {
        "command": command.strip(),
        "machine": machine_info(fake_embedder()),
        "embedder": "fake (384 dims): search work, not rankings",
        "sizes": {},
    }
    with tempfile.TemporaryDirectory(prefix="nbm-filters-") as tmp:
        for size in (int(s) for s in args.sizes.split(",") if s):
            r = bench_size(size, args, Path(tmp))
            result["sizes"][str(size)] = r
            print_table(r)
    result["machine"]["loadavg_end"] = loadavg()
    result["preliminary"] = max(result["machine"]["loadavg_start"] or [0]) > 1.5
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    log(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
