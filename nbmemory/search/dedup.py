"""Collapse exact and near-duplicate results, keeping the best-ranked copy."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence

import numpy as np

_WORD = re.compile(r"\w+")


@functools.lru_cache(maxsize=20_000)
def words(text: str) -> str:
    """The text's words, lower-cased and single-spaced: what duplicates are compared on
    (cached: the same candidates come back search after search)."""
    return " ".join(_WORD.findall(text.lower()))


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

    Returns
    -------
    (kept ids in order, {dropped id: (the kept id it duplicates, cosine similarity)})
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    kept: list[int] = []
    kept_words: list[str] = []
    exact: dict[str, int] = {}
    dropped: dict[int, tuple[int, float]] = {}
    for i in ids:
        w = words(texts.get(i, ""))
        if w and w in exact:
            dropped[i] = (exact[w], 1.0)
            continue
        vec = vectors.get(i)
        match = None
        if w and vec is not None:
            for j, other in zip(kept, kept_words, strict=True):
                if not other or (w not in other and other not in w):
                    continue
                vj = vectors.get(j)
                sim = float(vj @ vec) if vj is not None else 0.0
                if sim >= threshold:
                    match = (j, sim)
                    break
        if match is not None:
            dropped[i] = match
            continue
        kept.append(i)
        kept_words.append(w)
        if w:
            exact[w] = i
    return kept, dropped
