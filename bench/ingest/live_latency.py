"""Live memory: how long from a save to a search that finds it, and what a burst of changes costs.

    python -m bench.ingest.live_latency --out PATH [--configs fake-2k,real-2k,fake-50k]
        [--saves 30] [--real-saves 12] [--burst 1000] [--max-build-seconds 600]

For each configuration a folder of markdown notes (BEIR SciFact + NFCorpus text, five sections a
file) is indexed into a fresh memory opened with ``connect()`` (the owner, so searches and the
live indexer's writes are serialised as they are for every front end). Then, for each source:

- ``disk``: ``nbmemory watch``'s loop (:func:`nbmemory.live.watch`, watchfiles) in a thread; a
  new note is written to disk, renamed, then deleted;
- ``lab``: a notebook saved through jupyter_server's own ``FileContentsManager.save`` (what a
  ``PUT /api/contents`` in JupyterLab runs), whose contents event reaches the server extension's
  real listener (:func:`nbmemory.server.live.start`); HTTP itself is left out;

each timed from just before the write until a search (polled every 10 ms) returns it (renamed:
returns the new path only; deleted: returns nothing). Finally a burst: 1,000 files rewritten with
the same content (embed calls must be 0), then 1,000 files changed, with searches running all the
while (their p95), until the memory holds every change.

``fake-*`` use the deterministic FakeEmbedder (the store and the plumbing: the 50k store builds in
minutes instead of hours on 2 cores); ``real-2k`` the bundled all-MiniLM-L6-v2, its store built
with ``NBMEMORY_PASSAGES=0`` to save time and its saves indexed with the default settings
(passages on). The JSON records the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from bench.lib.corpus import load_chunks, load_queries
from bench.lib.measure import dist, loadavg, log
from bench.lib.paths import RESULTS
from nbmemory.embed.base import EmbedderProxy
from nbmemory.live import SLICE_FILES

SECTIONS = 5
POLL = 0.01
TIMEOUT = 60.0


class CountingEmbedder(EmbedderProxy):
    """Counts the documents embedded (queries are not counted)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.documents = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def embed_documents(self, texts: Sequence[str], progress: Any = None) -> np.ndarray:
        self.documents += len(texts)
        return self.inner.embed_documents(texts, progress=progress)

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)


def write_corpus(folder: Path, chunks: int) -> int:
    """Markdown files of :data:`SECTIONS` sections each, holding the first ``chunks`` chunks."""
    texts = [t for _, t in load_chunks(chunks)]
    files = 0
    for start in range(0, len(texts), SECTIONS):
        sub = folder / f"d{files // 500:03d}"
        sub.mkdir(parents=True, exist_ok=True)
        body = "\n\n".join(
            f"## Section {start + i}\n\n{t}" for i, t in enumerate(texts[start : start + SECTIONS])
        )
        (sub / f"note-{files:05d}.md").write_text(f"# Note {files}\n\n{body}\n")
        files += 1
    return files


def wait_for(check: Callable[[], bool], timeout: float = TIMEOUT) -> float:
    """Seconds until ``check()`` holds (polled every :data:`POLL`); raises after ``timeout``."""
    start = time.perf_counter()
    while not check():
        if time.perf_counter() - start > timeout:
            raise TimeoutError(f"not within {timeout} s")
        time.sleep(POLL)
    return time.perf_counter() - start


def sources(mem: Any, word: str) -> set[str]:
    return {h.source for h in mem.search(word, k=5, log=False).hits if word in h.text}


def shows(mem: Any, word: str, expected: set[str]) -> Callable[[], bool]:
    """Whether a search for ``word`` returns exactly the files ``expected``."""
    return lambda: sources(mem, word) == expected


def disk_source(mem: Any, corpus: Path, saves: int) -> dict[str, Any]:
    """Write, rename and delete notes under a folder ``nbmemory watch``'s loop watches."""
    from nbmemory.live import ChangeQueue, watch

    queue = ChangeQueue(mem, source="watch")
    stop, ready = threading.Event(), threading.Event()
    thread = threading.Thread(target=watch, args=(queue, [corpus], stop, ready), daemon=True)
    thread.start()
    ready.wait(30)
    folder = corpus / "live"
    folder.mkdir(exist_ok=True)
    found, moved, gone = [], [], []
    try:
        for i in range(saves):
            word = f"livetoken{i}q{random.randrange(10**6)}"
            path = folder / f"save-{i}.md"
            target = folder / f"renamed-{i}.md"
            for action, expected, times in (
                (
                    partial(path.write_text, f"# Saved {i}\n\nThe {word} note was written just now.\n"),
                    {path},
                    found,
                ),
                (partial(path.rename, target), {target}, moved),
                (target.unlink, set(), gone),
            ):
                start = time.perf_counter()
                action()
                wait_for(shows(mem, word, {str(p) for p in expected}))
                times.append(time.perf_counter() - start)
                queue.wait_idle(TIMEOUT)
    finally:
        stop.set()
        thread.join(30)
        queue.close()
    ms = lambda xs: dist([x * 1000 for x in xs])  # noqa: E731
    return {"saves": saves, "found_ms": ms(found), "renamed_ms": ms(moved), "deleted_ms": ms(gone)}


def lab_source(mem: Any, corpus: Path, saves: int) -> dict[str, Any]:
    """Save notebooks through jupyter_server's FileContentsManager; the extension's listener hears it."""
    import nbformat
    from jupyter_server.services.contents.filemanager import FileContentsManager

    from nbmemory.server import ServerState
    from nbmemory.server.live import start

    async def run() -> dict[str, Any]:
        contents = FileContentsManager(root_dir=str(corpus))
        app = type("App", (), {"event_logger": contents.event_logger, "config": {}})()
        state = ServerState(corpus, lambda: mem)
        queue = start(app, state, scan_delay=-1)
        (corpus / "lab").mkdir(exist_ok=True)
        found, moved, gone = [], [], []

        async def until(check: Callable[[], bool]) -> None:  # polls without blocking the listener
            deadline = time.perf_counter() + TIMEOUT
            while not check():
                if time.perf_counter() > deadline:
                    raise TimeoutError("not within the deadline")
                await asyncio.sleep(POLL)

        try:
            for i in range(saves):
                word = f"labtoken{i}q{random.randrange(10**6)}"
                nb = nbformat.v4.new_notebook()
                nb.cells = [
                    nbformat.v4.new_markdown_cell(f"# Lab {i}\n\nThe {word} notebook was saved in Lab.")
                ]
                model = {"type": "notebook", "format": "json", "content": json.loads(nbformat.writes(nb))}
                path, new = f"lab/nb-{i}.ipynb", f"lab/nb-{i}-renamed.ipynb"
                for action, expected, times in (
                    (partial(contents.save, model, path), {str(corpus / path)}, found),
                    (partial(contents.rename, path, new), {str(corpus / new)}, moved),
                    (partial(contents.delete, new), set(), gone),
                ):
                    start_t = time.perf_counter()
                    action()
                    await until(shows(mem, word, expected))
                    times.append(time.perf_counter() - start_t)
                    queue.wait_idle(TIMEOUT)
        finally:
            queue.close()
        ms = lambda xs: dist([x * 1000 for x in xs])  # noqa: E731
        return {"saves": saves, "found_ms": ms(found), "renamed_ms": ms(moved), "deleted_ms": ms(gone)}

    return asyncio.run(run())


def burst(
    mem: Any, corpus: Path, counting: CountingEmbedder, size: int, slice_files: int = SLICE_FILES
) -> dict[str, Any]:
    """``size`` files rewritten unchanged, then ``size`` files changed, searches running throughout;
    the live indexer writes ``slice_files`` files per ``index`` call."""
    from nbmemory.live import ChangeQueue, watch

    queue = ChangeQueue(mem, source="watch", slice_files=slice_files)
    stop, ready = threading.Event(), threading.Event()
    thread = threading.Thread(target=watch, args=(queue, [corpus], stop, ready), daemon=True)
    thread.start()
    ready.wait(30)
    files = sorted(corpus.glob("d*/note-*.md"))[:size]
    queries = load_queries()[:200]
    out: dict[str, Any] = {"files": len(files)}
    try:
        for phase in ("unchanged", "changed"):
            before = counting.documents
            latencies: list[float] = []
            start = time.perf_counter()
            for j, f in enumerate(files):
                text = f.read_text()
                f.write_text(text if phase == "unchanged" else text + f"\nburstmark{j}z appended.\n")
            written = time.perf_counter() - start
            # Searches while the burst is indexed, until every change is in.
            sample = random.Random(1).sample(range(len(files)), min(50, len(files)))
            time.sleep(0.1)
            q = 0
            while True:
                t = time.perf_counter()
                mem.search(queries[q % len(queries)], k=10, log=False)
                latencies.append((time.perf_counter() - t) * 1000)
                q += 1
                idle = queue.wait_idle(0) and queue.batches and time.perf_counter() - start > 1.0
                if idle and (phase == "unchanged" or all(sources(mem, f"burstmark{j}z") for j in sample)):
                    break
                if time.perf_counter() - start > 1800:
                    raise TimeoutError("the burst was not indexed in 30 minutes")
            out[phase] = {
                "write_s": round(written, 3),
                "complete_s": round(time.perf_counter() - start, 3),
                "searches": len(latencies),
                "search_ms_during": dist(latencies),
                "documents_embedded": counting.documents - before,
                "batches": queue.batches,
            }
            log(f"burst {phase}: {out[phase]}")
            queue.batches = 0
    finally:
        stop.set()
        thread.join(30)
        queue.close()
    return out


def run_config(name: str, chunks: int, args: argparse.Namespace) -> dict[str, Any]:
    from nbmemory.embed import FakeEmbedder, SentenceTransformerEmbedder
    from nbmemory.remote import connect

    real = name.startswith("real")
    inner = SentenceTransformerEmbedder(device="cpu") if real else FakeEmbedder(dim=384)
    counting = CountingEmbedder(inner)
    work = Path(tempfile.mkdtemp(prefix=f"live-{name}-"))
    corpus = work / "notes"
    result: dict[str, Any] = {"embedder": inner.name, "fingerprint": inner.fingerprint}
    try:
        files = write_corpus(corpus, chunks)
        log(f"{name}: {files} files written; indexing")
        if real:
            os.environ["NBMEMORY_PASSAGES"] = "0"  # the build only: saves below use the defaults
        start = time.perf_counter()
        mem = connect(work / "m.duckdb", embedder=counting)
        report = mem.index(corpus)
        if real:
            mem.close()
            del os.environ["NBMEMORY_PASSAGES"]
            mem = connect(work / "m.duckdb", embedder=counting)
        build = time.perf_counter() - start
        stats = mem.stats()
        result |= {
            "files": files,
            "chunks": stats["items"],
            "build_s": round(build, 1),
            "loadavg_after_build": loadavg(),
        }
        result["build_passages"] = not real
        log(f"{name}: {stats['items']} chunks in {build:.0f} s ({report.files_changed} files)")
        if build > args.max_build_seconds:
            result["note"] = f"build took {build:.0f} s, over --max-build-seconds: live runs skipped"
            return result
        saves = args.real_saves if real else args.saves
        result["disk"] = disk_source(mem, corpus, saves)
        log(f"{name} disk: {result['disk']}")
        result["lab"] = lab_source(mem, corpus, saves)
        log(f"{name} lab: {result['lab']}")
        if not real and args.burst:
            result["burst"] = burst(mem, corpus, counting, args.burst, args.slice_files)
        result["loadavg_end"] = loadavg()
        mem.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=RESULTS / "live-latency.json",
        help="write the JSON here (default: %(default)s)",
    )
    parser.add_argument("--configs", default="fake-2k,real-2k,fake-50k")
    parser.add_argument("--saves", type=int, default=30)
    parser.add_argument("--real-saves", type=int, default=12)
    parser.add_argument("--burst", type=int, default=1000, help="files in the burst (0: none)")
    parser.add_argument(
        "--slice-files",
        type=int,
        default=SLICE_FILES,
        help=f"files per index call in the burst (default {SLICE_FILES})",
    )
    parser.add_argument("--max-build-seconds", type=float, default=600)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    random.seed(7)
    sizes = {"2k": 2000, "50k": 50000}
    out: dict[str, Any] = {"loadavg_start": loadavg(), "cpu_count": os.cpu_count(), "configs": {}}
    for name in args.configs.split(","):
        out["configs"][name] = run_config(name, sizes[name.split("-")[1]], args)
        if args.out:
            args.out.write_text(json.dumps(out, indent=2))
    out["loadavg_end"] = loadavg()
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
