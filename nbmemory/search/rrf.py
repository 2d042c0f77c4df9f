"""Reciprocal Rank Fusion as a pure function over ranked lists."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

from nbmemory.search.base import Ranked, Retrieved, retriever_ranks
from nbmemory.search.evidence import lexical_evidence

if TYPE_CHECKING:
    from nbmemory.search.adaptive import QueryEvidence
    from nbmemory.search.base import Query
    from nbmemory.search.config import PipelineConfig
    from nbmemory.search.filters import Filters
    from nbmemory.search.trace import Trace
    from nbmemory.store.db import Database

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


def rrf_parts(
    rankings: Mapping[str, Sequence[K]],
    items: Sequence[K],
    k: int = 60,
    weights: Mapping[str, float] | None = None,
    ks: Mapping[str, float] | None = None,
) -> dict[K, dict[str, float]]:
    """Each item's :func:`rrf` score as its terms, ``{retriever: w_r / (k_r + rank_r)}`` (a
    retriever that did not return the item has no term); they sum to the fused score."""
    weights = dict(weights or {})
    ks = dict(ks or {})
    wanted = set(items)
    out: dict[K, dict[str, float]] = {item: {} for item in items}
    for name, ids in rankings.items():
        w = weights.get(name, 1.0)
        kr = ks.get(name, k)
        for rank, doc in enumerate(ids, start=1):
            if doc in wanted:
                out[doc][name] = w / (kr + rank)
    return out


class RRFFusion:
    """RRF as a pipeline stage (the :class:`~nbmemory.search.base.Fusion` role, ``fusion="rrf"``,
    and any search with one retriever): weights and per-retriever constants from the query's
    lexical evidence when ``adaptive`` is on. Cost: linear in the candidates."""

    name = "rrf"

    def __init__(self, db: Database, config: PipelineConfig) -> None:
        self.db = db
        self.config = config

    def __call__(
        self,
        query: Query,
        found: dict[str, Retrieved],
        k: int,
        trace: Trace,
        pool_size: int,
        filters: Filters,
    ) -> tuple[QueryEvidence | None, Ranked]:
        """RRF over the rankings (adaptive weights from the lexical evidence), cut to a pool deeper
        than k; ``filters`` change nothing here (RRF adds no candidates of its own)."""
        config = self.config
        rankings = {name: got.ids for name, got in found.items()}
        ranks = retriever_ranks(found)
        with trace.step(self.name) as stage:
            evidence = lexical_evidence(self.db, query.text, found.get("bm25"), self.config.adaptive_strength)
            weights = dict(config.weights)
            ks: dict[str, float] = {}
            if evidence is not None and config.adaptive and len(rankings) > 1:
                weights = evidence.weights
                # A trusted retriever's ranks are also sharper: its constant shrinks with its weight.
                ks = {n: config.rrf_k / w for n, w in weights.items()}
                stage.notes = {
                    "weights": {n: round(w, 3) for n, w in weights.items()},
                    "ks": {n: round(kr, 1) for n, kr in ks.items()},
                    "evidence": round(evidence.evidence, 3),
                    "why": evidence.reason,
                }
            else:
                stage.notes = {"weights": weights}
                if evidence is not None:
                    stage.notes["evidence"] = round(evidence.evidence, 3)
            stage.notes["k"] = config.rrf_k
            fused = rrf(rankings, k=config.rrf_k, weights=weights, ks=ks)[:pool_size]
            stage.output = [i for i, _ in fused]
            stage.scores = dict(fused)
            stage.parts = rrf_parts(rankings, stage.output, k=config.rrf_k, weights=weights, ks=ks)
            stage.detail = {
                doc: ", ".join(
                    f"{name} #{ranks[name][doc]}" if doc in ranks[name] else f"{name} -" for name in rankings
                )
                for doc in stage.output[:k]
            }
        return evidence, list(fused)
