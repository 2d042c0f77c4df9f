"""How fast a notes folder is indexed with the defaults, side by side with one bare model pass
and the peers, in one run.

    python -m bench.ingest.index_speed [--corpus DIR] [--subset SIZE:SEED] [--late] [--peers]
        [--torch-threads N] [--out FILE]

Every system embeds with the bundled all-MiniLM-L6-v2 and no vector cache (each text embedded for
real), into a new store:

* ``nbmemory default``: ``Memory.index(corpus)`` with the default settings (passages on, each
  sentence window embedded on its own: :mod:`nbmemory.store.passages`).
* ``bare pass``: one plain ``SentenceTransformer.encode`` of the very texts the chunks of that
  store embed (heading and text), at the batch size nbmemory uses (16 on CPU: the fastest there):
  the model work every system must do at least.
* ``nbmemory, passages by late pooling`` (``--late``): ``NBMEMORY_PASSAGE_METHOD=late``, each
  window pooled from its chunk's own forward pass.
* ``vstash`` / ``memsearch`` (``--peers``): their drivers (``../shared/peers``, installed by its
  ``setup.sh``) ingest the same notes; the time is the one they print.

Prints one row per system (seconds, chunks, chunks/s, seconds over the bare pass) and writes
``--out`` (default ``bench/results/index-speed.json``). A timing: run it on a quiet machine and
read the load it prints.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.lib.paths import NOTES_CORPUS, NOTES_QUERIES, RESULTS, SHARED
from nbmemory import Memory
from nbmemory.config import Settings, set_torch_threads
from nbmemory.embed.sentence import CPU_BATCH, SentenceTransformerEmbedder, bundled_model_path
from nbmemory.eval.notes import load_queries
from nbmemory.eval.report import write_json
from nbmemory.eval.subsets import cut_folder, subset
from nbmemory.store.chunks import embedding_text

OUT = RESULTS / "index-speed.json"
PEERS = {"vstash": "split", "memsearch": "flat"}


def index_once(corpus: Path, embedder: Any, label: str, method: str) -> tuple[dict[str, Any], list[str]]:
    """Index ``corpus`` into a new store, passages made by ``method``; the row, and the
    embedding texts of its chunks."""
    os.environ["NBMEMORY_PASSAGE_METHOD"] = method
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "m.duckdb"
        started = time.perf_counter()
        with Memory(path, embedder=embedder, settings=Settings(passages=True)) as mem:
            report = mem.index(corpus)
            seconds = time.perf_counter() - started
            texts = [
                embedding_text(h or "", t)
                for h, t in mem.db.fetchall("SELECT heading, text FROM chunks WHERE deleted_at IS NULL ORDER BY id")
            ]
            windows = int(mem.db.scalar("SELECT count(*) FROM passages"))
    row = {
        "system": label,
        "seconds": round(seconds, 1),
        "files": report.files_seen,
        "chunks": report.chunks_added,
        "window_vectors": windows,
    }
    return row, texts


def bare_pass(texts: list[str]) -> dict[str, Any]:
    """One plain ``SentenceTransformer.encode`` of every text (it sorts them by length itself)."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(bundled_model_path()), device="cpu")
    model.encode(["warm up the model"])
    started = time.perf_counter()
    model.encode(texts, batch_size=CPU_BATCH, normalize_embeddings=True, show_progress_bar=False)
    seconds = round(time.perf_counter() - started, 1)
    return {"system": "bare pass", "seconds": seconds, "chunks": len(texts), "batch": CPU_BATCH}


def peer_ingest(name: str, home: Path, flat: Path, work: Path) -> dict[str, Any]:
    """Run a peer's driver on the flattened notes with one query; its printed ingest time."""
    python = home / name / "venv" / "bin" / "python"
    out = work / f"{name}.jsonl"
    cmd = [str(python), "run.py", str(flat / PEERS[name]), str(flat / "queries.beir.jsonl"), "--out", str(out)]
    proc = subprocess.run(cmd, cwd=home / name, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{name} driver failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    line = next((x for x in proc.stderr.splitlines() if x.startswith("# ingest:")), "")
    seconds = re.search(r"in ([0-9.]+)s", line)
    # vstash prints "stats=... chunks=597 ...", memsearch "IndexReport(indexed_chunks=682, ...)".
    chunks = re.search(r"\bindexed_chunks=(\d+)|\bchunks=(\d+)", line)
    found = next((int(g) for g in chunks.groups() if g), None) if chunks else None
    return {
        "system": name,
        "seconds": float(seconds.group(1)) if seconds else None,
        "chunks": found,
        "driver_says": line[:300],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default=str(NOTES_CORPUS), help="notes folder (default %(default)s)")
    parser.add_argument("--subset", metavar="SIZE:SEED", help="index a memory of SIZE notes cut with SEED")
    parser.add_argument("--late", action="store_true", help="also index with NBMEMORY_PASSAGE_METHOD=late")
    parser.add_argument("--peers", action="store_true", help="also time vstash's and memsearch's ingest")
    parser.add_argument("--peers-home", type=Path, help="the peers' venvs (default $PEERS or $TMPDIR/nbm-peers)")
    parser.add_argument("--torch-threads", type=int, help="torch intra-op threads")
    parser.add_argument("--out", default=str(OUT), help="write the JSON here (default %(default)s)")
    args = parser.parse_args()
    set_torch_threads(args.torch_threads)
    corpus = Path(args.corpus)
    if args.subset:
        # The cut notes_compare makes: a quarter of the judged targets, the rest at random.
        size, seed = (int(x) for x in args.subset.split(":"))
        every = load_queries(NOTES_QUERIES, "all", corpus=corpus)
        targets = sorted({t for q in every for t in q.targets})
        cut = cut_folder(f"nbm-notes-subset-{size}-{seed}")
        shutil.rmtree(cut, ignore_errors=True)
        corpus = subset(corpus, targets, size, seed, cut / corpus.parent.name / corpus.name)
    load_before = os.getloadavg()
    embedder = SentenceTransformerEmbedder()
    embedder.embed_documents(["warm up the model"])
    rows: list[dict[str, Any]] = []
    row, texts = index_once(corpus, embedder, "nbmemory default (windows embedded alone)", "windows")
    rows.append(row)
    rows.append(bare_pass(texts))
    if args.late:
        rows.append(index_once(corpus, embedder, "nbmemory, passages by late pooling", "late")[0])
    if args.peers:
        home = args.peers_home or Path(os.environ.get("PEERS") or Path(os.environ.get("TMPDIR") or "/tmp") / "nbm-peers")
        work = Path(tempfile.mkdtemp(prefix="index-speed-"))
        try:
            queries = work / "one-query.jsonl"
            queries.write_text('{"qid": "q1", "query": "undo the last commit"}\n')
            flatten = SHARED / "peers" / "flatten.py"
            subprocess.run([sys.executable, str(flatten), str(corpus), str(queries), str(work / "flat")], check=True)
            rows += [peer_ingest(name, home, work / "flat", work) for name in PEERS]
        finally:
            shutil.rmtree(work, ignore_errors=True)
    bare = rows[1]["seconds"]
    for r in rows:
        if r.get("seconds") and r.get("chunks"):
            r["chunks_per_s"] = round(r["chunks"] / r["seconds"], 1)
        if r.get("seconds"):
            r["over_bare_pass"] = round(r["seconds"] / bare, 2)
        print(r)
    load_after = os.getloadavg()
    print(f"load before {load_before}, after {load_after}")
    write_json(
        {
            "command": ["python", "-m", "bench.ingest.index_speed", *sys.argv[1:]],
            "corpus": str(args.corpus),
            "subset": args.subset,
            "runs": rows,
            "load_before": load_before,
            "load_after": load_after,
        },
        args.out,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
