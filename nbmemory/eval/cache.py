"""Caches that make evaluation reruns take seconds.

* **Document vectors**, per (model fingerprint, dataset, text hash), in
  ``<root>/embeddings/<fingerprint>/<dataset>/block-*.npz`` (:class:`~nbmemory.embed.cache.VectorCache`).
  Each block is written to a temporary file and renamed, so an interrupted run keeps every
  finished block and resumes after it.
* **Stores**: a fully indexed evaluation store (a BEIR dataset's, :mod:`nbmemory.eval.harness`;
  a notes folder's, :mod:`nbmemory.eval.notes`), in ``<root>/stores/``, reused only while
  everything that decides its contents is the same (:func:`store_key`): the corpus (every
  document or file, its name and content), the model fingerprint, the ingest settings, the schema
  version and the code that ingests and stores.

``<root>`` is ``$NBMEMORY_CACHE/eval`` when ``NBMEMORY_CACHE`` is set, else
``~/.cache/nbmemory/eval``.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nbmemory import private
from nbmemory.config import cache_folder
from nbmemory.embed.base import Embedder, EmbedderProxy, ProgressFn
from nbmemory.embed.cache import VectorCache, text_key
from nbmemory.store.migrations import SCHEMA_VERSION

__all__ = [
    "BLOCK",
    "CachedEmbedder",
    "StoreInfo",
    "VectorCache",
    "cache_root",
    "cached_store",
    "code_version",
    "store_key",
    "text_key",
]

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


# -- stores ----------------------------------------------------------------------------------------
@dataclass
class StoreInfo:
    """The evaluation store and what building it cost."""

    path: Path
    documents: int
    items: int
    reused: bool
    build_s: float = 0.0
    embed_s: float = 0.0
    embedded: int = 0
    skipped_empty: int = 0


def code_version(root: Path | None = None) -> str:
    """A hash of the code that decides what an indexed store holds: the facade (``memory.py``),
    ``store/`` and ``ingest/`` (chunking, redaction, readers), every module of them.

    Parameters
    ----------
    root:
        The package folder (default: this nbmemory's).
    """
    root = root or Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    files = [root / "memory.py", *sorted((root / "store").rglob("*.py")), *sorted((root / "ingest").rglob("*.py"))]
    for file in files:
        digest.update(file.relative_to(root).as_posix().encode() + b"\0")
        digest.update(file.read_bytes())
    return digest.hexdigest()[:12]


def store_key(name: str, corpus: str, fingerprint: str, settings: Mapping[str, Any]) -> str:
    """The key of an evaluation store: a store is reused only under the same key.

    Everything that changes what the store holds goes in: its ``name``, the ``corpus`` (a digest
    of every document or file: names and contents), the model's ``fingerprint``, the ingest
    ``settings``, nbmemory's schema version and :func:`code_version`.
    """
    parts = {
        "name": name,
        "corpus": corpus,
        "fingerprint": fingerprint,
        "settings": dict(settings),
        "schema": SCHEMA_VERSION,
        "code": code_version(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def cached_store(
    name: str,
    corpus: str,
    fingerprint: str,
    settings: Mapping[str, Any],
    build: Callable[[Path], StoreInfo],
    meta: Mapping[str, Any] | None = None,
    log: Callable[[str], None] | None = None,
) -> StoreInfo:
    """The evaluation store of ``name``: reused from ``<root>/stores`` when one was built under the
    same :func:`store_key`, else ``build(path)``.

    A store is built under a temporary name and renamed when complete, then marked with a JSON
    file; an interrupted build is never reused. A new store replaces the stores of the same name,
    model and settings (of another corpus or older code): they would never be reused.

    Parameters
    ----------
    name:
        Dataset name, the start of the file name.
    corpus, fingerprint, settings:
        What :func:`store_key` reads besides the schema and code versions.
    build:
        Builds the store at the path it is given and says what it holds.
    meta:
        More fields for the marker file.
    """
    key = store_key(name, corpus, fingerprint, settings)
    stores = cache_root() / "stores"
    private.make_dir(stores)
    final = stores / f"{name}-{key}.duckdb"
    marker = final.with_suffix(".json")
    if final.exists() and marker.exists():
        saved = json.loads(marker.read_text(encoding="utf-8"))
        if log:
            log(f"reusing the indexed store {final}")
        return StoreInfo(
            path=final,
            documents=int(saved["documents"]),
            items=int(saved["items"]),
            reused=True,
            skipped_empty=int(saved.get("skipped_empty", 0)),
        )
    building = stores / f".{name}-{key}.{os.getpid()}.building.duckdb"
    for stale in (building, Path(f"{building}.wal")):
        stale.unlink(missing_ok=True)
    info = build(building)
    os.replace(building, final)
    if Path(f"{building}.wal").exists():
        os.replace(f"{building}.wal", f"{final}.wal")
    info.path = final
    family = {"dataset": name, "fingerprint": fingerprint, "settings": json.loads(json.dumps(settings, default=str))}
    _drop_superseded(stores, family, keep=final)
    record = {
        "family": family,
        "dataset": name,
        "corpus": corpus,
        "fingerprint": fingerprint,
        "schema": SCHEMA_VERSION,
        "documents": info.documents,
        "items": info.items,
        "skipped_empty": info.skipped_empty,
        **(meta or {}),
        "build_s": round(info.build_s, 2),
    }
    private.write_text(marker, json.dumps(record, indent=2, default=str))
    return info


def _drop_superseded(stores: Path, family: Mapping[str, Any], keep: Path) -> None:
    # Stores of the same name, model and settings under another key are dead weight.
    for marker in stores.glob("*.json"):
        store = marker.with_suffix(".duckdb")
        if store == keep:
            continue
        try:
            meta = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if meta.get("family") == family:
            for path in (store, Path(f"{store}.wal"), marker):
                path.unlink(missing_ok=True)
