"""The vector scan alone: the float32 scan of every row against the int8 screen
(:mod:`nbmemory.search.screen`), on the search benchmark's chunks (BEIR SciFact + NFCorpus text in
2-sentence chunks, the bundled model's vectors from its cache), one size after another, each query
both ways alternately. Per size: p50/p95 ms of each scan down to its ``L`` best rows
(``_top``, ``L`` = 50 + the rescoring margin, as the default search asks), the rows the screen
scores again in float32, the screen's build time, and a check that both give the same rows.

    python -m bench.search.screen_scan [--sizes 10000,20000,30000,50000] [--queries 200]
        [--out bench/results/screen-scan.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import numpy as np

from bench.lib.corpus import load_chunks, load_queries
from bench.lib.measure import dist, loadavg, log, machine_info
from bench.lib.paths import RESULTS

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(argv: list[str] | None = None) -> None:
    from bench.lib.embed_cache import cached_vectors
    from nbmemory.eval.harness import make_embedder
    from nbmemory.search.hot import RESCORE_MARGIN, _top
    from nbmemory.search.screen import Screen

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,20000,30000,50000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--out", default=str(RESULTS / "screen-scan.json"))
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    embedder = make_embedder()
    chunks = load_chunks(max(sizes))
    vecs = cached_vectors([text for _, text in chunks], embedder, log=log)
    queries = load_queries()[: args.queries]
    qvecs = [np.asarray(embedder.embed_query(q), dtype=np.float32) for q in queries]
    qvecs = [q / np.linalg.norm(q) for q in qvecs]
    limit = 50 + RESCORE_MARGIN
    out: dict[str, Any] = {"command": "python -m bench.search.screen_scan " + " ".join(argv or []),
                           "machine": machine_info(embedder), "limit": limit, "queries": len(queries), "sizes": {}}
    for n in sizes:
        mat = np.ascontiguousarray(vecs[:n], dtype=np.float32)
        norms = np.linalg.norm(mat, axis=1)
        inv = np.where(norms > 0, 1.0 / np.maximum(norms, 1e-30), 0.0).astype(np.float32)
        ok, ids = inv > 0, np.arange(n)
        started = time.perf_counter()
        screen = Screen.build(mat, inv)
        build_ms = (time.perf_counter() - started) * 1000
        if screen is None:
            raise SystemExit("no screen: ONNX Runtime is missing or its integer products are not exact here")
        full_ms, screen_ms, rescored, differ = [], [], [], 0
        load = loadavg()
        for j, q in enumerate(qvecs):
            for way in ((0, 1) if j % 2 == 0 else (1, 0)):
                started = time.perf_counter()
                if way == 0:
                    rows = np.flatnonzero(ok)
                    best = _top(rows, ((mat @ q) * inv)[rows], ids, limit)
                    full_ms.append((time.perf_counter() - started) * 1000)
                else:
                    got, scores = screen.scan(q, mat, inv, ok)(limit)
                    picked = _top(got, scores, ids, limit)
                    screen_ms.append((time.perf_counter() - started) * 1000)
                    rescored.append(len(got))
            differ += set(best.tolist()) != set(picked.tolist())
        out["sizes"][str(n)] = {
            "loadavg_at_start": load,
            "float32_scan_ms": dist(full_ms),
            "int8_screen_ms": dist(screen_ms),
            "rescored_rows": dist([float(r) for r in rescored]),
            "screen_build_ms": round(build_ms, 1),
            "queries_with_other_rows": differ,
        }
        log(f"{n}: float32 p50 {np.median(full_ms):.3f} ms, screen p50 {np.median(screen_ms):.3f} ms, "
            f"rescored p50 {np.median(rescored):.0f}, build {build_ms:.0f} ms, other rows {differ}")
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(out, fh, indent=2)
        fh.write("\n")
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
