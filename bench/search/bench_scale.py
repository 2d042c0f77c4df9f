"""Search at a million chunks: nbmemory beside the SQLite FTS5 + sqlite-vec reference, synthetic scale.

How the corpus is made: the first 50,000 real chunks of ``bench.lib.corpus`` (BEIR SciFact +
NFCorpus in 2-sentence chunks) with their cached MiniLM vectors (``python -m bench.lib.embed_cache
-n 50000``), each repeated ``n / 50,000`` times: copy ``c`` of a chunk is its text plus the word
``copy<c>``, and its vector is the real one plus Gaussian noise (``--noise`` per dimension, 0.02
by default: cosine about 0.93 to the original), renormalised. So BM25 sees real postings
lists twenty times longer, and the vectors keep the real ones' clusters.

The nbmemory store is written directly (``store.chunks.insert`` in batches, one FTS build at the
end), as ``Memory.remember_many`` would write it minus redaction and embedding. Queries are the
real test queries: search work alone (query vectors computed beforehand) for both systems,
interleaved query by query, then end to end with the real model. Prints the JSON and writes it
to ``--out``.

    python -m bench.search.bench_scale [--n 1000000] [--queries 200] [--no-reference] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.lib.corpus import load_chunks, load_queries
from bench.lib.embed_cache import CachedEmbedder, cached_vectors
from bench.lib.measure import dist, forget_queries, log, machine_info, p50
from bench.lib.paths import RESULTS
from bench.lib.sqlite_ref import SqliteReference

os.environ.setdefault("HF_HUB_OFFLINE", "1")

BASE = 50_000
BATCH = 25_000


def rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def synthetic(n: int, noise: float, seed: int, real: Any) -> tuple[list[str], list[str], np.ndarray]:
    chunks = load_chunks(BASE)
    texts = [t for _, t in chunks]
    vecs = cached_vectors(texts, real, log=log)
    rng = np.random.default_rng(seed)
    out_texts, out_sources = [], []
    out_vecs = np.empty((n, vecs.shape[1]), dtype=np.float32)
    for i in range(n):
        copy, base = divmod(i, BASE)
        out_texts.append(texts[base] if copy == 0 else f"{texts[base]} copy{copy}")
        out_sources.append(f"{chunks[base][0]}#copy{copy}")
    for start in range(0, n, BASE):
        stop = min(start + BASE, n)
        block = vecs[: stop - start] + (noise * rng.standard_normal((stop - start, vecs.shape[1]))).astype(
            np.float32
        ) * (start > 0)
        out_vecs[start:stop] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out_texts, out_sources, out_vecs


def build_store(
    path: Path, texts: list[str], sources: list[str], vecs: np.ndarray, cached: Any
) -> dict[str, Any]:
    from nbmemory.store import chunks as chunk_rows
    from nbmemory.store import fts, vectors
    from nbmemory.store.db import Database, utcnow

    db = Database(path)
    vectors.start(db, cached)
    t = time.perf_counter()
    for start in range(0, len(texts), BATCH):
        rows = [
            chunk_rows.NewChunk(namespace="default", kind="text", text=text, source=source)
            for text, source in zip(texts[start : start + BATCH], sources[start : start + BATCH], strict=True)
        ]
        with db.transaction():
            chunk_rows.insert(db, rows, vecs[start : start + BATCH], utcnow())
        if (start // BATCH) % 8 == 0:
            log(f"  {start + len(rows)} rows written")
    rows_s = time.perf_counter() - t
    t = time.perf_counter()
    fts.rebuild(db)
    db.execute("CHECKPOINT")
    fts_s = time.perf_counter() - t
    db.close()
    return {
        "rows_s": round(rows_s, 1),
        "fts_build_s": round(fts_s, 1),
        "file_mb": round(path.stat().st_size / 1e6),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--noise", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-reference", action="store_true", help="skip the SQLite reference")
    parser.add_argument("--workdir", default=None)
    parser.add_argument(
        "--out",
        type=Path,
        default=RESULTS / "scale-1m.json",
        help="write the JSON here (default %(default)s, the kept 1M run: pass another with another --n)",
    )
    args = parser.parse_args(argv)

    from nbmemory import Memory
    from nbmemory.embed.sentence import SentenceTransformerEmbedder
    from nbmemory.search import hot

    real = SentenceTransformerEmbedder()
    cached = CachedEmbedder(real, log=log)
    queries = load_queries()
    warm, measured = queries[: args.warmup], queries[args.warmup : args.warmup + args.queries]
    work = Path(args.workdir or tempfile.mkdtemp(prefix="nbm-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {
        "benchmark": "nbmemory search at scale (synthetic)",
        "machine": machine_info(real),
        "corpus": f"{args.n} chunks: the first {BASE} real chunks repeated, text + 'copy<c>', "
        f"vector + N(0, {args.noise}^2) per dimension, renormalised (seed {args.seed})",
        "k": 10,
    }
    log(f"making {args.n} synthetic chunks")
    texts, sources, vecs = synthetic(args.n, args.noise, args.seed, real)

    path = work / "scale.duckdb"
    log("writing the nbmemory store")
    out["nbmemory_build"] = build_store(path, texts, sources, vecs, cached)
    log(f"  {out['nbmemory_build']}")
    t = time.perf_counter()
    mem = Memory(path, embedder=cached)
    _ = mem.embedder
    open_s = time.perf_counter() - t
    t = time.perf_counter()
    index = hot.ensure(mem.db)
    assert index is not None
    out["nbmemory_build"].update(
        open_s=round(open_s, 2),
        memory_index_build_s=round(time.perf_counter() - t, 1),
        partitions=None if index.ivf is None else len(index.ivf.centroids),
        peak_rss_mb_after_nbmemory=rss_mb(),
    )
    log(f"  memory index built: {out['nbmemory_build']}")

    ref = None
    if not args.no_reference:
        log("building the SQLite reference")
        ref = SqliteReference(work / "scale.sqlite", real)
        t = time.perf_counter()
        ref.build(texts, vecs, sources)
        out["sqlite_build"] = {"build_s": round(time.perf_counter() - t, 1)}
    del texts, sources, vecs

    qvecs = {}
    for q in warm + measured:
        forget_queries(real)
        qvecs[q] = real.embed_query(q)
    cached.query_vectors = qvecs
    if ref is not None:
        ref.embedder = cached
    for q in warm:
        mem.search(q, k=10, log=False)
        if ref is not None:
            ref.search(q, k=10)

    log(f"measuring {len(measured)} queries, search work alone")
    nbm: list[float] = []
    stages: dict[str, list[float]] = {}
    ref_ms: list[float] = []
    methods: dict[str, int] = {}
    for i, q in enumerate(measured):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        for who in order:
            if who == 0:
                t = time.perf_counter()
                result = mem.search(q, k=10, log=False)
                nbm.append((time.perf_counter() - t) * 1000)
                for stage in result.trace.stages:
                    stages.setdefault(stage.name, []).append(stage.ms)
                method = result.trace.stage("vector").notes["method"]  # type: ignore[union-attr]
                methods[method] = methods.get(method, 0) + 1
            elif ref is not None:
                t = time.perf_counter()
                ref.search(q, k=10)
                ref_ms.append((time.perf_counter() - t) * 1000)
    out["search_work_ms"] = {
        "nbmemory": dist(nbm),
        "nbmemory_stages_p50": {name: p50(v) for name, v in stages.items()},
        "vector_methods": methods,
        "sqlite_reference": dist(ref_ms) if ref_ms else None,
        "ratio_p50": round(p50(nbm) / p50(ref_ms), 3) if ref_ms else None,
    }
    log(f"  {out['search_work_ms']}")

    if index.ivf is not None:
        # How much the partitions miss: the vector side's top 10 and top 50 against an exact scan.
        everything = np.ones(index.n, dtype=bool)
        recall: dict[int, list[float]] = {10: [], 50: []}
        for q in measured:
            approx = [i for i, _ in index.nearest(qvecs[q], 50, None)]
            exact = [i for i, _ in index.nearest(qvecs[q], 50, everything)]
            for k in recall:
                recall[k].append(len(set(approx[:k]) & set(exact[:k])) / k)
        out["vector_recall_vs_exact"] = {f"at_{k}": round(float(np.mean(v)), 4) for k, v in recall.items()}
        log(f"  recall of the partitions against an exact scan: {out['vector_recall_vs_exact']}")

    cached.query_vectors = None
    e2e: list[float] = []
    for q in measured[:100]:
        forget_queries(real)
        t = time.perf_counter()
        mem.search(q, k=10, log=False)
        e2e.append((time.perf_counter() - t) * 1000)
    out["nbmemory_end_to_end_ms"] = dist(e2e)
    out["peak_rss_mb"] = rss_mb()
    mem.close()
    if ref is not None:
        ref.close()
    text = json.dumps(out, indent=2)
    print(text)
    args.out.write_text(text + "\n", encoding="utf-8")
    return out


if __name__ == "__main__":
    main()
