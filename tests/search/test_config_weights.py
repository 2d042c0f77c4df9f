"""A setting the default fusion would ignore is refused, with what to set instead (#47, item 8)."""

from __future__ import annotations

import pytest

from nbmemory import ConfigError, Memory
from nbmemory.search.config import PipelineConfig


@pytest.mark.parametrize("weights", [{"bm25": 0.2, "vector": 1.0}, {"bm25": 1.0, "vector": 0.2}])
def test_rrf_weights_with_the_convex_fusion_are_refused(weights: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match="vector_weight"):
        PipelineConfig(weights=weights)
    with pytest.raises(ConfigError, match="adaptive"):
        PipelineConfig(fusion="rrf", weights=weights)  # adaptive RRF sets its own weights


def test_rrf_weights_act_where_they_are_read(fake_mem: Memory) -> None:
    fake_mem.remember_many(
        [
            "rotate the deploy token every month",
            "tokens for deploys are rotated by the ops team",
            "the deploy checklist has a token step",
            "monthly chores: rotate keys, renew certificates",
        ]
    )
    keyword = PipelineConfig(fusion="rrf", adaptive=False, weights={"bm25": 1.0, "vector": 0.05})
    vector = PipelineConfig(fusion="rrf", adaptive=False, weights={"bm25": 0.05, "vector": 1.0})
    a = fake_mem.search("rotate deploy token monthly", k=4, config=keyword)
    b = fake_mem.search("rotate deploy token monthly", k=4, config=vector)
    assert a.trace.stage("rrf").notes["weights"] == {"bm25": 1.0, "vector": 0.05}
    assert [h.score for h in a.hits] != [h.score for h in b.hits]
    with pytest.raises(ConfigError, match="weight for 'bm25' must be >= 0"):
        PipelineConfig(fusion="rrf", adaptive=False, weights={"bm25": -1.0, "vector": 1.0})
