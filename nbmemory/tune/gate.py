"""The adoption gate: a tuned model replaces the current one only on a real gain.

The gate compares per-query NDCG@10 (``pytrec_eval``, through :mod:`nbmemory.tune.metrics`)
of the current model and the candidate on queries neither was trained on:

* on BEIR, the dataset's judged test queries (never used for mining);
* in a user's memory, the held-out pseudo-queries of :func:`nbmemory.tune.mine.mine_triples`
  (every query of a seeded 20 % of the items, none of which was trained on), judged by "the
  item the query came from is the relevant one".

A *real gain* (:func:`decide`) is all of: at least :data:`MIN_QUERIES` queries, a mean NDCG@10
gain of at least ``min_delta`` (default :data:`MIN_DELTA`, absolute), and a one-sided paired
randomisation (sign-flip) test with ``p <= max_p`` (default 0.05), so a gain that a coin could
have produced on these queries is refused.

:func:`decide_pipelines` applies it to the two rankings a new model changes: the candidate is
adopted on a real gain of the default (fused) pipeline, or on a real gain of the vector ranking
alone while the default pipeline's mean does not drop. The second branch exists because the fused
pipeline saturates on held-out pseudo-queries (a title finds its own item with BM25 alone: NDCG@10
0.98 on a SciFact-sized memory), so a model that is better where it matters, the vector side, could
never show it there. Anything else keeps the current model, and the decision says why.

In a memory (:func:`memory_runs`) both models are scored on the whole store with the search
pipeline's retrieval and fusion: BM25 from the store's index (shared by both models), the vector
ranking from each model's vectors (an exact scan), fused by RRF with the memory's configured
``rrf_k`` and weights. Stages after fusion are not part of the comparison.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from nbmemory.search.rrf import rrf
from nbmemory.store import tuning_rows

if TYPE_CHECKING:
    from nbmemory.embed.base import Embedder
    from nbmemory.store.db import Database
    from nbmemory.tune.mine import PseudoQuery

METRIC = "ndcg@10"
MIN_DELTA = 0.005
MAX_P = 0.05
MIN_QUERIES = 20
_PERMUTATIONS = 10_000
PerQuery = Mapping[str, Mapping[str, float]]


@dataclass
class GateDecision:
    """Whether to adopt the candidate, and why.

    ``baseline`` / ``candidate`` are the mean ``metric`` over the gate's queries; ``wins`` and
    ``losses`` count queries where the candidate scored higher / lower; ``p_value`` is the
    one-sided paired randomisation test of "the candidate is not better".
    """

    adopt: bool
    reason: str
    metric: str
    baseline: float
    candidate: float
    queries: int
    wins: int = 0
    losses: int = 0
    p_value: float = 1.0
    min_delta: float = MIN_DELTA
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def delta(self) -> float:
        return self.candidate - self.baseline

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["delta"] = round(self.delta, 6)
        return out


def paired_p_value(diffs: Sequence[float], seed: int = 0, permutations: int = _PERMUTATIONS) -> float:
    """One-sided p-value of a mean paired difference > 0 under random sign flips."""
    d = np.asarray(diffs, dtype=np.float64)
    if d.size == 0 or not np.any(d):
        return 1.0
    observed = d.mean()
    rng = np.random.default_rng(seed)
    signs = rng.choice(np.array([-1.0, 1.0]), size=(permutations, d.size))
    means = (signs * d).mean(axis=1)
    # The observed sign pattern counts as one of the permutations (never p = 0).
    return float((np.sum(means >= observed - 1e-12) + 1) / (permutations + 1))


def decide(
    baseline: PerQuery,
    candidate: PerQuery,
    *,
    metric: str = METRIC,
    min_delta: float = MIN_DELTA,
    max_p: float = MAX_P,
    min_queries: int = MIN_QUERIES,
    seed: int = 0,
) -> GateDecision:
    """Adopt ``candidate`` only on a real gain in ``metric`` over the same queries (see module).

    Parameters
    ----------
    baseline, candidate:
        ``{query_id: {metric: value}}`` per query, e.g. ``ConfigRun.per_query``.
    """
    qids = sorted(set(baseline) & set(candidate))
    base = np.array([float(baseline[q][metric]) for q in qids])
    cand = np.array([float(candidate[q][metric]) for q in qids])
    mean_b = float(base.mean()) if qids else 0.0
    mean_c = float(cand.mean()) if qids else 0.0
    diffs = cand - base
    wins, losses = int(np.sum(diffs > 1e-12)), int(np.sum(diffs < -1e-12))
    p = paired_p_value(diffs, seed) if qids else 1.0
    delta = mean_c - mean_b
    shown = f"{metric} {mean_b:.4f} -> {mean_c:.4f} ({delta:+.4f}) on {len(qids)} held-out queries, {wins} better / {losses} worse"
    if len(qids) < min_queries:
        adopt, why = False, f"only {len(qids)} held-out queries (need {min_queries}): too few to tell"
    elif delta < 0:
        adopt, why = False, "the candidate is worse"
    elif delta < min_delta:
        adopt, why = False, f"the gain is below the minimum {min_delta:+.4f}"
    elif p > max_p:
        adopt, why = False, f"the gain is not significant (p = {p:.3f} > {max_p})"
    else:
        adopt, why = True, f"a real gain (p = {p:.3f})"
    reason = f"{'adopt' if adopt else 'keep the current model'}: {why}; {shown}"
    return GateDecision(adopt, reason, metric, mean_b, mean_c, len(qids), wins, losses, p, min_delta)


def decide_pipelines(
    current: Mapping[str, PerQuery],
    candidate: Mapping[str, PerQuery],
    *,
    metric: str = METRIC,
    min_delta: float = MIN_DELTA,
    max_p: float = MAX_P,
    min_queries: int = MIN_QUERIES,
    seed: int = 0,
) -> GateDecision:
    """Adopt on a real gain of ``default``, or of ``vector`` with ``default`` not dropping.

    Parameters
    ----------
    current, candidate:
        ``{"default": per_query, "vector": per_query}`` for each model, on the same queries.
    """
    kwargs: dict[str, Any] = {
        "metric": metric,
        "min_delta": min_delta,
        "max_p": max_p,
        "min_queries": min_queries,
        "seed": seed,
    }
    fused = decide(current["default"], candidate["default"], **kwargs)
    fused.extra["pipeline"] = "default"
    if fused.adopt or "vector" not in current or "vector" not in candidate:
        return fused
    vector = decide(current["vector"], candidate["vector"], **kwargs)
    fused.extra["vector"] = vector.to_dict()
    if vector.adopt and fused.delta >= 0:
        fused.adopt = True
        fused.reason = (
            f"adopt: a real gain of the vector ranking ({vector.metric} {vector.baseline:.4f} -> "
            f"{vector.candidate:.4f}, {vector.delta:+.4f}, p = {vector.p_value:.3f}) and the default "
            f"pipeline does not lose ({fused.baseline:.4f} -> {fused.candidate:.4f}, {fused.delta:+.4f})"
            f" on {fused.queries} held-out queries"
        )
    else:
        why = "vector ranking: " + vector.reason.split(": ", 1)[1]
        fused.reason = f"{fused.reason}; {why}"
    return fused


# -- the gate inside a memory -------------------------------------------------------------------
def load_vectors(db: Database, table: str) -> tuple[np.ndarray, np.ndarray]:
    """Ids and unit vectors of the live items in ``table`` (``vectors`` or the staging table)."""
    rows = tuning_rows.live_vectors(db, table)
    if not rows:
        return np.zeros(0, dtype=np.int64), np.zeros((0, 1), dtype=np.float32)
    ids = np.array([int(r[0]) for r in rows], dtype=np.int64)
    mat = np.asarray([r[1] for r in rows], dtype=np.float32)
    return ids, mat


def _top(ids: np.ndarray, mat: np.ndarray, q: np.ndarray, depth: int) -> list[int]:
    if len(ids) == 0:
        return []
    sims = mat @ q.astype(np.float32)
    n = min(depth, len(ids))
    part = np.argpartition(-sims, n - 1)[:n]
    order = part[np.lexsort((ids[part], -sims[part]))]
    return [int(i) for i in ids[order]]


def memory_runs(
    db: Database,
    queries: Sequence[PseudoQuery],
    models: Mapping[str, tuple[Embedder, tuple[np.ndarray, np.ndarray]]],
    *,
    rrf_k: int = 60,
    weights: Mapping[str, float] | None = None,
    depth: int = 100,
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, dict[str, dict[str, float]]]]]:
    """Per-query metrics of each model on held-out pseudo-queries, fused and vector alone.

    Parameters
    ----------
    models:
        ``{name: (embedder, (ids, vectors))}``: the vectors each model gives the store's items.

    Returns
    -------
    qrels, scores
        ``qrels`` (source item relevant) and ``{model: {"default"|"vector": per_query}}``.
    """
    from nbmemory.store import fts

    # pytrec_eval only once a candidate is judged: opening a memory or searching never loads it.
    from nbmemory.tune.metrics import evaluate, rank_run
    from nbmemory.tune.mine import embed_queries

    qrels = {f"q{n}": {str(q.source_id): 1} for n, q in enumerate(queries) if q.source_id is not None}
    fts.ensure_fresh(db)
    bm25: dict[str, list[int]] = {}
    for n, q in enumerate(queries):
        terms = fts.query_terms(db, q.text)
        bm25[f"q{n}"] = [i for i, _ in fts.search(db, terms, depth)]
    out: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for name, (embedder, (ids, mat)) in models.items():
        fused: dict[str, list[str]] = {}
        alone: dict[str, list[str]] = {}
        qvecs = embed_queries(embedder, [q.text for q in queries])
        for n, q in enumerate(queries):
            qid = f"q{n}"
            vec = _top(ids, mat, qvecs[q.text], depth)
            ranked = rrf({"bm25": bm25[qid], "vector": vec}, k=rrf_k, weights=weights)
            fused[qid] = [str(i) for i, _ in ranked]
            alone[qid] = [str(i) for i in vec]
        out[name] = {
            "default": evaluate(qrels, rank_run(fused))[1],
            "vector": evaluate(qrels, rank_run(alone))[1],
        }
    return qrels, out
