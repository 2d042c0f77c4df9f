"""Relevance tiers carried over to a tuned model by quantile mapping."""

from __future__ import annotations

import numpy as np
import pytest

from nbmemory.tune.thresholds import carry_tiers

TIERS = {"high": 0.25, "medium": 0.40, "low": 0.55}


def test_the_same_distribution_keeps_the_tiers() -> None:
    cosines = np.random.default_rng(0).uniform(0.1, 0.9, 5000)
    carried = carry_tiers(TIERS, cosines, cosines.copy())
    assert carried == pytest.approx(TIERS, abs=2e-3)


def test_a_spread_distribution_moves_each_level_to_the_same_quantile() -> None:
    current = np.random.default_rng(1).uniform(0.2, 0.8, 5000)
    candidate = 2.0 * current - 0.5  # tuning spread the cosines: same order, wider scale
    carried = carry_tiers(TIERS, current, candidate)
    for name, distance in TIERS.items():
        assert 1.0 - carried[name] == pytest.approx(2.0 * (1.0 - distance) - 0.5, abs=5e-3)


def test_a_level_beyond_every_cosine_moves_with_the_medians() -> None:
    current = np.random.default_rng(2).uniform(0.0, 0.5, 1000)  # nothing reaches "high" (0.75)
    carried = carry_tiers(TIERS, current, current + 0.1)
    assert carried["high"] == pytest.approx(TIERS["high"] - 0.1, abs=1e-3)


def test_no_cosines_is_refused() -> None:
    with pytest.raises(ValueError, match="cosines of both models"):
        carry_tiers(TIERS, np.zeros(0), np.ones(3))
