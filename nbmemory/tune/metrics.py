"""IR metrics from ``pytrec_eval`` (never re-implemented here).

Runs and qrels use the ``{query_id: {doc_id: score}}`` shape that trec_eval-style tools read.
trec_eval orders a query's documents by score and breaks ties by document id, so a run whose
scores tie would be evaluated in an order the system never showed; :func:`rank_run` turns a
ranked list into scores that keep its order exactly.
They live with tuning, below evaluation: the adoption gate (:mod:`nbmemory.tune.gate`) scores with
them, and the evaluation reads them from here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytrec_eval

Run = dict[str, dict[str, float]]
Qrels = dict[str, dict[str, int]]

#: The reported metrics: our name -> the ``pytrec_eval`` result key.
METRICS: dict[str, str] = {
    "ndcg@10": "ndcg_cut_10",
    "recall@10": "recall_10",
    "recall@100": "recall_100",
    "map@10": "map_cut_10",
    "mrr@10": "recip_rank",
}
_MEASURES = {"ndcg_cut.10", "recall.10,100", "map_cut.10"}


def rank_run(ranked: Mapping[str, Sequence[str]]) -> Run:
    """Scores ``1 / rank`` for ranked document lists, so ties cannot reorder them.

    Parameters
    ----------
    ranked:
        ``{query_id: [doc_id, ...]}`` best first; a repeated doc id keeps its first rank.

    Returns
    -------
    Run
    """
    run: Run = {}
    for qid, docs in ranked.items():
        scores: dict[str, float] = {}
        for rank, doc in enumerate(docs, start=1):
            scores.setdefault(doc, 1.0 / rank)
        run[qid] = scores
    return run


def cut(run: Mapping[str, Mapping[str, float]], k: int) -> Run:
    """The top ``k`` documents of each query by score (ties by doc id, as trec_eval does)."""
    out: Run = {}
    for qid, scores in run.items():
        ordered = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
        out[qid] = dict(ordered[:k])
    return out


def evaluate(
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, Mapping[str, float]],
    ignore_identical_ids: bool = False,
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """NDCG@10, Recall@10/@100, MAP@10 and MRR@10, overall and per query.

    Parameters
    ----------
    qrels:
        Judgements ``{query_id: {doc_id: relevance}}``; relevance >= 1 counts as relevant.
    run:
        ``{query_id: {doc_id: score}}``, higher is better.
    ignore_identical_ids:
        Drop a document whose id equals the query id (BEIR's evaluator does this by default,
        for datasets such as ArguAna where queries are corpus documents).

    Returns
    -------
    overall, per_query
        ``overall`` maps metric name to the mean over **every judged query**: a query the run
        returned nothing for scores 0 (``pytrec_eval`` alone would skip it).
        ``per_query`` maps query id to its metric values. MRR@10 is ``recip_rank`` on the run
        cut to its top 10.
    """
    qrels_clean = {str(q): {str(d): int(r) for d, r in docs.items()} for q, docs in qrels.items()}
    run_clean: Run = {}
    for qid in qrels_clean:
        scores = {str(d): float(s) for d, s in run.get(qid, {}).items()}
        if ignore_identical_ids:
            scores.pop(qid, None)
        run_clean[qid] = scores
    main = pytrec_eval.RelevanceEvaluator(qrels_clean, _MEASURES).evaluate(
        {q: s for q, s in run_clean.items() if s}
    )
    top10 = pytrec_eval.RelevanceEvaluator(qrels_clean, {"recip_rank"}).evaluate(
        {q: s for q, s in cut(run_clean, 10).items() if s}
    )
    per_query: dict[str, dict[str, float]] = {}
    for qid in qrels_clean:
        values = {}
        for name, key in METRICS.items():
            source = top10 if key == "recip_rank" else main
            values[name] = float(source.get(qid, {}).get(key, 0.0))
        per_query[qid] = values
    n = max(len(per_query), 1)
    overall = {name: sum(v[name] for v in per_query.values()) / n for name in METRICS}
    return overall, per_query
