"""A first index, as a person waits for it: one bare model pass, the time until the memory is
searchable, and the time until its passages are complete, side by side in one run.

    python -m bench.ingest.first_index [--shapes notes,notebooks,mix,vault] [--notes DIR] [--notes-n N]
        [--notebooks DIR] [--notebooks-n 67] [--mix-chunks 50000] [--vault-files 17000] [--inline]
        [--bare-windows] [--bare-first] [--bare-from FILE] [--refine-wait S] [--static] [--static-only] [--peers] [--peers-home DIR] [--torch-threads N] [--out FILE]

Each shape is a folder indexed into a new store with the bundled all-MiniLM-L6-v2, no vector cache
(each text embedded for real), the model loaded and warmed before the clock starts:

* ``notes``: the jbranchaud-til notes (1,871; ``--notes-n N`` the first N files);
* ``notebooks``: the hf-notebooks corpus, its first ``--notebooks-n`` notebooks (67);
* ``mix``: copies of both, each copy's title (a note's H1, a notebook's first markdown cell)
  marked with its copy number so every chunk is new text, until about ``--mix-chunks`` chunks;
* ``vault`` (not in the default list: hours on 2 cores): marked copies of the notes until
  ``--vault-files`` files (17,000), a large Obsidian-style vault.

Per shape:

* ``bare pass``: one plain ``SentenceTransformer.encode`` of the very texts the store's chunks
  embed (heading and text), batch 16 (nbmemory's CPU batch): the least model work there is;
  ``--bare-windows`` also times one of those texts and every passage (sentence window) text;
  ``--bare-first`` times it before the index, over the chunker's texts (checked afterwards to be
  the store's), so a long run's quiet stretch holds both the bare pass and the time to searchable;
  ``--bare-from FILE`` takes it from an earlier result of this command (its row says so);
* ``nbmemory (background)``: ``Memory.index`` with the default ``refine="background"``:
  ``searchable_s`` when it returns (chunks stored with BM25 and their own vectors),
  ``complete_s`` when ``Memory.wait_refined()`` returns (every passage stored);
* ``nbmemory (inline)`` (``--inline``): ``refine="inline"``: searchable and complete together;
* ``nbmemory (static, background)`` (``--static``): the static model distilled from the same
  model (:mod:`nbmemory.embed.static`, ``NBMEMORY_MODEL=static``), distilled before the clock;
* ``vstash`` / ``memsearch`` (``--peers``, markdown shapes only: their drivers read markdown
  notes): their drivers (``../shared/peers``, installed by its ``setup.sh``) ingest the same
  notes; the time is the one they print.

Prints one row per system and writes ``--out`` (default ``bench/results/first-index.json``) with
the load average before and after. A timing: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.ingest.index_speed import PEERS, bare_pass, peer_ingest
from bench.lib.paths import NOTES_CORPUS, RESULTS, SHARED
from nbmemory import Memory
from nbmemory.config import Settings, set_torch_threads
from nbmemory.embed.sentence import SentenceTransformerEmbedder
from nbmemory.embed.static import StaticEmbedder
from nbmemory.eval.report import write_json
from nbmemory.ingest.chunking import chunk_file
from nbmemory.store import passages
from nbmemory.store.chunks import embedding_text

OUT = RESULTS / "first-index.json"
NOTEBOOKS = SHARED / "datasets" / "notebooks" / "hf-notebooks" / "corpus"


def first_files(corpus: Path, pattern: str, n: int | None, target: Path) -> Path:
    """The first ``n`` files of ``corpus`` matching ``pattern`` (sorted by path; all when None),
    copied under ``target`` with their folders."""
    files = sorted(corpus.rglob(pattern))
    for path in files if n is None else files[:n]:
        dest = target / path.relative_to(corpus)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
    return target


def marked_copy(path: Path, copy: int) -> bytes:
    """``path`` with its title marked by ``copy``: a note's first heading line, or a notebook's new
    first markdown cell. Every chunk embeds its heading, so every chunk of the copy is new text."""
    if path.suffix == ".ipynb":
        nb = json.loads(path.read_text(encoding="utf-8"))
        cell = {"cell_type": "markdown", "metadata": {}, "source": [f"# {path.stem}, copy {copy}\n"]}
        nb["cells"] = [cell, *nb.get("cells", [])]
        return json.dumps(nb).encode()
    lines = path.read_text(encoding="utf-8").splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith("#")), None)
    if at is None:
        lines.insert(0, f"# {path.stem}, copy {copy}")
    else:
        lines[at] = f"{lines[at]} (copy {copy})"
    return ("\n".join(lines) + "\n").encode()


def mix_folder(sources: list[Path], chunks: int, target: Path) -> Path:
    """Marked copies of the files of ``sources`` (round after round) until about ``chunks`` chunks."""
    files = [
        (source, p) for source in sources for p in sorted(source.rglob("*")) if p.suffix in (".md", ".ipynb")
    ]
    sizes = {}
    for _, path in files:
        try:
            sizes[path] = len(chunk_file(str(path), path.read_bytes()))
        except Exception:  # a file the indexer would skip
            sizes[path] = 0
    made, copy = 0, 0
    while made < chunks and any(sizes.values()):
        for source, path in files:
            if made >= chunks:
                break
            if not sizes[path]:
                continue
            dest = target / f"copy{copy:03d}" / source.name / path.relative_to(source)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(marked_copy(path, copy))
            made += sizes[path]
        copy += 1
    return target


def vault_folder(notes: Path, files: int, target: Path) -> Path:
    """Marked copies of the notes (round after round) until ``files`` files."""
    sources = sorted(notes.rglob("*.md"))
    for i in range(files if sources else 0):
        path, copy = sources[i % len(sources)], i // len(sources)
        dest = target / f"copy{copy:03d}" / path.relative_to(notes)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(marked_copy(path, copy))
    return target


def chunker_texts(folder: Path) -> list[str]:
    """The embedding texts of every chunk the indexer will store from ``folder``'s files."""
    texts = []
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            try:
                drafts = chunk_file(str(path), path.read_bytes())
            except Exception:  # a file the indexer skips
                continue
            texts += [embedding_text(d.heading or "", d.text) for d in drafts]
    return texts


def nbmemory_run(
    folder: Path, embedder: Any, refine: str, workdir: Path, label: str = "", wait: float | None = None
) -> tuple[dict[str, Any], list[str], list[str]]:
    """Index ``folder`` into a new store; the row, its chunks' embedding texts, and its passages' texts.
    ``wait``: the most seconds to wait for the passages after the index returns (None: until done);
    a row that ran out says how many passages were stored by then, and has no ``complete_s``."""
    path = workdir / f"{refine}{label}.duckdb"
    started = time.perf_counter()
    with Memory(path, embedder=embedder, settings=Settings(passages=True), refine=refine) as mem:  # type: ignore[arg-type]
        report = mem.index(folder)
        searchable = time.perf_counter() - started
        done = mem.wait_refined(wait)
        complete = time.perf_counter() - started
        stored = int(mem.db.scalar("SELECT count(*) FROM passages"))
        rows = mem.db.fetchall("SELECT heading, text, kind FROM chunks WHERE deleted_at IS NULL ORDER BY id")
    texts = [embedding_text(h or "", t) for h, t, _ in rows]
    windows = [w for h, t, k in rows for w in passages.texts_of(h or "", t, k)]
    row = {
        "system": f"nbmemory ({label.strip('-') + ', ' if label else ''}{refine})",
        "searchable_s": round(searchable, 1),
        "complete_s": round(complete, 1) if done else None,
        "refining_s_when_stopped": None if done else round(complete - searchable, 1),
        "files_per_s_searchable": round(report.files_seen / searchable, 1) if searchable else None,
        "files": report.files_seen,
        "chunks": report.chunks_added,
        "chunks_embedded": report.chunks_embedded,
        "vectors_reused": report.vectors_reused,
        "passages": stored,
        "passages_left_to_refiner": report.passages_pending,
    }
    return row, texts, windows


def earlier_bare_pass(path: str, shape: str) -> dict[str, Any]:
    """The bare pass row of ``shape`` in an earlier result file, marked as taken from it."""
    data = json.loads(Path(path).read_text())
    for row in data["runs"]:
        if row.get("shape") == shape and row["system"] == "bare pass":
            return {**row, "system": f"bare pass (from {Path(path).name})", "from": " ".join(data["command"])}
    raise SystemExit(f"{path} holds no bare pass of the {shape!r} shape")


def run_shape(
    name: str, folder: Path, embedder: Any, args: argparse.Namespace, workdir: Path
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    bare = None
    if args.static_only:
        row = nbmemory_run(folder, args.static, "background", workdir, "-static")[0]
        row["shape"] = name
        return [row]
    if args.bare_from:
        bare = earlier_bare_pass(args.bare_from, name)
    elif args.bare_first:
        drafted = chunker_texts(folder)
        bare = bare_pass(drafted)
        print(bare, flush=True)
    row, texts, windows = nbmemory_run(folder, embedder, "background", workdir, wait=args.refine_wait)
    rows.append(row)
    if bare is None:
        bare = bare_pass(texts)
    elif args.bare_from:
        bare["same_chunk_count"] = bare["chunks"] == len(texts)
    else:
        bare["same_texts_as_store"] = sorted(drafted) == sorted(texts)
    rows.insert(0, bare)
    if args.bare_windows:
        both = bare_pass(texts + windows)
        both["system"] = "bare pass, chunks and passages"
        rows.insert(1, both)
    if args.inline:
        rows.append(nbmemory_run(folder, embedder, "inline", workdir)[0])
    if args.static is not None:
        rows.append(nbmemory_run(folder, args.static, "background", workdir, "-static")[0])
    if args.peers and name != "notebooks":
        home = args.peers_home or Path(
            os.environ.get("PEERS") or Path(os.environ.get("TMPDIR") or "/tmp") / "nbm-peers"
        )
        work = Path(tempfile.mkdtemp(prefix="first-index-peers-"))
        try:
            queries = work / "one-query.jsonl"
            queries.write_text('{"qid": "q1", "query": "undo the last commit"}\n')
            flatten = SHARED / "peers" / "flatten.py"
            subprocess.run(
                [sys.executable, str(flatten), str(folder), str(queries), str(work / "flat")], check=True
            )
            rows += [peer_ingest(peer, home, work / "flat", work) for peer in PEERS]
        finally:
            shutil.rmtree(work, ignore_errors=True)
    for r in rows:
        r["shape"] = name
        if bare["seconds"]:
            for key in ("seconds", "searchable_s", "complete_s"):
                if r.get(key):
                    r[f"{key.removesuffix('_s')}_over_bare_pass"] = round(r[key] / bare["seconds"], 2)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--shapes", default="notes,notebooks,mix", help="notes, notebooks, mix, vault (comma-separated)"
    )
    parser.add_argument("--notes", type=Path, default=NOTES_CORPUS, help="notes folder (default %(default)s)")
    parser.add_argument("--notes-n", type=int, help="the first N notes only")
    parser.add_argument(
        "--notebooks", type=Path, default=NOTEBOOKS, help="notebooks folder (default %(default)s)"
    )
    parser.add_argument(
        "--notebooks-n", type=int, default=67, help="the first N notebooks (default %(default)s)"
    )
    parser.add_argument(
        "--mix-chunks", type=int, default=50_000, help="chunks in the mix (default %(default)s)"
    )
    parser.add_argument(
        "--vault-files", type=int, default=17_000, help="files in the vault (default %(default)s)"
    )
    parser.add_argument("--inline", action="store_true", help="also index with refine='inline' (the old way)")
    parser.add_argument(
        "--bare-windows", action="store_true", help="also time a bare pass over chunks and passages"
    )
    parser.add_argument(
        "--refine-wait",
        type=float,
        help="wait at most this many seconds for the passages after the index returns (default: until done)",
    )
    parser.add_argument(
        "--bare-first", action="store_true", help="time the bare pass before the index (see above)"
    )
    parser.add_argument(
        "--static", action="store_true", help="also index with the static model (NBMEMORY_MODEL=static)"
    )
    parser.add_argument(
        "--static-only",
        action="store_true",
        help="index with the static model only (no bare pass: a 17,000-file vault takes hours with the model)",
    )
    parser.add_argument("--peers", action="store_true", help="also time vstash's and memsearch's ingest")
    parser.add_argument(
        "--peers-home", type=Path, help="the peers' venvs (default $PEERS or $TMPDIR/nbm-peers)"
    )
    parser.add_argument(
        "--bare-from",
        metavar="FILE",
        help="take the bare pass from an earlier result of this command on this machine instead of "
        "timing it again (a long shape's complete time then fits a session)",
    )
    parser.add_argument("--torch-threads", type=int, help="torch intra-op threads")
    parser.add_argument("--out", default=str(OUT), help="write the JSON here (default %(default)s)")
    args = parser.parse_args(argv)
    set_torch_threads(args.torch_threads)
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    unknown = sorted(set(shapes) - {"notes", "notebooks", "mix", "vault"})
    if unknown:
        raise SystemExit(f"unknown shape(s) {', '.join(unknown)}: give notes, notebooks, mix or vault")
    load_before = os.getloadavg()
    embedder = SentenceTransformerEmbedder()
    embedder.embed_documents(["warm up the model"])
    embedder.embed_query("warm up the query path")
    # Distilled (or read from the cache) before any clock starts, like the model's load.
    args.static = StaticEmbedder() if args.static or args.static_only else None
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="first-index-") as tmp:
        work = Path(tmp)
        notes = first_files(args.notes, "*.md", args.notes_n, work / "notes")
        notebooks = None
        if {"notebooks", "mix"} & set(shapes):
            notebooks = first_files(args.notebooks, "*.ipynb", args.notebooks_n, work / "notebooks")
        for shape in shapes:
            if shape == "notes":
                folder = notes
            elif shape == "notebooks":
                assert notebooks is not None
                folder = notebooks
            elif shape == "vault":
                folder = vault_folder(notes, args.vault_files, work / "vault")
            else:
                assert notebooks is not None
                folder = mix_folder([notes, notebooks], args.mix_chunks, work / "mix")
            stores = work / f"stores-{shape}"
            stores.mkdir()
            for row in run_shape(shape, folder, embedder, args, stores):
                print(row, flush=True)
                rows.append(row)
    load_after = os.getloadavg()
    print(f"load before {load_before}, after {load_after}; device {embedder.device}")
    write_json(
        {
            "command": [
                "python",
                "-m",
                "bench.ingest.first_index",
                *(argv if argv is not None else sys.argv[1:]),
            ],
            "shapes": shapes,
            "device": embedder.device,
            "model_load": "before the clock (the model is loaded and warmed once)",
            "runs": rows,
            "load_before": load_before,
            "load_after": load_after,
        },
        args.out,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
