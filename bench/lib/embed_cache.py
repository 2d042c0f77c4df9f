"""On-disk cache of document embeddings for the benchmarks.

Vectors live in ``bench/.cache/<embedder fingerprint>/block-<ns>-<pid>.npz``; each block holds up
to ``BLOCK`` vectors and the sha256 of the text each came from (as a (n, 32) uint8 array). A block is written to a temporary
file and renamed into place, so an interrupted run loses at most the block in progress and the
next run resumes where it stopped. Only document vectors are cached: query embeddings always run
the real model.

    python -m bench.lib.embed_cache -n 50000     # fill it for the first N chunks (resumable)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from bench.lib.paths import REPO
from nbmemory.embed.base import EmbedderProxy

CACHE_DIR = REPO / "bench" / ".cache"
BLOCK = 4096
PROBE = 16
PROBE_TOL = 1e-4


def text_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def _read_keys(keys: np.ndarray) -> list[bytes]:
    """Keys stored as (n, 32) uint8 rows; older blocks used ``S32``, which drops trailing NULs."""
    if keys.dtype == np.uint8:
        return [row.tobytes() for row in keys]
    return [bytes(k).ljust(32, b"\0") for k in keys]


class VectorCache:
    """All cached vectors of one embedder fingerprint."""

    def __init__(self, fingerprint: str, dim: int, root: Path | None = None) -> None:
        self.dir = (root or CACHE_DIR) / fingerprint
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dim = dim
        self._index: dict[bytes, tuple[int, int]] = {}
        self._blocks: dict[int, np.ndarray] = {}
        for number, path in enumerate(sorted(self.dir.glob("block-*.npz"))):
            with np.load(path) as data:
                keys = _read_keys(data["keys"])
                vecs = data["vecs"]
            if vecs.ndim != 2 or vecs.shape[1] != dim or len(keys) != len(vecs):
                continue
            self._blocks[number] = vecs
            for row, key in enumerate(keys):
                self._index[key] = (number, row)

    def __len__(self) -> int:
        return len(self._index)

    def get(self, key: bytes) -> np.ndarray | None:
        loc = self._index.get(key)
        if loc is None:
            return None
        return self._blocks[loc[0]][loc[1]]

    def add_block(self, keys: list[bytes], vecs: np.ndarray) -> None:
        # Unique per process and call: two processes filling the same cache never collide.
        number = max(self._blocks, default=-1) + 1
        name = f"block-{time.time_ns()}-{os.getpid()}"
        final = self.dir / f"{name}.npz"
        tmp = self.dir / f".{name}.tmp.npz"
        vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        raw = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), 32)
        np.savez(tmp, keys=raw, vecs=vecs)
        os.replace(tmp, final)
        self._blocks[number] = vecs
        for row, key in enumerate(keys):
            self._index[key] = (number, row)


_caches: dict[str, VectorCache] = {}


def _cache_for(embedder) -> VectorCache:  # type: ignore[no-untyped-def]
    fp = embedder.fingerprint
    if fp not in _caches:
        _caches[fp] = VectorCache(fp, embedder.dim)
    return _caches[fp]


def _adopt_equivalent(cache: VectorCache, embedder, missing: dict[bytes, str], log) -> VectorCache:  # type: ignore[no-untyped-def]
    """Reuse vectors cached under another fingerprint when the model provably gives the same ones.

    A fingerprint can change while the weights stay the same (the package changed how it
    computes fingerprints). For each other cache folder of the same dimension holding some of
    the missing texts, up to ``PROBE`` of them are embedded now; if every probe matches the
    stored vector (max |diff| <= ``PROBE_TOL``), that folder's blocks are linked into this one.
    """
    for other_dir in sorted(p for p in CACHE_DIR.iterdir() if p.is_dir() and p != cache.dir):
        other = VectorCache(other_dir.name, cache.dim)
        probe = [(k, t) for k, t in missing.items() if other.get(k) is not None][:PROBE]
        if len(probe) < min(PROBE, len(missing)):
            continue
        fresh = embedder.embed_documents([t for _, t in probe])
        stored = np.stack([other.get(k) for k, _ in probe])
        diff = float(np.abs(fresh - stored).max())
        if diff > PROBE_TOL:
            if log:
                log(f"cache {other_dir.name} differs from this model (max diff {diff:.2e}): not reused")
            continue
        for block in other_dir.glob("block-*.npz"):
            target = cache.dir / f"{block.stem}-from-{other_dir.name}.npz"
            if not target.exists():
                try:
                    os.link(block, target)
                except OSError:
                    shutil.copyfile(block, target)
        if log:
            log(
                f"fingerprint {cache.dir.name}: reusing {len(other)} vectors cached under "
                f"{other_dir.name} (same vectors on {len(probe)} probes, max diff {diff:.1e})"
            )
        _caches[cache.dir.name] = VectorCache(cache.dir.name, cache.dim)
        return _caches[cache.dir.name]
    return cache


def cached_vectors(
    texts: Sequence[str],
    embedder,  # type: ignore[no-untyped-def]
    log: Callable[[str], None] | None = None,
    block: int = BLOCK,
) -> np.ndarray:
    """float32 vectors of ``texts`` from ``embedder.embed_documents``, computing only the missing."""
    cache = _cache_for(embedder)
    keys = [text_key(t) for t in texts]
    missing: dict[bytes, str] = {}
    for key, text in zip(keys, texts, strict=True):
        if key not in missing and cache.get(key) is None:
            missing[key] = text
    if len(missing) >= PROBE:
        cache = _adopt_equivalent(cache, embedder, missing, log)
        missing = {k: t for k, t in missing.items() if cache.get(k) is None}
    if missing:
        todo = list(missing.items())
        started = time.perf_counter()
        done = 0
        if log:
            log(f"embedding {len(todo)} texts ({len(texts) - len(todo)} of {len(texts)} cached)")
        for start in range(0, len(todo), block):
            part = todo[start : start + block]
            base = done

            def progress(n: int, _base: int = base) -> None:
                nonlocal done
                done += n
                if log and (done // 512 != (done - n) // 512 or done == len(todo)):
                    rate = done / max(time.perf_counter() - started, 1e-9)
                    eta = (len(todo) - done) / max(rate, 1e-9)
                    log(f"  {done}/{len(todo)} embedded, {rate:.1f} texts/s, eta {eta / 60:.1f} min")

            vecs = embedder.embed_documents([t for _, t in part], progress=progress)
            done = base + len(part)
            cache.add_block([k for k, _ in part], vecs)
        if log:
            elapsed = time.perf_counter() - started
            log(f"embedded {len(todo)} texts in {elapsed:.1f} s ({len(todo) / elapsed:.1f} texts/s)")
    out = np.empty((len(texts), cache.dim), dtype=np.float32)
    for i, key in enumerate(keys):
        out[i] = cache.get(key)  # type: ignore[assignment]
    return out


class CachedEmbedder(EmbedderProxy):
    """Wraps a real embedder: document vectors come from the cache, queries from the model.

    ``name``, ``fingerprint`` and ``dim`` are the wrapped model's, so a store built through this
    wrapper is indistinguishable from one built with the real model.
    """

    def __init__(self, inner, log: Callable[[str], None] | None = None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(inner)
        self.log = log
        # Benchmarks set this to measure search work alone: queries found here skip the model.
        self.query_vectors: dict[str, np.ndarray] | None = None

    @property
    def device(self) -> str:
        return getattr(self.inner, "device", "cpu")

    def embed_documents(self, texts: Sequence[str], progress=None) -> np.ndarray:  # type: ignore[no-untyped-def]
        vecs = cached_vectors(texts, self.inner, log=self.log)
        if progress is not None:
            progress(len(texts))
        return vecs

    def embed_query(self, text: str) -> np.ndarray:
        if self.query_vectors is not None and text in self.query_vectors:
            return self.query_vectors[text]
        return self.inner.embed_query(text)


def _stderr(msg: str) -> None:
    print(time.strftime("%H:%M:%S"), msg, file=sys.stderr, flush=True)


def _import_embedder_class():  # type: ignore[no-untyped-def]
    """``SentenceTransformerEmbedder``, even while the rest of the package is mid-edit.

    Filling the cache needs only ``nbmemory.embed``; if the package's ``__init__`` fails to import
    (another module being written), the subpackage is loaded without it. Same class, same
    fingerprint.
    """
    try:
        from nbmemory.embed.sentence import SentenceTransformerEmbedder
    except ImportError as exc:
        import types

        _stderr(f"import nbmemory failed ({exc}); loading nbmemory.embed on its own")
        for name in [m for m in sys.modules if m == "nbmemory" or m.startswith("nbmemory.")]:
            del sys.modules[name]
        package = types.ModuleType("nbmemory")
        package.__path__ = [str(REPO / "nbmemory")]
        sys.modules["nbmemory"] = package
        from nbmemory.embed.sentence import SentenceTransformerEmbedder
    return SentenceTransformerEmbedder


def main(argv: list[str] | None = None) -> None:
    import argparse

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(description="Fill the embedding cache for the first N chunks.")
    parser.add_argument("-n", type=int, default=50_000)
    args = parser.parse_args(argv)

    from bench.lib.corpus import load_chunks

    SentenceTransformerEmbedder = _import_embedder_class()

    embedder = SentenceTransformerEmbedder()
    _stderr(f"model {embedder.name} fingerprint {embedder.fingerprint} device {embedder.device}")
    texts = [t for _, t in load_chunks(args.n)]
    vecs = cached_vectors(texts, embedder, log=_stderr)
    _stderr(f"done: {vecs.shape} vectors cached in {CACHE_DIR / embedder.fingerprint}")


if __name__ == "__main__":
    main()
