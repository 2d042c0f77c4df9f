"""Reciprocal Rank Fusion as a pure function over ranked lists."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def rrf(
    rankings: Mapping[str, Sequence[K]],
    k: int = 60,
    weights: Mapping[str, float] | None = None,
    ks: Mapping[str, float] | None = None,
) -> list[tuple[K, float]]:
    """Fuse ranked lists: ``score(d) = sum_r w_r / (k_r + rank_r(d))`` with 1-based ranks.

    Parameters
    ----------
    rankings:
        Retriever name -> ids, best first. An id missing from a list contributes nothing
        from it, so an id found by only one retriever still survives fusion.
    k:
        The RRF constant (60 in Cormack et al. 2009). Must be greater than 0.
    weights:
        Retriever name -> weight (default 1.0 each). Must be non-negative.
    ks:
        Retriever name -> its own constant (default ``k`` for each); a smaller constant makes
        that retriever's top ranks count more against its lower ones.

    Returns
    -------
    (id, fused score) pairs, best first; ties broken by the best single rank, then by
    first appearance, so the order is deterministic.
    """
    if k <= 0:
        raise ValueError(f"k must be greater than 0, got {k}")
    weights = dict(weights or {})
    for name, w in weights.items():
        if w < 0:
            raise ValueError(f"weight for {name!r} must be >= 0, got {w}")
    ks = dict(ks or {})
    for name, kr in ks.items():
        if kr <= 0:
            raise ValueError(f"k for {name!r} must be greater than 0, got {kr}")
    scores: dict[K, float] = {}
    best_rank: dict[K, int] = {}
    order: dict[K, int] = {}
    for name, ids in rankings.items():
        w = weights.get(name, 1.0)
        kr = ks.get(name, k)
        for rank, doc in enumerate(ids, start=1):
            scores[doc] = scores.get(doc, 0.0) + w / (kr + rank)
            best_rank[doc] = min(best_rank.get(doc, rank), rank)
            order.setdefault(doc, len(order))
    return sorted(scores.items(), key=lambda kv: (-kv[1], best_rank[kv[0]], order[kv[0]]))
