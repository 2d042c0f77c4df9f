"""How one search's personal and team sides become one ranking (:func:`nbmemory.team.merge`)."""

from __future__ import annotations

from nbmemory.items import Hit
from nbmemory.search.result import SearchResult
from nbmemory.search.trace import Stage, Trace
from nbmemory.team import merge


def side(query: str, fused: dict[int, float], final: dict[int, float], rejected: bool = False) -> SearchResult:
    """A side whose fusion stage scored ``fused`` and whose final stage (an MMR that rescaled
    scores within the side) gave ``final``, in that final order."""
    trace = Trace(query, [Stage("convex", scores=dict(fused)), Stage("mmr", scores=dict(final))])
    hits = [
        Hit(id=i, score=s, text=f"item {i}", snippet="", source=None, kind="memory", namespace="n")
        for i, s in sorted(final.items(), key=lambda item: -item[1])
    ]
    return SearchResult(query, hits, trace, rejected, "no confident match" if rejected else "")


def test_sides_merge_on_their_fused_scores_and_keep_their_own_order() -> None:
    # Each side's MMR put its own best at 1.0; the team's best is the better match by fusion.
    personal = side("q", fused={1: 0.40, 2: 0.35, 3: 0.10}, final={1: 1.0, 3: 0.6, 2: 0.5})
    team = side("q", fused={2**50: 0.70, 2**50 + 1: 0.20}, final={2**50: 1.0, 2**50 + 1: 0.2})
    merged = merge(personal, team, k=5)
    # The personal side's own order (1, 3, 2) is kept though 2's fused score is above 3's.
    assert [h.id for h in merged.hits] == [2**50, 1, 2**50 + 1, 3, 2]


def test_a_side_with_no_hits_does_not_decide_the_no_answer_flag() -> None:
    empty = SearchResult("q", [], Trace("q"), False, "")
    doubtful = side("q", fused={2**50: 0.1}, final={2**50: 0.1}, rejected=True)
    merged = merge(empty, doubtful, k=10)
    assert merged.rejected and merged.reason == "no confident match"
    confident = side("q", fused={1: 0.9}, final={1: 0.9})
    assert not merge(confident, doubtful, k=10).rejected
    assert not merge(empty, SearchResult("q", [], Trace("q"), False, ""), k=10).rejected


def test_the_merge_stops_at_k() -> None:
    personal = side("q", fused={1: 0.5, 2: 0.4}, final={1: 0.5, 2: 0.4})
    team = side("q", fused={2**50: 0.45}, final={2**50: 0.45})
    assert [h.id for h in merge(personal, team, k=2).hits] == [1, 2**50]
