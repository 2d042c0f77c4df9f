"""The Embedder role: texts in, L2-normalised float32 vectors out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

ProgressFn = Callable[[int], None]


@runtime_checkable
class Embedder(Protocol):
    """Anything that turns text into fixed-size unit vectors.

    ``fingerprint`` identifies the weights: the store refuses to mix vectors of two
    fingerprints, so it must change whenever the vectors would.
    """

    @property
    def name(self) -> str: ...

    @property
    def fingerprint(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed_documents(self, texts: Sequence[str], progress: ProgressFn | None = None) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...


def normalise(vectors: np.ndarray) -> np.ndarray:
    """Return float32 rows scaled to unit length (zero rows stay zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    norms[norms == 0] = 1.0
    return vectors / norms


class EmbedderProxy:
    """An embedder that wraps another (a cache, a counter, a variant): the wrapped model's
    ``name``, ``fingerprint`` and ``dim``, so what it stores is indistinguishable from the
    model's. Subclasses define ``embed_documents`` and ``embed_query``; nothing else is passed
    through (an optional ability such as ``embed_with_spans`` only where a subclass says so)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def fingerprint(self) -> str:
        return self.inner.fingerprint

    @property
    def dim(self) -> int:
        return self.inner.dim
