"""Metric plumbing against values computed by hand on a tiny judged set."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from nbmemory.errors import ConfigError, NotFoundError
from nbmemory.eval.beir import load, read_qrels
from nbmemory.tune.metrics import cut, evaluate, rank_run

QRELS = {"q1": {"d1": 1, "d3": 2, "d9": 0}, "q2": {"d2": 1}, "q3": {"d7": 1}}
RANKED = {
    # d1 (gain 1) at rank 2, d3 (gain 2) at rank 4; d9 is judged not relevant.
    "q1": ["d2", "d1", "d9", "d3"],
    # The only relevant document at rank 12: outside every @10 cut, inside @100.
    "q2": [f"x{i}" for i in range(11)] + ["d2"],
    # q3 is judged but the run returned nothing for it.
}


def test_hand_computed_values_per_query() -> None:
    _, per_query = evaluate(QRELS, rank_run(RANKED))

    dcg = 1 / math.log2(2 + 1) + 2 / math.log2(4 + 1)
    ideal = 2 / math.log2(1 + 1) + 1 / math.log2(2 + 1)
    q1 = per_query["q1"]
    assert q1["ndcg@10"] == pytest.approx(dcg / ideal, abs=1e-4)  # 0.5672
    assert q1["mrr@10"] == pytest.approx(1 / 2)
    assert q1["recall@10"] == pytest.approx(1.0)
    assert q1["recall@100"] == pytest.approx(1.0)
    # Average precision at the two relevant ranks: (1/2 + 2/4) / 2.
    assert q1["map@10"] == pytest.approx((1 / 2 + 2 / 4) / 2)

    q2 = per_query["q2"]
    assert q2["ndcg@10"] == 0.0
    assert q2["recall@10"] == 0.0
    assert q2["recall@100"] == pytest.approx(1.0)
    # recip_rank of the full run would be 1/12; MRR@10 is cut at 10.
    assert q2["mrr@10"] == 0.0
    assert q2["map@10"] == 0.0

    assert per_query["q3"] == {name: 0.0 for name in q1}


def test_overall_is_the_mean_over_every_judged_query() -> None:
    overall, per_query = evaluate(QRELS, rank_run(RANKED))
    dcg = 1 / math.log2(3) + 2 / math.log2(5)
    ideal = 2 + 1 / math.log2(3)
    # q3 (nothing returned) counts as 0, so the mean divides by 3, not by 2.
    assert overall["ndcg@10"] == pytest.approx(dcg / ideal / 3, abs=1e-4)
    assert overall["recall@100"] == pytest.approx(2 / 3)
    assert overall["mrr@10"] == pytest.approx(0.5 / 3)
    assert set(per_query) == {"q1", "q2", "q3"}


def test_rank_run_keeps_the_ranking_when_scores_would_tie() -> None:
    # With equal scores trec_eval orders by doc id, which would put "a" first.
    tied = {"q": {"a": 1.0, "b": 1.0}}
    qrels = {"q": {"b": 1}}
    _, tied_scores = evaluate(qrels, tied)
    _, ranked_scores = evaluate(qrels, rank_run({"q": ["b", "a"]}))
    assert ranked_scores["q"]["mrr@10"] == 1.0
    assert tied_scores["q"]["mrr@10"] in (0.5, 1.0)  # whatever trec_eval's tie rule does
    assert rank_run({"q": ["b", "a", "b"]}) == {"q": {"b": 1.0, "a": 0.5}}


def test_cut_and_identical_ids() -> None:
    assert cut({"q": {"a": 0.1, "b": 0.9, "c": 0.5}}, 2) == {"q": {"b": 0.9, "c": 0.5}}
    qrels = {"q1": {"d1": 1}}
    run = {"q1": {"q1": 2.0, "d1": 1.0}}
    assert evaluate(qrels, run)[1]["q1"]["mrr@10"] == 0.5
    assert evaluate(qrels, run, ignore_identical_ids=True)[1]["q1"]["mrr@10"] == 1.0


def test_qrels_with_crlf_and_header(tiny_beir: Path) -> None:
    qrels = read_qrels(tiny_beir / "qrels" / "test.tsv")
    assert qrels == {"q1": {"d1": 1}, "q2": {"d2": 2}, "q3": {"d3": 1, "d10": 1}, "q4": {"d7": 1}}


def test_load_keeps_only_judged_queries_and_limits(tiny_beir: Path) -> None:
    ds = load(tiny_beir)
    assert list(ds.queries) == ["q1", "q2", "q3", "q4"]  # train1 is not judged in test
    assert len(ds.corpus) == 10
    sliced = load(tiny_beir, limit_queries=2, limit_docs=4)
    assert list(sliced.queries) == ["q1", "q2"]
    # Judged documents of the kept queries come first, then others in file order.
    assert list(sliced.corpus) == ["d1", "d2", "d3", "d4"]
    assert sliced.corpus_hash() != ds.corpus_hash()
    with pytest.raises(NotFoundError, match="not a BEIR folder"):
        load(tiny_beir / "qrels")
    with pytest.raises(ConfigError, match="limit_docs"):
        load(tiny_beir, limit_docs=0)
