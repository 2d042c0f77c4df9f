"""Real-shaped memories for the search benchmarks: a folder of notes or notebooks indexed once with
the real model into a store under ``~/.cache/nbmemory/bench/`` (``$NBMEMORY_CACHE/bench``), and
reused by every later run.

A store is named for the corpus folder and a hash of its files, so an edited corpus gets a new
store. It is built into a temporary file and renamed when the index run has finished, so an
interrupted build is never mistaken for a store; the document vectors go through the evaluation's
vector cache (:class:`nbmemory.eval.cache.CachedEmbedder`), so a rerun after an interruption embeds
only what it had not embedded yet.

``python -m bench.lib.shapes DIR [DIR ...]`` builds (or finds) the stores and prints their paths.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from pathlib import Path

from nbmemory.config import cache_home

#: The namespace every benchmark store is indexed into.
NAMESPACE = "eval"


def eval_notes_store() -> Path:
    """The notes benchmark's store: the same corpus indexed by ``nbmemory eval notes`` (read, never
    written). Its name carries the store code's hash, so the newest one is the current one (the
    cache deletes those of older code when it builds another)."""
    found = sorted(
        (cache_home() / "eval" / "stores").glob("notes-jbranchaud-til-corpus-*.duckdb"),
        key=lambda p: p.stat().st_mtime,
    )
    if not found:
        raise SystemExit(
            "no notes store in the evaluation cache: `python -m bench.quality.notes_compare --skip-peers` builds it"
        )
    return found[-1]


def store_root() -> Path:
    """``$NBMEMORY_CACHE/bench``, or ``~/.cache/nbmemory/bench``."""
    return cache_home() / "bench"


def corpus_files(corpus: Path) -> list[Path]:
    """The files under ``corpus`` that indexing reads, in a stable order."""
    from nbmemory.ingest.chunking import EXTENSIONS

    return sorted(p for p in corpus.rglob("*") if p.is_file() and p.suffix.lower() in EXTENSIONS)


def corpus_key(corpus: Path) -> str:
    """A name for ``corpus``'s store: its folder names and a hash of its files' paths and bytes."""
    digest = hashlib.sha256()
    for file in corpus_files(corpus):
        digest.update(file.relative_to(corpus).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(file.read_bytes()).digest())
    name = "-".join(corpus.resolve().parts[-2:])
    return f"{name}-{digest.hexdigest()[:16]}"


def store_for(corpus: Path, log=print, fake: bool = False) -> Path:  # type: ignore[no-untyped-def]
    """The store of ``corpus`` indexed with the bundled model, built on first use (slow on a CPU);
    with ``fake``, with :class:`~nbmemory.embed.fake.FakeEmbedder` (384 dimensions): the same
    chunks, passages and files in seconds, for checking what a search reads (not its rankings)."""
    from nbmemory import Memory
    from nbmemory.eval.cache import CachedEmbedder
    from nbmemory.eval.harness import make_embedder

    corpus = corpus.resolve()
    key = corpus_key(corpus) + ("-fake" if fake else "")
    path = store_root() / f"{key}.duckdb"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.building")
    for stale in (tmp, tmp.with_name(tmp.name + ".wal")):
        stale.unlink(missing_ok=True)
    embedder = fake_embedder() if fake else CachedEmbedder(make_embedder(), key.rsplit("-", 1)[0], log=log)
    started = time.perf_counter()
    how = "the fake embedder" if fake else "the bundled model; vectors cached, so a rerun resumes"
    log(f"indexing {corpus} into {path} ({how})")
    with Memory(tmp, embedder=embedder, namespace=NAMESPACE) as mem:
        report = mem.index(str(corpus), namespace=NAMESPACE)
        items = int(mem.db.scalar("SELECT count(*) FROM chunks WHERE deleted_at IS NULL"))
    os.replace(tmp, path)
    info = {"corpus": str(corpus), "files": report.files_changed, "items": items,
            "model": embedder.name, "build_s": round(time.perf_counter() - started, 1)}
    path.with_suffix(".json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    log(f"built {path.name}: {info}")
    return path


def fake_embedder():  # type: ignore[no-untyped-def]
    """The embedder of ``--fake`` stores: deterministic, 384 dimensions like the bundled model."""
    from nbmemory.embed.fake import FakeEmbedder

    return FakeEmbedder(dim=384, tag="bench")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpora", nargs="+", type=Path)
    parser.add_argument("--fake", action="store_true", help="index with the fake embedder (seconds)")
    args = parser.parse_args(argv)
    for corpus in args.corpora:
        print(store_for(corpus, fake=args.fake))


if __name__ == "__main__":
    main()
