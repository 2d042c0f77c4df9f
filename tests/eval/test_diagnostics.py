"""Notebook helpers: hand-checked disagreement, win/loss counts, curves and thresholds."""

from __future__ import annotations

from pathlib import Path

import altair as alt
import polars as pl
import pytest

from nbmemory.eval.diagnostics import (
    derive_thresholds,
    disagreement,
    distance_tiers,
    load_thresholds,
    relevance_by_distance,
    relevance_by_rank,
    save_thresholds,
    wins_losses,
    wins_losses_chart,
)
from nbmemory.eval.margins import wilson


def test_disagreement_by_hand() -> None:
    a = {"q1": ["a", "b", "c"], "q2": ["x", "y"]}
    b = {"q1": ["c", "b", "a"], "q2": ["y", "z"]}
    out = disagreement(a, b, k=3)
    assert out["queries"] == 2
    assert out["differ"] == pytest.approx(1 / 2)  # q1 has the same set, q2 does not
    assert out["mean_overlap"] == pytest.approx((3 / 3 + 1 / 2) / 2)
    assert out["top1_differs"] == pytest.approx(1.0)


def test_wins_losses_counts() -> None:
    per_query = pl.DataFrame(
        {
            "dataset": ["d"] * 6,
            "config": ["rrf", "rrf", "rrf", "bm25", "bm25", "bm25"],
            "query_id": ["1", "2", "3", "1", "2", "3"],
            "ndcg@10": [0.5, 0.2, 0.3, 0.4, 0.2, 0.9],
        }
    )
    frame = wins_losses(per_query, "rrf", ["bm25"])
    row = frame.row(0, named=True)
    assert (row["wins"], row["ties"], row["losses"]) == (1, 1, 1)
    assert row["mean_delta"] == pytest.approx((0.1 + 0.0 - 0.6) / 3)
    assert isinstance(wins_losses_chart(frame), alt.FacetChart)


def _hits() -> pl.DataFrame:
    # Close documents are relevant more often: 3/4 below distance 0.1, 1/4 in [0.3, 0.35), 0/4 beyond.
    sims = [0.95] * 4 + [0.68] * 4 + [0.4] * 4
    rel = [1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0]
    return pl.DataFrame(
        {
            "dataset": ["d"] * 12,
            "config": ["vector"] * 12,
            "query_id": [str(i % 4) for i in range(12)],
            "doc_id": [f"x{i}" for i in range(12)],
            "rank": [1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3],
            "vector_sim": sims,
            "relevance": rel,
        }
    )


def test_relevance_curves_and_tiers() -> None:
    curve = relevance_by_distance(_hits(), width=0.05)
    assert curve["n"].to_list() == [4, 4, 4]
    assert curve["p_relevant"].to_list() == pytest.approx([0.75, 0.25, 0.0])
    assert curve.row(0, named=True)["ci_low"] == pytest.approx(wilson(3, 4)[0])
    tiers = distance_tiers(curve)
    assert tiers["high"] == pytest.approx(0.1)  # the bin [0.05, 0.1) is the last at P >= 0.5
    assert tiers["medium"] == pytest.approx(0.35)
    assert tiers["low"] == pytest.approx(0.35)
    by_rank = relevance_by_rank(_hits(), configs=("vector",))
    assert by_rank["bucket"].to_list() == ["1", "2", "3"]
    assert by_rank["p_relevant"].to_list() == pytest.approx([0.75, 0.25, 0.0])


def test_thresholds_round_trip(tmp_path: Path) -> None:
    curve = relevance_by_distance(_hits())
    payload = derive_thresholds("m", "fp123", curve, datasets=["d"])
    path = save_thresholds(payload)
    assert path.name == "fp123.json"
    assert str(tmp_path) in str(path)  # the isolated NBMEMORY_CACHE
    assert load_thresholds("fp123") == payload
    assert load_thresholds("unknown") is None
