"""Relevance tiers for a tuned model, carried over from the model it was tuned from.

The tiers and the no-answer flag read cosines against levels derived for one model
(:mod:`nbmemory.search.reject`); a tuned model has none of its own, so without this an adopted
candidate would silently lose its tiers, its "no confident match" line and its weak tail. Tuning
changes the scale of cosines (contrastive training spreads them), not what a good match is, so
each level moves to the same place in the candidate's distribution: over the held-out queries of
the gate, the share of top-10 cosines at or above the current model's level is the share the
candidate's level leaves above it (quantile mapping). A level outside the cosines seen moves by
the shift of their medians.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from nbmemory import private
from nbmemory.embed.base import Embedder
from nbmemory.search import reject

#: Cosines per held-out query that make up a model's distribution.
TOP = 10


def top_cosines(
    embedder: Embedder, queries: Sequence[str], vectors: np.ndarray, top: int = TOP
) -> np.ndarray:
    """The ``top`` best cosines of each query against the unit rows of ``vectors``, pooled."""
    if not len(queries) or not len(vectors):
        return np.zeros(0, dtype=np.float32)
    from nbmemory.tune.mine import embed_queries

    by_text = embed_queries(embedder, queries)
    q = np.asarray([by_text[text] for text in queries], dtype=np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    sims = q @ vectors.T
    n = min(top, sims.shape[1])
    return np.sort(np.partition(-sims, n - 1, axis=1)[:, :n].ravel() * -1.0)


def carry_tiers(tiers: dict[str, float], current: np.ndarray, candidate: np.ndarray) -> dict[str, float]:
    """Each tier's cosine distance moved to the same quantile of ``candidate`` as in ``current``.

    ``tiers``: tier -> max cosine distance for the current model; ``current``/``candidate``: the
    pooled top cosines of the same queries under each model.
    """
    if not len(current) or not len(candidate):
        raise ValueError("carrying tiers needs cosines of both models")
    shift = float(np.median(candidate) - np.median(current))
    out: dict[str, float] = {}
    for name, distance in tiers.items():
        level = 1.0 - distance
        above = float(np.mean(current >= level))
        moved = float(np.quantile(candidate, 1.0 - above)) if 0.0 < above < 1.0 else level + shift
        out[name] = round(1.0 - moved, 4)
    return out


def carry_over(
    current: Embedder,
    candidate: Embedder,
    queries: Sequence[str],
    current_vectors: np.ndarray,
    candidate_vectors: np.ndarray,
) -> dict[str, Any] | None:
    """Write the candidate's levels (``reject.thresholds_path``) carried over from the current
    model's; None (nothing written) when the current model has none."""
    base = reject.thresholds_for(current.fingerprint)
    if base is None or not base.tiers:
        return None
    tiers = carry_tiers(
        base.tiers,
        top_cosines(current, queries, current_vectors),
        top_cosines(candidate, queries, candidate_vectors),
    )
    payload = {
        "model": candidate.name,
        "fingerprint": candidate.fingerprint,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "distance_tiers": tiers,
        "carried_from": {
            "fingerprint": current.fingerprint,
            "distance_tiers": base.tiers,
            "method": f"quantile mapping of the top-{TOP} cosines of {len(queries)} held-out queries",
        },
    }
    target = reject.thresholds_path(candidate.fingerprint)
    private.make_dir(target.parent)
    private.write_text(target, json.dumps(payload, indent=2) + "\n")
    reject.thresholds_for.cache_clear()
    return payload
