"""Caches that make evaluation reruns take seconds.

* **Document vectors**, per (model fingerprint, dataset, text hash), in
  ``<root>/embeddings/<fingerprint>/<dataset>/block-*.npz`` (:class:`~nbmemory.embed.cache.VectorCache`).
  Each block is written to a temporary file and renamed, so an interrupted run keeps every
  finished block and resumes after it.
* **Stores**: a fully indexed evaluation store per (dataset, corpus hash, model fingerprint,
  nbmemory schema version, index options), in ``<root>/stores/``; see
  :mod:`nbmemory.eval.harness`.

``<root>`` is ``$NBMEMORY_CACHE/eval`` when ``NBMEMORY_CACHE`` is set, else
``~/.cache/nbmemory/eval``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from nbmemory.config import cache_folder
from nbmemory.embed.base import Embedder, EmbedderProxy, ProgressFn
from nbmemory.embed.cache import VectorCache, text_key

__all__ = ["BLOCK", "CachedEmbedder", "VectorCache", "cache_root", "text_key"]

#: Texts embedded (and written to the cache) per block.
BLOCK = 1024


def cache_root() -> Path:
    """``$NBMEMORY_CACHE/eval``, or ``~/.cache/nbmemory/eval`` when it is unset."""
    return cache_folder("eval")


class CachedEmbedder(EmbedderProxy):
    """An :class:`~nbmemory.embed.Embedder` whose document vectors come from a :class:`VectorCache`.

    Missing texts are embedded by the wrapped model, longest-first sorted into blocks (less
    padding per batch on CPU), and written to the cache block by block. Queries always run the
    real model (bypassing its query cache), so measured latency includes the query embedding. ``name``, ``fingerprint`` and
    ``dim`` are the wrapped model's: a store built through this wrapper is the same as one
    built with the model itself.

    Parameters
    ----------
    inner:
        The real embedder.
    dataset:
        Dataset name for the cache key.
    root:
        Cache root (default :func:`cache_root`).
    log:
        Called with progress lines while embedding.
    """

    def __init__(
        self,
        inner: Embedder,
        dataset: str,
        root: Path | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(inner)
        self.cache = VectorCache(inner.fingerprint, dataset, inner.dim, root or cache_root())
        self.log = log
        self.embedded = 0
        self.served = 0
        # Late pooling (passages from the chunk's own pass) is not cached: it goes to the model,
        # so an evaluation store's passages are made as the product makes them.
        pool = getattr(inner, "embed_with_spans", None)
        if callable(pool):
            self.embed_with_spans = pool

    @property
    def device(self) -> str:
        return str(getattr(self.inner, "device", "cpu"))

    def prefill(self, texts: Sequence[str]) -> int:
        """Embed and cache every text not cached yet; returns how many were embedded."""
        missing: dict[bytes, str] = {}
        for text in texts:
            key = text_key(text)
            if key not in self.cache and key not in missing:
                missing[key] = text
        if not missing:
            return 0
        todo = sorted(missing.items(), key=lambda kv: -len(kv[1]))
        started = time.perf_counter()
        done = 0
        if self.log:
            self.log(f"embedding {len(todo)} texts ({len(set(texts)) - len(todo)} cached) on {self.device}")
        for start in range(0, len(todo), BLOCK):
            part = todo[start : start + BLOCK]
            vecs = self.inner.embed_documents([t for _, t in part])
            self.cache.put([k for k, _ in part], vecs)
            done += len(part)
            if self.log:
                rate = done / max(time.perf_counter() - started, 1e-9)
                eta = (len(todo) - done) / max(rate, 1e-9)
                self.log(f"  {done}/{len(todo)} embedded, {rate:.1f} texts/s, eta {eta / 60:.1f} min")
        self.embedded += len(todo)
        return len(todo)

    def embed_documents(self, texts: Sequence[str], progress: ProgressFn | None = None) -> np.ndarray:
        self.prefill(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            vec = self.cache.get(text_key(text))
            if vec is None:  # pragma: no cover - prefill guarantees it
                raise RuntimeError("embedding cache lost a vector it just wrote")
            out[i] = vec
        self.served += len(texts)
        if progress is not None:
            progress(len(texts))
        return out

    def embed_query(self, text: str) -> np.ndarray:
        # The model's own query LRU would make every configuration after the first one skip the
        # embedding (for sets under its size): drop the entry so measured latency always includes it.
        lru = getattr(self.inner, "_query_cache", None)
        if isinstance(lru, dict):
            lru.pop(text, None)
        return self.inner.embed_query(text)
