"""What a search pays for looking up passages in a memory that has none.

Builds a store of the first N benchmark chunks (cached vectors, passages off, so none are
stored), then runs each query twice, alternating the order: once as shipped (a memory without
passages skips the lookup, ``passages.none_stored``) and once forced through the lookup of every
candidate's content hash. Prints the convex stage's p50 for both and the load average.

    python -m bench.search.passage_skip [--n 10000] [--queries 300]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from bench.lib.corpus import load_chunks, load_queries
from bench.lib.embed_cache import CachedEmbedder
from bench.lib.measure import forget_queries

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(argv: list[str] | None = None) -> int:
    from nbmemory import Memory
    from nbmemory.config import Settings
    from nbmemory.embed.sentence import SentenceTransformerEmbedder
    from nbmemory.store import passages

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args(argv)
    real = SentenceTransformerEmbedder()
    chunks = load_chunks(args.n)
    with tempfile.TemporaryDirectory() as tmp:
        mem = Memory(
            Path(tmp) / "m.duckdb", embedder=CachedEmbedder(real, log=None), settings=Settings(passages=False)
        )
        mem.remember_many([t for _, t in chunks], sources=[s for s, _ in chunks])
        queries = [q if isinstance(q, str) else q[1] for q in load_queries()][: args.queries + 30]
        for q in queries[:30]:
            mem.search(q, k=10, log=False)
        shipped = passages.none_stored
        convex: dict[str, list[float]] = {"skipped (shipped)": [], "looked up": []}
        load = [os.getloadavg()]
        for j, q in enumerate(queries[30:]):
            for mode in sorted(convex, reverse=bool(j % 2)):
                passages.none_stored = shipped if mode.startswith("skipped") else (lambda *a: False)
                forget_queries(real)
                stage = mem.search(q, k=10, log=False).trace.stage("convex")
                assert stage is not None
                convex[mode].append(stage.ms)
        passages.none_stored = shipped
        load.append(os.getloadavg())
        mem.close()
    print(f"{args.n} chunks, {len(queries) - 30} queries, load average before/after {load}")
    for mode, ms in convex.items():
        print(
            f"  convex stage p50 {statistics.median(ms):.3f} ms, p95 {sorted(ms)[int(0.95 * len(ms))]:.3f} ms: {mode}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
