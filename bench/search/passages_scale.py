"""What passages cost a search at scale: the first search after opening a memory reads every
passage vector of its model into memory (:func:`nbmemory.store.passages.best`), later ones look
up their candidates' only.

    python -m bench.search.passages_scale [--chunks 10000,50000] [--per-chunk 5] [--out FILE]

Synthetic: a fresh store gets ``chunks x per-chunk`` random unit passage vectors (384 dims, the
bundled model's size) under ``chunks`` content hashes, written as :func:`passages.fill` writes
them; no chunk rows, no model (what is timed does not read them). 5 per chunk is what the
jbranchaud-til notes give (11,345 windows for 2,320 chunks, all prose); a memory with code has
fewer. Per size: the first lookup after opening (the read into memory, or above
``passages.SYNC_LOAD_ROWS`` a lookup through SQL while a background thread reads), when the copy in
memory is ready, the lookups meanwhile through SQL, the median of later lookups of 80 candidates (a search's pool at k=10 is 40-100), and the process's resident memory
before and after the read. Writes ``--out`` (default ``bench/results/passages-scale.json``). A timing: run it on a
quiet machine; the load average is recorded.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.lib.paths import RESULTS
from nbmemory.eval.report import write_json
from nbmemory.store import passages
from nbmemory.store.db import Database

DIM = 384
FINGERPRINT = "synthetic"
CANDIDATES = 80


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def fill_synthetic(path: Path, chunks: int, per_chunk: int, rng: np.random.Generator) -> None:
    import pyarrow as pa

    db = Database(path)
    try:
        for first in range(0, chunks, 5_000):
            hashes = [f"h{i:09d}" for i in range(first, min(chunks, first + 5_000))]
            vecs = rng.standard_normal((len(hashes) * per_chunk, DIM)).astype(np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            table = pa.table(
                {
                    "content_hash": pa.array([h for h in hashes for _ in range(per_chunk)], type=pa.string()),
                    "fingerprint": pa.array([FINGERPRINT] * len(vecs), type=pa.string()),
                    "n": pa.array([n for _ in hashes for n in range(per_chunk)], type=pa.int32()),
                    "vec": pa.array(list(vecs), type=pa.list_(pa.float32())),
                }
            )
            with db.transaction():
                db.with_arrow(
                    "_nbm_new_passages", table, "INSERT INTO passages SELECT * FROM _nbm_new_passages"
                )
    finally:
        db.close()


def measure(chunks: int, per_chunk: int, searches: int = 200) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "m.duckdb"
        fill_synthetic(path, chunks, per_chunk, rng)
        db = Database(path)
        try:
            opened = time.perf_counter()
            query = rng.standard_normal(DIM).astype(np.float32)
            query /= np.linalg.norm(query)

            def lookup() -> float:
                picked = rng.choice(chunks, CANDIDATES, replace=False)
                started = time.perf_counter()
                passages.best(db, FINGERPRINT, query, {int(i): f"h{i:09d}" for i in picked})
                return (time.perf_counter() - started) * 1000

            before = rss_mb()
            first_ms = lookup()
            # Above passages.SYNC_LOAD_ROWS the read runs in a background thread: searches go on
            # through SQL (timed here) until it ends.
            through_sql = []
            while not isinstance(db.passage_cache.get(FINGERPRINT), dict):
                through_sql.append(lookup())
            loaded_s = time.perf_counter() - opened
            after = rss_mb()
            later = [lookup() for _ in range(searches)]
        finally:
            db.close()
    return {
        "chunks": chunks,
        "passages": chunks * per_chunk,
        "first_lookup_ms": round(first_ms, 1),
        "in_memory_after_s": round(loaded_s, 2),
        "lookups_through_sql": len(through_sql),
        "sql_lookup_p50_ms": round(statistics.median(through_sql), 2) if through_sql else None,
        "lookup_p50_ms": round(statistics.median(later), 3),
        "rss_growth_mb": round(after - before, 1),
        "vectors_mb": round(chunks * per_chunk * DIM * 4 / 2**20, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", default="10000,50000")
    parser.add_argument("--per-chunk", type=int, default=5)
    parser.add_argument(
        "--out",
        type=Path,
        default=RESULTS / "passages-scale.json",
        help="write the JSON here (default %(default)s)",
    )
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows = []
    for n in (int(x) for x in args.chunks.split(",")):
        row = measure(n, args.per_chunk)
        print(row, flush=True)
        rows.append(row)
    payload = {"rows": rows, "per_chunk": args.per_chunk}
    write_json({**payload, "load_average": {"before": load_before, "after": os.getloadavg()}}, args.out)


if __name__ == "__main__":
    main()
