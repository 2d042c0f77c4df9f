"""Maximal Marginal Relevance: trade a little relevance for less repetition."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def mmr(
    ids: Sequence[int],
    relevance: Mapping[int, float],
    vectors: Mapping[int, np.ndarray],
    lam: float = 0.7,
    k: int | None = None,
) -> list[tuple[int, float, int | None]]:
    """Greedy MMR (Carbonell & Goldstein 1998) over candidates in relevance order.

    Each pick maximises ``lam * rel(d) - (1 - lam) * max_s cos(d, s)`` over the items already
    picked ``s``. Relevance is min-max scaled over the candidates first so it is on the same
    [0, 1] scale as cosine similarity, whatever the fused scores' scale.

    Parameters
    ----------
    ids:
        Candidates, best first.
    relevance:
        Candidate -> relevance score (higher is better).
    vectors:
        Candidate -> unit-length embedding; a candidate without one is never penalised.
    lam:
        1.0 is pure relevance (the input order), 0.0 pure novelty.
    k:
        How many to pick (default all).

    Returns
    -------
    (id, MMR score, the picked item it was most similar to) in pick order.
    """
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lambda must be between 0 and 1, got {lam}")
    if not ids:
        return []
    k = len(ids) if k is None else min(k, len(ids))
    rel = scaled_relevance(ids, relevance)
    dim = next((len(v) for v in vectors.values()), 0)
    mat = np.zeros((len(ids), dim), dtype=np.float32)
    has = np.zeros(len(ids), dtype=bool)
    for row, i in enumerate(ids):
        if i in vectors:
            mat[row] = vectors[i]
            has[row] = True
    # max similarity of each candidate to anything picked so far, and to which pick
    max_sim = np.full(len(ids), -np.inf)
    nearest = np.full(len(ids), -1)
    left = np.ones(len(ids), dtype=bool)
    out: list[tuple[int, float, int | None]] = []
    for _ in range(k):
        penalty = np.where(np.isfinite(max_sim) & has, max_sim, 0.0)
        score = lam * rel - (1.0 - lam) * penalty
        score[~left] = -np.inf
        best = int(np.argmax(score))
        left[best] = False
        out.append((ids[best], float(score[best]), ids[nearest[best]] if nearest[best] >= 0 else None))
        if has[best]:
            sims = mat @ mat[best]
            closer = sims > max_sim
            max_sim = np.where(closer, sims, max_sim)
            nearest = np.where(closer, best, nearest)
    return out


def scaled_relevance(ids: Sequence[int], relevance: Mapping[int, float]) -> np.ndarray:
    """The candidates' relevance min-max scaled to [0, 1] (all 1 when they are equal), in ``ids``
    order: the relevance term :func:`mmr` weighs by ``lam``."""
    rel = np.array([relevance[i] for i in ids], dtype=np.float64)
    span = rel.max() - rel.min()
    return (rel - rel.min()) / span if span > 0 else np.ones_like(rel)
