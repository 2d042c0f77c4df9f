"""Document vectors kept on disk by the text they embed, so the same text is embedded once.

A :class:`VectorCache` holds one model's vectors (its fingerprint names the folder) in blocks,
``<root>/embeddings/<fingerprint>/<name>/block-*.npz``, each written to a temporary file and
renamed: an interrupted writer keeps every finished block, and processes sharing a folder read each
other's blocks (:meth:`VectorCache.refresh`).

The evaluation harness caches every dataset this way (:mod:`nbmemory.eval.cache`). Indexing uses it
when ``NBMEMORY_VECTOR_CACHE`` names a folder (:func:`from_env`): off by default, since the memory
file already keeps the vectors of what it holds; on, a new memory of texts embedded before (a
second memory file of the same notes, one rebuilt after deletion, a test suite's Jupyter servers
and kernels each indexing the sample notes) reads them instead of running the model.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from nbmemory import private

#: The variable naming the folder of the indexing cache (unset or empty: no cache).
ENV = "NBMEMORY_VECTOR_CACHE"


def text_key(text: str) -> bytes:
    """sha256 of the exact text the embedder sees."""
    return hashlib.sha256(text.encode("utf-8")).digest()


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name) or "_"


class VectorCache:
    """Cached document vectors of one model under one name.

    Parameters
    ----------
    fingerprint:
        The embedder's fingerprint (vectors of two fingerprints never mix).
    name:
        A dataset's name, or ``documents`` for the indexing cache; part of the folder name.
    dim:
        Vector size; blocks of another size are ignored.
    root:
        The folder holding ``embeddings/``.
    """

    def __init__(self, fingerprint: str, name: str, dim: int, root: Path) -> None:
        self.dir = root / "embeddings" / _safe(fingerprint) / _safe(name)
        self.dim = dim
        self._index: dict[bytes, tuple[int, int]] = {}
        self._blocks: list[np.ndarray] = []
        self._read: set[str] = set()
        self.refresh()

    def refresh(self) -> None:
        """Read the blocks written since the last read (by this process or another); a block that
        cannot be read (cut short, another size) is skipped."""
        if not self.dir.exists():
            return
        for path in sorted(self.dir.glob("block-*.npz")):
            if path.name in self._read:
                continue
            self._read.add(path.name)
            try:
                with np.load(path) as data:
                    keys, vecs = data["keys"], data["vecs"]
            except (OSError, ValueError, KeyError):
                continue
            if vecs.ndim != 2 or vecs.shape[1] != self.dim or len(keys) != len(vecs):
                continue
            self._add(keys, vecs)

    def _add(self, keys: np.ndarray, vecs: np.ndarray) -> None:
        number = len(self._blocks)
        self._blocks.append(vecs)
        for row, key in enumerate(keys):
            self._index[key.tobytes()] = (number, row)

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, key: bytes) -> bool:
        return key in self._index

    def get(self, key: bytes) -> np.ndarray | None:
        """The vector for a text key, or None."""
        loc = self._index.get(key)
        return None if loc is None else self._blocks[loc[0]][loc[1]]

    def put(self, keys: Sequence[bytes], vecs: np.ndarray) -> None:
        """Write one block (atomically) and index it."""
        private.make_dir(self.dir)
        raw = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), 32)
        vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        name = f"block-{time.time_ns()}-{os.getpid()}"
        tmp = self.dir / f".{name}.tmp.npz"
        with open(tmp, "wb", opener=private.opener) as fh:
            np.savez(fh, keys=raw, vecs=vecs)
        os.replace(tmp, self.dir / f"{name}.npz")
        self._read.add(f"{name}.npz")
        self._add(raw, vecs)


def from_env(fingerprint: str, dim: int) -> VectorCache | None:
    """The indexing cache of one model in the folder ``NBMEMORY_VECTOR_CACHE`` names, or None
    when it is unset or empty."""
    folder = os.environ.get(ENV, "").strip()
    if not folder:
        return None
    return VectorCache(fingerprint, "documents", dim, Path(folder).expanduser())
