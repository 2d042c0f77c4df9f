"""Collapse exact and near-duplicate results, keeping the best-ranked copy.

Cost: linear in the words of the candidates read, plus one check (a dot product, then a
substring test) per pair of candidates that share their rarest three-word sequence. No
candidate is compared with every kept one: a notebook's candidates (dozens of cells of one
file, hundreds read for ten results) made the all-pairs comparison the costliest stage.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence

import numpy as np

_WORD = re.compile(r"\w+")
#: Containment is found through word sequences of this length (shorter texts use their whole).
GRAM = 3


@functools.lru_cache(maxsize=20_000)
def words(text: str) -> str:
    """The text's words, lower-cased and single-spaced: what duplicates are compared on
    (cached: the same candidates come back search after search)."""
    return " ".join(_WORD.findall(text.lower()))


def _grams(tokens: Sequence[str], size: int) -> set[str]:
    """Every run of ``size`` consecutive words of ``tokens``, as one string."""
    return {" ".join(tokens[at : at + size]) for at in range(len(tokens) - size + 1)}


#: A posting: the one kept item holding a key, or (only once a second one does) a list of them.
#: Ints are not tracked by the garbage collector, lists are: a list per word sequence of every
#: kept item made dedup the search's main source of collections (bench/search/bench_shapes.py).
_Posting = int | list[int]
_NONE: tuple[int, ...] = ()


def _post(index: dict[str, _Posting], key: str, item: int) -> None:
    held = index.get(key)
    if held is None:
        index[key] = item
    elif isinstance(held, int):
        index[key] = [held, item]
    else:
        held.append(item)


def _items(held: _Posting | None) -> Sequence[int]:
    if held is None:
        return _NONE
    return (held,) if isinstance(held, int) else held


class Deduper:
    """Dedup one ranking incrementally: :meth:`offer` candidates best first; each is kept or
    reported as a duplicate of one kept before it (the rule of :func:`dedup`).

    Kept items are indexed by their word sequences of :data:`GRAM` words (all their words when
    they have fewer), so a candidate is checked only against the kept items it could contain or
    be contained in:

    - a kept item inside the candidate ends with one of the candidate's sequences (looked up
      by its last sequence: chunks of one file share their first words, the heading path);
    - a kept item holding the candidate holds every sequence of the candidate, so the rarest
      of them among the kept items names all it could be. A candidate of fewer than
      :data:`GRAM` words looks up its whole sequence among the kept items' sequences of that
      many words, indexed only once such a candidate comes (most searches see none).

    Cost per candidate: linear in its words (one sequence per word), plus one check per kept
    item found that way. What it keeps per kept item is strings, ints and its vector, plus a
    list only for a sequence that two kept items share: few objects for the garbage collector
    to track (the count is tested in tests/search/test_stages.py).
    """

    def __init__(self, threshold: float = 0.95) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold
        self.kept: list[int] = []
        self.read = 0
        self.checked = 0
        self._exact: dict[str, int] = {}
        self._padded: dict[int, str] = {}
        self._vec: dict[int, np.ndarray] = {}
        self._position: dict[int, int] = {}
        # Every sequence of GRAM words of a kept item -> the kept items holding it.
        self._holding: dict[str, _Posting] = {}
        # Sequences of fewer words (size -> sequence -> kept items), for the shorter candidates:
        # built for a size when the first candidate of that many words comes.
        self._holding_short: dict[int, dict[str, _Posting]] = {}
        # The last sequence of a kept item (GRAM words, or all of a shorter one) -> those items.
        # The last, not the first: chunks of one file begin alike (their heading path).
        self._ending: dict[str, _Posting] = {}
        # The lengths of the kept items shorter than GRAM words: their whole is their ending.
        self._short_endings: set[int] = set()

    def offer(self, item: int, text: str, vec: np.ndarray | None) -> tuple[int, float] | None:
        """None when ``item`` is kept; else (the kept id it duplicates, their cosine similarity)."""
        self.read += 1
        w = words(text)
        if w and w in self._exact:
            return self._exact[w], 1.0
        if not w or vec is None:
            # Never a near duplicate (no words or no vector), nor one to find: kept, not indexed.
            self._keep(item, w, [], set(), None)
            return None
        tokens = w.split()
        grams = _grams(tokens, min(GRAM, len(tokens)))
        match = self._near(w, tokens, grams, vec)
        if match is not None:
            return match
        self._keep(item, w, tokens, grams, vec)
        return None

    def _near(self, w: str, tokens: list[str], grams: set[str], vec: np.ndarray) -> tuple[int, float] | None:
        """The first kept item (in kept order) that holds ``w`` or is held by it, at cosine >= threshold.

        ``grams``: the candidate's sequences of min(GRAM, its length) words.
        """
        found: set[int] = set()
        # Kept items held by the candidate end with one of its sequences: of GRAM words, or of
        # the length of a shorter kept item.
        ending = self._ending
        size = len(tokens)
        for length in self._short_endings:
            if length < min(GRAM, size):
                for gram in _grams(tokens, length):
                    if gram in ending:
                        found.update(_items(ending[gram]))
        for gram in grams:
            if gram in ending:
                found.update(_items(ending[gram]))
        # Kept items holding the candidate hold every one of its sequences.
        holding = self._holding if size >= GRAM else self._short(size)
        rarest: Sequence[int] = _NONE
        for n, gram in enumerate(grams):
            held = _items(holding.get(gram))
            if not held:
                rarest = _NONE
                break
            if n == 0 or len(held) < len(rarest):
                rarest = held
        found.update(rarest)
        padded = f" {w} "
        for j in sorted(found, key=self._position.__getitem__):
            other = self._padded[j]
            vj = self._vec.get(j)
            self.checked += 1
            if vj is None or (padded not in other and other not in padded):
                continue
            sim = float(vj @ vec)
            if sim >= self.threshold:
                return j, sim
        return None

    def _short(self, size: int) -> dict[str, _Posting]:
        """The kept items' sequences of ``size`` (< GRAM) words, indexed now if not yet (once)."""
        index = self._holding_short.get(size)
        if index is None:
            index = self._holding_short[size] = {}
            for j in self._padded:  # every indexed kept item, in kept order
                for gram in _grams(self._padded[j].split(), size):
                    _post(index, gram, j)
        return index

    def _keep(self, item: int, w: str, tokens: list[str], grams: set[str], vec: np.ndarray | None) -> None:
        self._position[item] = len(self.kept)
        self.kept.append(item)
        if not w:
            return
        self._exact[w] = item
        if vec is None:
            return  # never a near duplicate of anything: no need to find it
        self._vec[item] = vec
        self._padded[item] = f" {w} "
        if len(tokens) >= GRAM:
            for gram in grams:
                _post(self._holding, gram, item)
        for size, index in self._holding_short.items():
            for gram in grams if size == len(tokens) else _grams(tokens, size):
                _post(index, gram, item)
        if len(tokens) < GRAM:
            self._short_endings.add(len(tokens))
        _post(self._ending, " ".join(tokens[-GRAM:]), item)


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

    Cost: linear in the words of ``ids``' texts plus one check per pair sharing their rarest
    word sequence (:class:`Deduper`), not one per pair of candidates.

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
