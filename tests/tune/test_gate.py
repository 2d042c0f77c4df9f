"""The adoption gate: a candidate is adopted only on a real gain on held-out queries."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nbmemory import Memory
from nbmemory.embed import FakeEmbedder, SentenceTransformerEmbedder
from nbmemory.tune.gate import (
    MIN_QUERIES,
    decide,
    decide_pipelines,
    load_vectors,
    memory_runs,
    paired_p_value,
)
from nbmemory.tune.mine import mine_triples, pipeline_retriever, pseudo_queries


def per_query(values: list[float]) -> dict[str, dict[str, float]]:
    return {f"q{i}": {"ndcg@10": v} for i, v in enumerate(values)}


def test_same_scores_are_refused() -> None:
    scores = per_query([0.2, 0.5, 1.0, 0.0] * 10)
    decision = decide(scores, scores)
    assert not decision.adopt
    assert decision.delta == 0 and decision.wins == 0 and decision.losses == 0
    assert "below the minimum" in decision.reason and decision.reason.startswith("keep the current model")


def test_a_worse_candidate_is_refused() -> None:
    base = per_query([0.6] * 40)
    worse = per_query([0.5] * 40)
    decision = decide(base, worse)
    assert not decision.adopt and "worse" in decision.reason and decision.losses == 40


def test_a_clear_gain_is_adopted() -> None:
    rng = np.random.default_rng(0)
    base_values = rng.uniform(0.2, 0.6, 60)
    base = per_query(list(base_values))
    better = per_query(list(base_values + rng.uniform(0.02, 0.2, 60)))
    decision = decide(base, better)
    assert decision.adopt, decision.reason
    assert decision.p_value < 0.01 and decision.delta > 0.05
    assert decision.to_dict()["delta"] == round(decision.delta, 6)


def test_a_gain_that_chance_explains_is_refused() -> None:
    # Half the queries up a lot, half down almost as much: mean +0.01, but a coin could do it.
    values = [0.5] * 40
    noisy = [0.5 + (0.30 if i % 2 else -0.28) for i in range(40)]
    decision = decide(per_query(values), per_query(noisy))
    assert decision.delta > 0.005 and not decision.adopt
    assert "not significant" in decision.reason


def test_too_few_queries_are_refused() -> None:
    decision = decide(per_query([0.1] * 5), per_query([0.9] * 5))
    assert not decision.adopt and "too few" in decision.reason and MIN_QUERIES > 5


def test_a_vector_gain_counts_only_while_the_default_pipeline_does_not_lose() -> None:
    rng = np.random.default_rng(1)
    base = rng.uniform(0.3, 0.6, 50)
    vector_up = {"default": per_query(list(base)), "vector": per_query(list(base + 0.1))}
    current = {"default": per_query(list(base)), "vector": per_query(list(base))}
    # The fused pipeline is saturated (no change), the vector ranking clearly better: adopt.
    adopted = decide_pipelines(current, vector_up)
    assert adopted.adopt and "vector ranking" in adopted.reason
    assert adopted.extra["vector"]["adopt"] is True
    # The same vector gain while the fused pipeline drops: refuse.
    fused_down = {"default": per_query(list(base - 0.01)), "vector": per_query(list(base + 0.1))}
    refused = decide_pipelines(current, fused_down)
    assert not refused.adopt and "worse" in refused.reason
    # Nothing better anywhere: refuse, and say so for both rankings.
    same = decide_pipelines(current, current)
    assert not same.adopt and "vector ranking" in same.reason


def test_paired_p_value() -> None:
    assert paired_p_value([0.0, 0.0]) == 1.0
    assert paired_p_value([0.1] * 30) < 0.001
    assert paired_p_value([-0.1] * 30) > 0.99


def test_gate_refuses_the_same_model_and_a_damaged_one(
    notes_copy: Path, real_embedder: SentenceTransformerEmbedder
) -> None:
    with Memory(notes_copy, embedder=real_embedder) as mem:
        queries = pseudo_queries(mem.db, ("title", "first_sentence"))
        report = mine_triples(
            mem.db, queries, pipeline_retriever(mem.db, real_embedder), hold_out=0.3, seed=1
        )
        held = report.held_out
        assert len(held) >= MIN_QUERIES
        current = load_vectors(mem.db, "vectors")
        # A damaged model: hashed bag of words, no semantics (vectors for every stored item).
        damaged = FakeEmbedder(dim=64, tag="damaged")
        rows = mem.db.fetchall("SELECT id, heading, text FROM chunks WHERE deleted_at IS NULL ORDER BY id")
        damaged_vecs = damaged.embed_documents([f"{h}\n{t}" if h else t for _, h, t in rows])
        damaged_ids = np.array([int(r[0]) for r in rows])
        qrels, runs = memory_runs(
            mem.db,
            held,
            {
                "current": (real_embedder, current),
                "same": (real_embedder, current),
                "damaged": (damaged, (damaged_ids, damaged_vecs)),
            },
        )
    assert len(qrels) == len(held)
    same = decide_pipelines(runs["current"], runs["same"])
    assert not same.adopt and same.delta == 0
    broken = decide_pipelines(runs["current"], runs["damaged"])
    assert not broken.adopt and broken.delta < 0, broken.reason
    assert decide(runs["current"]["vector"], runs["damaged"]["vector"]).delta < 0
    # The source item is found: the current model scores well on its own memory's held-out queries.
    assert same.baseline > 0.3
