"""What passages cost at index time: one fresh index of a notes folder with them and one without.

    python -m bench.ingest.passages_cost [--corpus DIR] [--torch-threads N] [--out FILE]

Both runs embed with the bundled model and no vector cache (each text embedded for real), into
new stores; "without" skips :func:`nbmemory.store.passages.fill` (how the store was before). Prints
seconds, chunks, window vectors and the store size; writes ``--out`` (default
``bench/results/passages-cost.json``).
Run it on a quiet machine: it is a timing.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.lib.paths import NOTES_CORPUS, RESULTS
from nbmemory import Memory
from nbmemory.config import set_torch_threads
from nbmemory.embed.sentence import SentenceTransformerEmbedder
from nbmemory.eval.report import write_json
from nbmemory.store import passages

OUT = RESULTS / "passages-cost.json"


def index_once(corpus: Path, embedder: SentenceTransformerEmbedder, with_passages: bool) -> dict[str, Any]:
    fill = passages.fill
    if not with_passages:
        passages.fill = lambda *args, **kwargs: 0  # type: ignore[assignment]
    try:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "m.duckdb"
            started = time.perf_counter()
            with Memory(path, embedder=embedder) as mem:
                report = mem.index(corpus)
            seconds = time.perf_counter() - started
            size = sum(f.stat().st_size for f in Path(folder).iterdir())
    finally:
        passages.fill = fill  # type: ignore[assignment]
    return {
        "passages": with_passages,
        "seconds": round(seconds, 1),
        "chunks": report.chunks_added,
        "window_vectors": report.passages_embedded,
        "store_mb": round(size / 1e6, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--corpus", default=str(NOTES_CORPUS))
    parser.add_argument("--torch-threads", type=int)
    parser.add_argument("--out", default=str(OUT), help="write the JSON here (default %(default)s)")
    args = parser.parse_args()
    set_torch_threads(args.torch_threads)
    embedder = SentenceTransformerEmbedder()
    embedder.embed_documents(["warm up the model"])
    rows = [index_once(Path(args.corpus), embedder, flag) for flag in (False, True)]
    for row in rows:
        print(row)
    load = os.getloadavg()
    print(f"index time with passages / without: {rows[1]['seconds'] / rows[0]['seconds']:.2f}; load {load}")
    write_json({"corpus": args.corpus, "runs": rows, "loadavg": load}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
