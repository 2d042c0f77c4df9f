"""No-op and one-file reindex of a large tree: prints JSON (``--out`` also writes it).

The embedder is the deterministic fake: this measures the store and the walk, not the model
(model throughput is in ``bench.search.bench_search``).

    python -m bench.ingest.bench_reindex --files 5000 [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from nbmemory import Memory
from nbmemory.embed import FakeEmbedder
from nbmemory.eval.report import write_json

WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
]


def write_tree(root: Path, files: int) -> None:
    for i in range(files):
        folder = root / f"area{i % 50:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        body = "\n\n".join(
            f"## Part {j}\n\n" + " ".join(WORDS[(i + j + k) % len(WORDS)] for k in range(60))
            for j in range(4)
        )
        (folder / f"note{i:05d}.md").write_text(f"# Note {i}\n\n{body}\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=5000, help="markdown files in the tree")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "tree"
        write_tree(root, args.files)
        with Memory(Path(tmp) / "m.duckdb", embedder=FakeEmbedder(dim=384)) as mem:
            t0 = time.perf_counter()
            first = mem.index(root)
            t1 = time.perf_counter()
            noop = mem.index(root)
            t2 = time.perf_counter()
            target = root / "area07" / "note00007.md"
            target.write_text(target.read_text() + "\n\nOne more paragraph, edited.\n", encoding="utf-8")
            t3 = time.perf_counter()
            one = mem.index(root)
            t4 = time.perf_counter()
        result = {
            "files": args.files,
            "chunks": first.chunks_added,
            "first_index_s": round(t1 - t0, 2),
            "noop_reindex_s": round(t2 - t1, 3),
            "noop_files_unchanged": noop.files_unchanged,
            "one_file_edit_reindex_s": round(t4 - t3, 3),
            "one_file_edit_chunks_embedded": one.chunks_embedded,
        }
    print(json.dumps(result, indent=2))
    if args.out:
        write_json(result, args.out)


if __name__ == "__main__":
    main()
