"""Maximal Marginal Relevance: trade a little relevance for less repetition."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from nbmemory.search.base import Ranked
    from nbmemory.search.pool import Pool
    from nbmemory.search.trace import Trace


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
    if not ids:
        return np.zeros(0)  # a search whose filters match nothing has no candidates
    rel = np.array([relevance[i] for i in ids], dtype=np.float64)
    span = rel.max() - rel.min()
    return (rel - rel.min()) / span if span > 0 else np.ones_like(rel)


def mmr_stage(order: Ranked, pool: Pool, k: int, trace: Trace, lam: float) -> Ranked:
    """The ``mmr`` stage: the first ``k`` of ``order`` picked by :func:`mmr` with ``lam``, the
    rest below them in their order. MMR scores replace the fused ones; each pick's parts are its
    relevance term and its redundancy."""
    with trace.step("mmr", compare=True) as stage:
        ids = [i for i, _ in order]
        picked = mmr(ids, dict(order), pool.vectors(), lam, k=min(len(ids), k))
        rest = [(i, s) for i, s in order if i not in {p for p, _, _ in picked}]
        stage.notes = {"lambda": lam}
        floor = min((s for _, s, _ in picked), default=0.0)
        out = [(i, s) for i, s, _ in picked] + [(i, floor - 1.0 - n) for n, (i, _) in enumerate(rest)]
        for i, _, near in picked:
            if near is not None:
                stage.detail[i] = f"most like #{near}"
        stage.output = [i for i, _ in out]
        stage.scores = dict(out)
        # MMR scores replace the fused ones: lam * relevance (min-max scaled) less the redundancy.
        relevance = dict(zip(ids, (lam * scaled_relevance(ids, dict(order))).tolist(), strict=True))
        stage.parts = {
            i: {"mmr relevance": relevance[i], "mmr redundancy": s - relevance[i]} for i, s, _ in picked
        }
        stage.parts.update({i: {"below the MMR picks": s} for i, s in out[len(picked) :]})
    return out
