"""Exact float64 cosines, before and after ``hot.cosine64`` summed rows with ``einsum``.

Builds a store of the first N benchmark chunks with passages (cached vectors of chunks and
windows), then runs each query twice, alternating the order: with the shipped ``cosine64`` and
with the previous one (``(v * q).sum(axis=1)``, row-sized float64 temporaries). Both the vector
stage (the index re-scores its best rows) and the convex stage (each candidate's passages) use
it. Prints each stage's p50 both ways and the load average.

    python -m bench.search.cosine_ab [--n 10000] [--queries 300]
    python -m bench.search.cosine_ab --store <notes evaluation store>.duckdb --namespace eval

``--store`` runs on a copy of an existing store instead (the notes evaluation store of
``nbmemory eval notes``: long notes, several windows each) with the judged notes questions.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import tempfile
from pathlib import Path

import numpy as np

from bench.lib.corpus import load_chunks, load_queries
from bench.lib.embed_cache import CachedEmbedder
from bench.lib.measure import forget_queries
from bench.lib.paths import NOTES_QUERIES

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def previous_cosine64(vecs: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``hot.cosine64`` as it was before this change."""
    v = vecs.astype(np.float64)
    q = np.asarray(query, dtype=np.float64)
    norms = np.sqrt((v * v).sum(axis=1)) * math.sqrt(float((q * q).sum()))
    return np.where(norms > 0, (v * q).sum(axis=1) / np.where(norms > 0, norms, 1.0), 0.0)


def main(argv: list[str] | None = None) -> int:
    from nbmemory import Memory
    from nbmemory.embed.sentence import SentenceTransformerEmbedder
    from nbmemory.search import hot

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--store", type=Path, help="an existing store to copy and search instead")
    parser.add_argument("--namespace", default=None, help="the namespace of --store's items")
    args = parser.parse_args(argv)
    real = SentenceTransformerEmbedder()
    shipped = hot.cosine64
    modes = {"einsum (shipped)": shipped, "previous": previous_cosine64}
    stages: dict[str, dict[str, list[float]]] = {m: {"vector": [], "convex": []} for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.duckdb"
        if args.store is not None:
            shutil.copy(args.store, path)
            mem = Memory(path, embedder=real, namespace=args.namespace)
            lines = NOTES_QUERIES.read_text().splitlines()
            queries = [json.loads(line)["query"] for line in lines]
            what = f"{args.store.name}, {mem.db.scalar('SELECT count(*) FROM passages')} passages"
        else:
            mem = Memory(path, embedder=CachedEmbedder(real, log=None))
            chunks = load_chunks(args.n)
            mem.remember_many([t for _, t in chunks], sources=[s for s, _ in chunks])
            queries = [q if isinstance(q, str) else q[1] for q in load_queries()][: args.queries + 30]
            what = f"{args.n} benchmark chunks with passages"
        for q in queries[:30]:
            mem.search(q, k=10, log=False)
        load = [os.getloadavg()]
        for j, q in enumerate(queries[30:]):
            for mode in sorted(modes, reverse=bool(j % 2)):
                hot.cosine64 = modes[mode]  # type: ignore[assignment]
                forget_queries(real)
                trace = mem.search(q, k=10, log=False).trace
                for name in ("vector", "convex"):
                    stage = trace.stage(name)
                    assert stage is not None
                    stages[mode][name].append(stage.ms)
        hot.cosine64 = shipped
        load.append(os.getloadavg())
        mem.close()
    print(f"{what}, {len(queries) - 30} queries, load average before/after {load}")
    for mode, by_stage in stages.items():
        line = ", ".join(f"{name} p50 {statistics.median(ms):.3f} ms" for name, ms in by_stage.items())
        print(f"  {line}: {mode}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
