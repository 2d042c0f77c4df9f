import pytest

from nbmemory.search.rrf import rrf


def test_rrf_matches_hand_computed_scores() -> None:
    fused = dict(rrf({"bm25": ["a", "b", "c"], "vector": ["c", "a"]}, k=60))
    assert fused["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert fused["b"] == pytest.approx(1 / 62)
    assert fused["c"] == pytest.approx(1 / 63 + 1 / 61)


def test_rrf_keeps_items_found_by_one_retriever_and_orders_best_first() -> None:
    fused = rrf({"bm25": ["only-kw", "both"], "vector": ["only-vec", "both"]}, k=60)
    ids = [d for d, _ in fused]
    assert ids[0] == "both"
    assert set(ids) == {"only-kw", "both", "only-vec"}


def test_rrf_weights_scale_contributions() -> None:
    fused = dict(rrf({"bm25": ["a"], "vector": ["b"]}, k=60, weights={"bm25": 2.0, "vector": 0.5}))
    assert fused["a"] == pytest.approx(2 / 61)
    assert fused["b"] == pytest.approx(0.5 / 61)


def test_rrf_ties_are_deterministic() -> None:
    first = rrf({"x": ["a", "b"], "y": ["b", "a"]})
    second = rrf({"x": ["a", "b"], "y": ["b", "a"]})
    assert first == second


@pytest.mark.parametrize("k", [0, -1])
def test_rrf_rejects_bad_k(k: int) -> None:
    with pytest.raises(ValueError, match="k must be greater than 0"):
        rrf({"x": ["a"]}, k=k)


def test_rrf_rejects_negative_weight() -> None:
    with pytest.raises(ValueError, match="weight"):
        rrf({"x": ["a"]}, weights={"x": -1})
