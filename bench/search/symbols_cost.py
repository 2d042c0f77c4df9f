"""What a query's symbols cost: search with and without ``PipelineConfig.symbols``, alternating.

A symbol (``g??``, ``$0``, ``:/``; :mod:`nbmemory.search.symbols`) is looked up in a sorted
index of the places symbols can start, made from the rows the memory-resident index preloads
(once, timed here as ``head_index``), or else by scanning the chunks' text in DuckDB. This builds a store of the first N benchmark chunks (BEIR SciFact +
NFCorpus in 2-sentence chunks, :mod:`bench.lib.corpus`) with the deterministic fake embedder (the scan
does not read vectors, and the vector side's cost is the same both ways), then runs the benchmark
queries with a symbol appended, each once with symbols on and once off, alternating which goes
first. Queries without a symbol pay nothing (no lookup runs). Prints the p50/p95 of both, of
the lookup alone, of the DuckDB scan (the fallback) on 20 queries, and the load average, as JSON;
writes it to ``--out`` (default ``bench/results/symbols-cost.json``).

    python -m bench.search.symbols_cost [--sizes 10000,50000] [--queries 100] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.lib.corpus import load_chunks, load_queries
from bench.lib.paths import RESULTS
from nbmemory.eval.report import write_json

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SYMBOLS = ("5%", "+/-", "(+)-", "$0", "g??", ":/", "&&", "->", "<=", "%>%")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def measure(n: int, queries: int, workdir: Path) -> dict[str, object]:
    from nbmemory import Memory, PipelineConfig
    from nbmemory.embed.fake import FakeEmbedder
    from nbmemory.search import hot, symbols

    texts = [text for _, text in load_chunks(n)]
    with Memory(workdir / f"symbols-{n}.duckdb", embedder=FakeEmbedder(dim=384)) as mem:
        started = time.perf_counter()
        mem.remember_many(texts)
        mem.search("warm up the index", k=10, log=False)
        while hot.state(mem.db) != "serving":  # built in the background above 20k chunks
            time.sleep(0.2)
            mem.search("warm up the index", k=10, log=False)
        build_s = time.perf_counter() - started
        # Made by the first symbol search after the memory-resident index is built: timed apart.
        started = time.perf_counter()
        held = symbols._heads(mem.db) is not None
        heads_ms = (time.perf_counter() - started) * 1000
        asked = [f"{q} {SYMBOLS[i % len(SYMBOLS)]}" for i, q in enumerate(load_queries()[:queries])]
        on, off = PipelineConfig(), PipelineConfig(symbols=False)
        times: dict[str, list[float]] = {"on": [], "off": [], "lookup": [], "sql_scan": []}
        for i, query in enumerate(asked):
            order = [("on", on), ("off", off)] if i % 2 == 0 else [("off", off), ("on", on)]
            for name, config in order:
                t = time.perf_counter()
                mem.search(query, k=10, log=False, config=config)
                times[name].append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            symbols.holders(mem.db, symbols.of_query(query), "TRUE", [])
            times["lookup"].append((time.perf_counter() - t) * 1000)
            if i < 20:  # the fallback without preloaded rows (NBMEMORY_HOT=0, or past 60k chunks)
                t = time.perf_counter()
                for symbol in symbols.of_query(query):
                    symbols._scanned(mem.db, symbol, "TRUE", [])
                times["sql_scan"].append((time.perf_counter() - t) * 1000)
    return {
        "chunks": n,
        "queries": len(asked),
        "build_s": round(build_s, 1),
        "head_index": {"made": held, "ms": round(heads_ms, 1)},
        **{f"{name}_p50_ms": _pct(values, 0.5) for name, values in times.items()},
        **{f"{name}_p95_ms": _pct(values, 0.95) for name, values in times.items()},
        "added_p50_ms": round(
            statistics.median(a - b for a, b in zip(times["on"], times["off"], strict=True)), 2
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,50000", help="comma-separated chunk counts")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument(
        "--out",
        type=Path,
        default=RESULTS / "symbols-cost.json",
        help="write the JSON here (default %(default)s)",
    )
    args = parser.parse_args(argv)
    before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(int(n), args.queries, Path(tmp)) for n in args.sizes.split(",")]
    report = {
        "command": [
            "python",
            "-m",
            "bench.search.symbols_cost",
            *(argv if argv is not None else sys.argv[1:]),
        ],
        "load_average": {
            "before": [round(x, 2) for x in before],
            "after": [round(x, 2) for x in os.getloadavg()],
        },
        "sizes": rows,
    }
    print(json.dumps(report, indent=2))
    write_json(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
