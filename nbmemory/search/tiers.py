"""How well each hit is supported: its cosine to the query and relevance tier, and the weak tail
that neither retriever supports (front ends show it under "weaker matches").

The tiers are the model's (:class:`~nbmemory.search.reject.Thresholds`, derived per model); a
model without them gets no tiers and no weak tail.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nbmemory.items import Hit
    from nbmemory.search.adaptive import QueryEvidence
    from nbmemory.search.pool import Pool
    from nbmemory.search.reject import Thresholds

#: A hit matching less than this share of the query's IDF mass has no keyword support.
WEAK_LEXICAL = 0.5
#: ... and one scoring under this share of the best hit is part of a weak tail.
WEAK_SHARE = 0.75


def set_tiers(hits: list[Hit], pool: Pool, thresholds: Thresholds | None) -> None:
    """Each hit's cosine similarity to the query (none without a query vector) and, with
    ``thresholds``, the tier that cosine falls in."""
    if hits and pool.qvec is not None:
        sims = pool.similarities([h.id for h in hits])
        for h in hits:
            h.similarity = sims.get(h.id)
            if thresholds is not None:
                h.tier = thresholds.tier(None if h.similarity is None else 1.0 - h.similarity)


def mark_weak(hits: list[Hit], evidence: QueryEvidence | None, thresholds: Thresholds | None) -> None:
    """Mark the tail no retriever supports: below the lowest cosine tier, matching under
    :data:`WEAK_LEXICAL` of the query's IDF mass, and scoring under :data:`WEAK_SHARE` of the
    best hit. They keep their place."""
    if not hits or thresholds is None:
        return  # no tiers for this model: no way to call a cosine weak
    mass = evidence.mass if evidence is not None else 0.0
    best = hits[0].score
    for hit in hits:
        lexical = hit.retriever_scores.get("bm25", 0.0) / mass if mass > 0 else 0.0
        semantic = hit.tier != "none" or (hit.similarity is None and "vector" not in hit.ranks)
        hit.weak = not semantic and lexical < WEAK_LEXICAL and hit.score < WEAK_SHARE * best
