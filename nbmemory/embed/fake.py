"""A deterministic embedder for tests about plumbing, not about retrieval quality."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from nbmemory.embed.base import ProgressFn, normalise

_WORD = re.compile(r"\w+")


class FakeEmbedder:
    """Bag-of-hashed-words vectors: texts sharing words are similar, nothing is downloaded.

    Parameters
    ----------
    dim:
        Vector size.
    tag:
        Part of the fingerprint, so two fakes can pose as two different models.
    """

    def __init__(self, dim: int = 32, tag: str = "fake") -> None:
        if dim <= 0:
            raise ValueError(f"dim must be greater than 0, got {dim}")
        self._dim = dim
        self._tag = tag
        self.calls = 0
        self.texts_embedded = 0

    @property
    def name(self) -> str:
        return f"fake-{self._tag}"

    @property
    def fingerprint(self) -> str:
        return f"fake:{self._tag}:{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def _one(self, text: str) -> np.ndarray:
        vec = np.zeros(self._dim, dtype=np.float32)
        for word in _WORD.findall(text.lower()):
            digest = hashlib.blake2b(f"{self._tag}:{word}".encode(), digest_size=8).digest()
            slot = int.from_bytes(digest[:4], "little") % self._dim
            vec[slot] += 1.0 if digest[4] & 1 else -1.0
        return vec

    def embed_documents(self, texts: Sequence[str], progress: ProgressFn | None = None) -> np.ndarray:
        self.calls += 1
        self.texts_embedded += len(texts)
        out = (
            normalise(np.stack([self._one(t) for t in texts]))
            if texts
            else np.zeros((0, self._dim), dtype=np.float32)
        )
        if progress is not None:
            progress(len(texts))
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return normalise(self._one(text)[None, :])[0]
