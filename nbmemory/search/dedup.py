"""Collapse exact and near-duplicate results, keeping the best-ranked copy.

Cost per candidate: linear in its words (their regular-expression pass, cached per text), plus
one matrix-vector product with the vectors of the items kept so far, plus one substring test per
kept item at the threshold's cosine (few: containment needs both). The walk of dedup and group
(:meth:`nbmemory.search.pipeline.SearchPipeline._walk`) keeps at most ``k`` items, so a search's
dedup is linear in the candidates it offers. The gram index this replaced cost a dictionary entry
per word sequence of every kept item: a notebook search's costliest stage.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence

import numpy as np

_WORD = re.compile(r"\w+")
#: Cosines are first compared in one matrix product, then again exactly for the pair found:
#: the product may round differently from the pair's own dot product by ~1e-7.
_MARGIN = 1e-4


@functools.lru_cache(maxsize=20_000)
def words(text: str) -> str:
    """The text's words, lower-cased and single-spaced: what duplicates are compared on
    (cached: the same candidates come back search after search)."""
    return " ".join(_WORD.findall(text.lower()))


class Deduper:
    """Dedup one ranking incrementally: :meth:`offer` candidates best first; each is kept or
    reported as a duplicate of one kept before it (the rule of :func:`dedup`).

    A near duplicate needs both a cosine of at least the threshold and one text inside the
    other, so a candidate's cosines to the kept items (one product with their stacked vectors)
    name the few whose words are compared. What it holds per kept item is its words, its id and
    its vector's row: no object per word sequence for the garbage collector to track (the count
    is tested in tests/search/test_stages.py).
    """

    def __init__(self, threshold: float = 0.95) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold
        self.kept: list[int] = []
        self.read = 0
        self.checked = 0
        self._exact: dict[str, int] = {}
        # The kept items with words and a vector, in kept order: id, padded words, vector.
        self._ids: list[int] = []
        self._padded: list[str] = []
        self._vecs: list[np.ndarray] = []
        self._mat = np.empty((0, 0), dtype=np.float64)  # rows: room made as items are kept

    def offer(self, item: int, text: str, vec: np.ndarray | None) -> tuple[int, float] | None:
        """None when ``item`` is kept; else (the kept id it duplicates, their cosine similarity)."""
        self.read += 1
        w = words(text)
        if w and w in self._exact:
            return self._exact[w], 1.0
        if w and vec is not None:
            match = self._near(w, vec)
            if match is not None:
                return match
        self._keep(item, w, vec)
        return None

    def _near(self, w: str, vec: np.ndarray) -> tuple[int, float] | None:
        """The first kept item (in kept order) that holds ``w`` or is held by it, at cosine >= threshold."""
        n = len(self._ids)
        if not n:
            return None
        sims = self._mat[:n] @ np.asarray(vec, dtype=np.float64)
        padded = f" {w} "
        for at in np.flatnonzero(sims >= self.threshold - _MARGIN).tolist():
            other = self._padded[at]
            self.checked += 1
            if padded not in other and other not in padded:
                continue
            sim = float(self._vecs[at] @ vec)
            if sim >= self.threshold:
                return self._ids[at], sim
        return None

    def _keep(self, item: int, w: str, vec: np.ndarray | None) -> None:
        self.kept.append(item)
        if not w:
            return
        self._exact[w] = item
        if vec is None:
            return  # never a near duplicate of anything: no need to find it
        row = np.asarray(vec, dtype=np.float64)
        n = len(self._ids)
        if n == len(self._mat):  # room for twice as many (one memory's vectors share a length)
            grown = np.zeros((max(16, 2 * n), len(row)), dtype=np.float64)
            if n:
                grown[:n] = self._mat[:n]
            self._mat = grown
        self._mat[n] = row
        self._ids.append(item)
        self._padded.append(f" {w} ")
        self._vecs.append(vec)


def dedup(
    ids: Sequence[int],
    texts: Mapping[int, str],
    vectors: Mapping[int, np.ndarray],
    threshold: float = 0.95,
) -> tuple[list[int], dict[int, tuple[int, float]]]:
    """Walk ``ids`` best first; drop an item that duplicates one already kept.

    A duplicate has the same words in the same order (case, punctuation and spacing aside), or
    its words appear, in order, inside the kept item's words (or the reverse) **and** the two
    embeddings' cosine similarity is at least ``threshold`` (a note stored again with a line
    added). Similarity alone never decides: all-MiniLM-L6-v2 puts "polars over pandas" and
    "pandas over polars" at cosine 0.994, and "the on-call owner is Priya" / "... is Marek" at
    0.89; those are different facts. No tag or metadata rule either (MemX saw a tag-signature
    rule merge distinct untagged facts and destroy recall).

    Cost: linear in the words of ``ids``' texts, plus one cosine per pair of an item and one
    kept before it (a matrix product per item, :class:`Deduper`); the MMR path calls it over
    the bounded fused pool, whose pairs MMR itself compares.

    Returns
    -------
    (kept ids in order, {dropped id: (the kept id it duplicates, cosine similarity)})
    """
    deduper = Deduper(threshold)
    dropped: dict[int, tuple[int, float]] = {}
    for i in ids:
        match = deduper.offer(i, texts.get(i, ""), vectors.get(i))
        if match is not None:
            dropped[i] = match
    return deduper.kept, dropped
