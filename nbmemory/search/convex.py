"""Convex combination of normalised retriever scores, as a pure function.

Rank fusion (RRF) forgets how far apart the scores are: a vector hit at cosine 0.71 and one at
0.35 count the same once both are rank 1 somewhere. A convex combination keeps that evidence:
``score(d) = sum_r w_r * s_r(d)`` over scores each retriever put on a common scale
(see :mod:`nbmemory.search.pipeline` for the scales used), with an item a retriever did not
return counting 0 from it.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def convex(scores: Mapping[str, Mapping[K, float]], weights: Mapping[str, float]) -> list[tuple[K, float]]:
    """Fuse normalised scores: ``sum_r weights[r] * scores[r][d]``, best first.

    Parameters
    ----------
    scores:
        Retriever name -> {id: score on a common scale, higher is better}.
    weights:
        Retriever name -> weight (non-negative; a retriever without one gets 0).

    Returns
    -------
    (id, fused score) pairs, best first; ties broken by the best single score, then by first
    appearance, so the order is deterministic.
    """
    for name, w in weights.items():
        if w < 0:
            raise ValueError(f"weight for {name!r} must be >= 0, got {w}")
    fused: dict[K, float] = {}
    best: dict[K, float] = {}
    order: dict[K, int] = {}
    for name, by_id in scores.items():
        w = weights.get(name, 0.0)
        for item, s in by_id.items():
            fused[item] = fused.get(item, 0.0) + w * s
            best[item] = max(best.get(item, s), s)
            order.setdefault(item, len(order))
    return sorted(fused.items(), key=lambda kv: (-kv[1], -best[kv[0]], order[kv[0]]))


def query_mass(idf: Mapping[str, tuple[float, int]], unseen_idf: float) -> float:
    """The query's IDF mass: the sum of its terms' IDF, a term no item holds at ``unseen_idf``.

    A BM25 score divided by it is the share of the query an item matches (about 1 for an item
    holding every query term once at average length; above 1 with repeats or in short items):
    an absolute scale, unlike division by the best score, which makes a poor best match look
    perfect.
    """
    return sum(value if df > 0 else unseen_idf for value, df in idf.values())


def scale_bm25(scores: Mapping[K, float], mass: float) -> dict[K, float]:
    """BM25 scores as shares of the query's IDF mass (:func:`query_mass`); 0 for a massless query."""
    if mass <= 0:
        return {item: 0.0 for item in scores}
    return {item: s / mass for item, s in scores.items()}
