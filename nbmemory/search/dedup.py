"""Collapse exact and near-duplicate results, keeping the best-ranked copy.

Cost per candidate: linear in its words (their regular-expression pass, cached per text), plus
one matrix-vector product with the vectors of the items kept so far, plus one substring test per
kept item at the threshold's cosine (few: containment needs both). The walk of dedup and group
(:func:`nbmemory.search.group.walk`) keeps at most ``k`` items, so a search's
dedup is linear in the candidates it offers. The gram index this replaced cost a dictionary entry
per word sequence of every kept item: a notebook search's costliest stage.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from nbmemory.search.base import Ranked
    from nbmemory.search.pool import Pool
    from nbmemory.search.trace import Trace

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
    reported as a duplicate of one kept before it (the rule of :func:`dedup`). :meth:`add` puts
    a candidate in the order without asking now whether it is a duplicate: that is worked out
    (by the same rule) only if a later candidate matches it, so the answers of :meth:`offer`
    are those an :meth:`offer` of every candidate would give.

    A near duplicate needs both a cosine of at least the threshold and one text inside the
    other, so a candidate's cosines to the candidates before it (one product with their stacked
    vectors) name the few whose words are compared. What it holds per candidate is its words, its
    id and its vector's row: no object per word sequence for the garbage collector to track (the
    count is tested in tests/search/test_stages.py).
    """

    def __init__(self, threshold: float = 0.95) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold
        self.kept: list[int] = []
        self.read = 0
        self.checked = 0
        # Per candidate, in order: id, padded words, kept (None: not asked yet), vector row or -1.
        self._ids: list[int] = []
        self._padded: list[str] = []
        self._kept: list[bool | None] = []
        self._row: list[int] = []
        # Words -> the candidate with exactly those words, or (once a second one comes) a list
        # of them in order: ints are not tracked by the garbage collector, lists are.
        self._exact: dict[str, int | list[int]] = {}
        # The vectors of the candidates with words and a vector, in order; each row's candidate.
        self._vecs: list[np.ndarray] = []
        self._at: list[int] = []
        self._mat = np.empty((0, 0), dtype=np.float64)  # rows: room made as candidates come

    def offer(self, item: int, text: str, vec: np.ndarray | None) -> tuple[int, float] | None:
        """None when ``item`` is kept; else (the kept id it duplicates, their cosine similarity)."""
        at = self._add(item, text, vec)
        match = self._duplicate_of(at)
        self._kept[at] = match is None
        if match is None:
            self.kept.append(item)
        return match

    def add(self, item: int, text: str, vec: np.ndarray | None) -> None:
        """Put ``item`` next in the order, unasked: whether it is kept is worked out only when a
        later candidate matches it (a grouped search's cells below their file's leader)."""
        self._add(item, text, vec)

    def _add(self, item: int, text: str, vec: np.ndarray | None) -> int:
        self.read += 1
        at = len(self._ids)
        w = words(text)
        self._ids.append(item)
        self._padded.append(f" {w} " if w else "")
        self._kept.append(None)
        if w:
            same = self._exact.get(w)
            if same is None:
                self._exact[w] = at
            elif isinstance(same, int):
                self._exact[w] = [same, at]
            else:
                same.append(at)
        if not w or vec is None:
            self._row.append(-1)  # never a near duplicate (no words or no vector), nor one to find
            return at
        row = np.asarray(vec, dtype=np.float64)
        n = len(self._vecs)
        if n == len(self._mat):  # room for twice as many (one memory's vectors share a length)
            grown = np.zeros((max(16, 2 * n), len(row)), dtype=np.float64)
            if n:
                grown[:n] = self._mat[:n]
            self._mat = grown
        self._mat[n] = row
        self._vecs.append(vec)
        self._at.append(at)
        self._row.append(n)
        return at

    def _is_kept(self, at: int) -> bool:
        kept = self._kept[at]
        if kept is None:
            kept = self._kept[at] = self._duplicate_of(at) is None
        return kept

    def _duplicate_of(self, at: int) -> tuple[int, float] | None:
        """The first kept candidate before ``at`` with the same words, or one holding its words or
        held by them at cosine >= threshold: (its id, their cosine); None when there is none."""
        padded = self._padded[at]
        if not padded:
            return None
        same = self._exact[padded[1:-1]]
        for other in (same,) if isinstance(same, int) else same:
            if other >= at:
                break
            if self._is_kept(other):
                return self._ids[other], 1.0
        row = self._row[at]
        if row <= 0:
            return None  # no vector, or the first one: nothing before it to be near
        vec = self._vecs[row]
        sims = self._mat[:row] @ self._mat[row]
        for before in np.flatnonzero(sims >= self.threshold - _MARGIN).tolist():
            other = self._at[before]
            held = self._padded[other]
            self.checked += 1
            if padded not in held and held not in padded:
                continue
            sim = float(self._vecs[before] @ vec)
            if sim >= self.threshold and self._is_kept(other):
                return self._ids[other], sim
        return None


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


def dedup_stage(order: Ranked, pool: Pool, trace: Trace, threshold: float) -> Ranked:
    """The ``dedup`` stage over the whole (bounded) fused pool, as the MMR path needs it (MMR
    weighs every candidate against the others); without MMR, dedup runs in the walk that stops
    at the ``k``-th group (:func:`nbmemory.search.group.walk`). No stage when nothing is dropped."""
    with trace.step("dedup", compare=True) as stage:
        ids = [i for i, _ in order]
        kept, dropped = dedup(ids, pool.texts(ids), pool.vectors(), threshold)
        if not dropped:
            trace.discard(stage)
            return order
        stage.dropped = {d: f"duplicate of #{keep} (cosine {sim:.3f})" for d, (keep, sim) in dropped.items()}
        scores = dict(order)
        out = [(i, scores[i]) for i in kept]
        stage.output = kept
        stage.scores = dict(out)
        stage.notes = {"collapsed": len(dropped), "threshold": threshold}
    return out
