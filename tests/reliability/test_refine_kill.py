"""An owner killed while it refines passages in the background: the next owner of the file goes on
from the steps it committed and finishes with every passage, the same vectors as a memory that
made them inline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from nbmemory import Memory
from nbmemory.embed import FakeEmbedder
from nbmemory.remote import connect
from nbmemory.store import passages

REPO = Path(__file__).resolve().parents[2]

# The owner: indexes the notes, says so, and SIGKILLs itself once the refiner has committed a
# few steps (a real model's pace: a few ms a text, so the kill lands well before the end).
OWNER = textwrap.dedent(
    """
    import os, signal, sys, time
    from nbmemory.embed import FakeEmbedder
    from nbmemory.remote import connect
    from nbmemory.store import passages

    class SlowFake(FakeEmbedder):
        def embed_documents(self, texts, progress=None):
            time.sleep(0.003 * len(texts))
            return super().embed_documents(texts, progress)

    path, docs = sys.argv[1:3]
    shared = connect(path, embedder=SlowFake(dim=32))
    assert shared.role == "owner", shared.role
    report = shared.index(docs)
    print("indexed", report.passages_pending, flush=True)
    mem = shared.memory
    fingerprint = mem.embedder.fingerprint
    while passages.stored_count(mem.db, fingerprint) < 100:
        time.sleep(0.002)
    print("killing at", passages.stored_count(mem.db, fingerprint), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def notes(folder: Path, count: int = 60, sentences: int = 40) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(count):
        body = " ".join(
            f"Note {n} sentence {s} is about topic{n}x{s} and nothing else." for s in range(sentences)
        )
        (folder / f"note-{n}.md").write_text(f"# Note {n}\n\n{body}\n", encoding="utf-8")
    return folder


def stored(mem: Memory) -> dict[tuple[str, int], np.ndarray]:
    rows = mem.db.fetchall("SELECT content_hash, n, vec FROM passages ORDER BY content_hash, n")
    return {(h, int(n)): np.asarray(v, dtype=np.float32) for h, n, v in rows}


def test_an_owner_killed_while_refining_is_followed_by_one_that_finishes_every_passage(
    tmp_path: Path,
) -> None:
    docs = notes(tmp_path / "notes")
    path = tmp_path / "m.duckdb"
    env = {**os.environ, "NBMEMORY_REFINE": "background", "NBMEMORY_HOME": str(tmp_path / "home")}
    out = subprocess.run(
        [sys.executable, "-c", OWNER, str(path), str(docs)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )
    assert out.returncode == -signal.SIGKILL, out.stderr[-3000:]
    lines = out.stdout.split("\n")
    assert lines[0].startswith("indexed ") and lines[1].startswith("killing at "), out.stdout
    total = int(lines[0].split()[1])

    shared = connect(path, embedder=FakeEmbedder(dim=32), refine="background")
    try:
        assert shared.role == "owner"
        refine = shared.stats()["refine"]
        # The kill landed between the first steps and the last: some passages, not all.
        assert refine["total"] == total and 0 < refine["done"] < total, refine
        assert shared.wait_refined(timeout=120) is True
        assert shared.stats()["refine"] == {"done": total, "total": total}
        mem = shared.memory
        assert passages.missing(mem.db, mem.embedder.fingerprint) == []
        assert shared.doctor().ok
        resumed = stored(mem)
    finally:
        shared.close()

    with Memory(tmp_path / "inline.duckdb", embedder=FakeEmbedder(dim=32), refine="inline") as inline:
        inline.index(docs)
        made = stored(inline)
    assert resumed.keys() == made.keys()  # each window once: the killed steps left no copy
    assert all(np.array_equal(resumed[key], made[key]) for key in made)
