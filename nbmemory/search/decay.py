"""Recency, importance and retrieval frequency as a bounded, rank-safe multiplier."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from nbmemory.store.db import utcnow

if TYPE_CHECKING:
    from nbmemory.search.base import Ranked
    from nbmemory.search.pool import Pool
    from nbmemory.search.trace import Trace


@dataclass(frozen=True)
class ItemSignals:
    """What the factor is computed from, for one item."""

    created_at: datetime
    last_retrieved_at: datetime | None
    importance: float
    retrieval_count: int
    pinned: bool


def recency_factor(
    item: ItemSignals,
    now: datetime,
    half_life_days: float = 30.0,
    weight: float = 0.05,
) -> tuple[float, str]:
    """A multiplier in ``[1 - weight, 1 + weight]`` for an item's fused score, and why.

    ``boost = 0.5 decay + 0.3 importance + 0.2 frequency`` with ``decay = 0.5 ** (age /
    half_life)`` on the time since the item was last retrieved (its creation when never
    retrieved; MemX), ``importance`` in [0, 1] and ``frequency = log1p(retrievals) /
    log1p(50)`` capped at 1; a pinned item has boost 1. The factor is ``1 + weight * (2 boost
    - 1)``. Rank-safe: the factor is bounded, so an item only overtakes another whose fused
    score is within a factor ``(1 + weight) / (1 - weight)`` of its own, and a clear relevance
    lead is never overturned by age or popularity.
    """
    if half_life_days <= 0:
        raise ValueError(f"half_life_days must be greater than 0, got {half_life_days}")
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"weight must be in [0, 1), got {weight}")
    seen = item.last_retrieved_at or item.created_at
    age_days = max(0.0, (now - seen).total_seconds() / 86400.0)
    decay = 0.5 ** (age_days / half_life_days)
    frequency = min(1.0, math.log1p(item.retrieval_count) / math.log1p(50))
    boost = 1.0 if item.pinned else 0.5 * decay + 0.3 * item.importance + 0.2 * frequency
    factor = 1.0 + weight * (2.0 * boost - 1.0)
    why = (
        "pinned"
        if item.pinned
        else f"age {age_days:.0f} d (decay {decay:.2f}), importance {item.importance:.2f}, "
        f"{item.retrieval_count} retrievals"
    )
    return factor, why


def factor_parts(
    item: ItemSignals, now: datetime, half_life_days: float = 30.0, weight: float = 0.05
) -> dict[str, float]:
    """What each signal adds to :func:`recency_factor`'s factor, so ``factor = 1 + sum(parts)``.

    ``factor - 1 = weight * (2 boost - 1)`` splits by signal around a neutral 0.5 each:
    ``recency`` ``weight * (decay - 0.5)``, ``importance`` ``weight * 0.6 * (importance - 0.5)``
    and ``retrievals`` ``weight * 0.4 * (frequency - 0.5)``; a pinned item's whole lift is
    ``pinned``, ``weight``. A score ``s`` multiplied by the factor gains ``s * part`` from each.
    """
    if item.pinned:
        return {"pinned": weight}
    seen = item.last_retrieved_at or item.created_at
    age_days = max(0.0, (now - seen).total_seconds() / 86400.0)
    decay = 0.5 ** (age_days / half_life_days)
    frequency = min(1.0, math.log1p(item.retrieval_count) / math.log1p(50))
    return {
        "recency": weight * (decay - 0.5),
        "importance": weight * 0.6 * (item.importance - 0.5),
        "retrievals": weight * 0.4 * (frequency - 0.5),
    }


def recency_stage(order: Ranked, pool: Pool, trace: Trace, half_life_days: float, weight: float) -> Ranked:
    """The ``recency`` stage: each fused score times its item's :func:`recency_factor` (an item
    without stored signals keeps its score), re-sorted; each score's parts gain what each signal
    added (:func:`factor_parts`)."""
    with trace.step("recency", compare=True) as stage:
        meta = pool.meta()
        now = utcnow()
        scored = []
        for i, score in order:
            before = trace.parts(i)
            signals = meta.get(i)
            if signals is None:
                scored.append((i, score))
                stage.parts[i] = before
                continue
            factor, why = recency_factor(signals, now, half_life_days, weight)
            scored.append((i, score * factor))
            stage.detail[i] = f"x{factor:.3f}: {why}"
            # score * factor = score + score * (factor - 1), the second term split by signal.
            lift = factor_parts(signals, now, half_life_days, weight)
            stage.parts[i] = {**before, **{name: score * part for name, part in lift.items()}}
        scored.sort(key=lambda kv: -kv[1])
        stage.output = [i for i, _ in scored]
        stage.scores = dict(scored)
        stage.notes = {"half_life_days": half_life_days, "weight": weight}
    return scored
