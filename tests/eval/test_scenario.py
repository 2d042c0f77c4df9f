"""The scenario benchmark: deterministic generation, every kind present, Wilson intervals, scoring."""

from __future__ import annotations

import math

import pytest

from nbmemory.embed import FakeEmbedder
from nbmemory.errors import ConfigError
from nbmemory.eval.margins import wilson
from nbmemory.eval.scenario import KINDS, QueryOutcome, evaluate_scenario, generate, score


def test_same_seed_same_scenario() -> None:
    a, b = generate(seed=11), generate(seed=11)
    assert a.items == b.items
    assert a.queries == b.queries
    other = generate(seed=12)
    assert [q.text for q in other.queries] != [q.text for q in a.queries]


def test_size_kinds_and_variants() -> None:
    scenario = generate(seed=7)
    counts = scenario.counts()
    assert counts["items"] >= 600  # several hundred topics' worth, three variants each
    assert set(counts["by_category"]) == {"preference", "procedure", "incident", "convention", "updated"}
    assert set(counts["queries"]) == set(KINDS)
    topics = scenario.topics
    for query in scenario.queries:
        assert all(t in topics for t in query.targets)
        assert (query.kind == "miss") == (not query.targets)
        if query.kind == "multi-topic":
            assert len(set(query.targets)) == 2
    # Each topic is written three different ways.
    by_topic: dict[str, set[str]] = {}
    for item in scenario.items:
        by_topic.setdefault(item.topic, set()).add(item.text)
    assert all(len(texts) == 3 for texts in by_topic.values())


def test_confusable_topics_exist() -> None:
    scenario = generate(seed=7)
    texts = [i.text for i in scenario.items if i.variant == 0]
    # The same procedure for both environments, and the same convention type in many projects.
    staging = [t for t in texts if "in staging" in t and "rotate the API token" in t]
    production = [t for t in texts if "in production" in t and "rotate the API token" in t]
    assert staging and production
    assert sum("line length limit" in t for t in texts) == 8


def test_misses_are_not_answerable() -> None:
    scenario = generate(seed=7)
    stored = " ".join(i.text for i in scenario.items).lower()
    for query in scenario.queries:
        if query.kind == "miss":
            for name in ("video-transcoder", "geo-tiler", "fraud-scorer", "zephyr", "quasar", "nimbus"):
                assert name not in stored
            if "INC-" in query.text:
                assert query.text.split()[-1].lower() not in stored


def test_wilson_against_hand_computed_values() -> None:
    z = 1.959963984540054
    # 8 of 10: centre (0.8 + z²/20) / (1 + z²/10), half-width z·sqrt(0.016 + z²/400) / (1 + z²/10).
    low, high = wilson(8, 10)
    denom = 1 + z * z / 10
    centre = (0.8 + z * z / 20) / denom
    half = z * math.sqrt(0.8 * 0.2 / 10 + z * z / 400) / denom
    assert (low, high) == pytest.approx((centre - half, centre + half))
    assert (low, high) == pytest.approx((0.4902, 0.9433), abs=1e-4)  # the textbook value
    # 0 of 10: the upper bound is z² / (n + z²).
    assert wilson(0, 10) == pytest.approx((0.0, z * z / (10 + z * z)))
    assert wilson(10, 10)[1] == pytest.approx(1.0)
    assert wilson(0, 0) == (0.0, 1.0)
    with pytest.raises(ConfigError):
        wilson(11, 10)


def test_score_counts_hits_coverage_and_empty_misses() -> None:
    outcomes = [
        QueryOutcome("a", "paraphrase", ["t1", "x", "y"], ("t1",), 1.0),
        QueryOutcome("b", "paraphrase", ["x", "y", "t2"], ("t2",), 1.0),
        QueryOutcome("c", "paraphrase", ["x"] * 10, ("t3",), 1.0, flagged=True),
        QueryOutcome("d", "multi-topic", ["t1", "x", "x", "x", "x", "t2"], ("t1", "t2"), 1.0),
        QueryOutcome("e", "miss", [], (), 1.0),
        QueryOutcome("f", "miss", ["x"], (), 1.0),
    ]
    rows = {r["kind"]: r for r in score(outcomes)}
    para = rows["paraphrase"]
    assert para["hit@1"] == pytest.approx(1 / 3)
    assert para["hit@3"] == pytest.approx(2 / 3)
    assert para["mrr"] == pytest.approx((1 + 1 / 3 + 0) / 3)
    assert para["hit@1_ci"] == pytest.approx(wilson(1, 3))
    multi = rows["multi-topic"]
    assert multi["coverage@5"] == pytest.approx(1 / 2)  # t2 is at rank 6
    assert multi["hit@1"] == 1.0
    assert rows["miss"]["miss_empty"] == pytest.approx(1 / 2)
    assert rows["miss"]["miss_empty_ci"] == pytest.approx(wilson(1, 2))
    assert rows["answerable"]["n"] == 4
    assert para["flagged"] == pytest.approx(1 / 3) and rows["answerable"]["flagged"] == pytest.approx(1 / 4)


def test_evaluate_scenario_plumbing_with_a_fake_embedder() -> None:
    result = evaluate_scenario("bm25,rrf", embedder=FakeEmbedder(dim=64), queries_per_kind=8)
    table = result.table()
    assert set(table["config"].to_list()) == {"bm25", "rrf"}
    assert set(table["kind"].to_list()) == {*KINDS, "answerable"}
    scores = {r["kind"]: r for r in result.scores()["bm25"]}
    # Identifiers are exact BM25 matches: the keyword queries are found at rank 1.
    assert scores["keyword-exact"]["hit@1"] >= 0.9
    frame = result.outcomes_frame()
    assert frame.height == 2 * len(result.scenario.queries)
    assert result.to_dict()["counts"]["items"] == len(result.scenario.items)
