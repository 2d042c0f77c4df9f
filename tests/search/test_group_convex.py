"""Grouping by source and convex fusion, against hand-computed values."""

from __future__ import annotations

import pytest

from nbmemory import Memory, PipelineConfig
from nbmemory.search.convex import convex
from nbmemory.search.group import group_by_source


def test_convex_weights_normalised_scores_and_counts_a_missing_side_as_zero() -> None:
    fused = convex({"bm25": {1: 1.0, 2: 0.5}, "vector": {2: 0.8, 3: 0.6}}, {"bm25": 0.2, "vector": 0.8})
    assert [i for i, _ in fused] == [2, 3, 1]
    assert dict(fused)[2] == pytest.approx(0.2 * 0.5 + 0.8 * 0.8)
    assert dict(fused)[3] == pytest.approx(0.8 * 0.6)
    assert dict(fused)[1] == pytest.approx(0.2 * 1.0)


def test_convex_ties_break_by_best_single_score_then_first_seen() -> None:
    fused = convex({"a": {1: 0.5, 2: 1.0}, "b": {1: 0.5}}, {"a": 0.5, "b": 0.5})
    assert [i for i, _ in fused] == [2, 1]  # 0.5 each; 2 has the better single score
    assert [i for i, _ in convex({"a": {7: 0.3, 8: 0.3}}, {"a": 1.0})] == [7, 8]


def test_convex_refuses_a_negative_weight() -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        convex({"a": {1: 1.0}}, {"a": -0.1})


def test_group_keeps_the_best_chunk_of_each_source_and_counts_the_rest() -> None:
    order = [(1, 0.9), (2, 0.8), (3, 0.7), (4, 0.6), (5, 0.5), (6, 0.4)]
    source = {1: "a.md", 2: "a.md", 3: None, 4: "b.md", 5: "a.md", 6: None}
    leaders, more = group_by_source(order, source, k=3)
    assert leaders == [(1, 0.9), (3, 0.7), (4, 0.6)]
    assert more == {1: [2, 5], 3: [], 4: []}


def test_group_counts_chunks_of_kept_sources_past_the_kth_group() -> None:
    leaders, more = group_by_source([(1, 0.9), (2, 0.8), (3, 0.7)], {1: "a", 2: "b", 3: "a"}, k=1)
    assert leaders == [(1, 0.9)] and more == {1: [3]}
    with pytest.raises(ValueError, match="greater than 0"):
        group_by_source([], {}, k=0)


def test_bm25_scales_by_the_query_idf_mass_with_unseen_terms_counted() -> None:
    from nbmemory.search.convex import query_mass, scale_bm25

    mass = query_mass({"kafka": (2.0, 3), "lag": (1.0, 9), "zzz": (0.0, 0)}, unseen_idf=4.0)
    assert mass == pytest.approx(7.0)
    assert scale_bm25({1: 3.5, 2: 7.0}, mass) == {1: pytest.approx(0.5), 2: pytest.approx(1.0)}
    assert scale_bm25({1: 3.5}, 0.0) == {1: 0.0}


LITERAL_NOTES = {
    "env": "Next.js only exposes environment variables to the browser when their name starts with "
    "NEXT_PUBLIC_, for example NEXT_PUBLIC_API_URL in .env.local.",
    "schema": "Postgres puts new tables in the public schema. Public, public, public: the next "
    "step is to set the search path so the next query looks in the public schema next.",
    "ip": "To find your public IP address, curl ifconfig.me; next time use the public resolver "
    "and check the next hop with traceroute. Public addresses differ from private ones.",
}


@pytest.mark.parametrize("literal", [True, False])
def test_a_pasted_identifier_counts_where_it_is_written_not_where_its_pieces_are(
    mem: Memory, literal: bool
) -> None:
    ids = {name: mem.remember(text).id for name, text in LITERAL_NOTES.items()}
    result = mem.search("NEXT_PUBLIC_", k=3, config=PipelineConfig(literal=literal), log=False)
    bm25 = result.trace.stage("bm25")
    assert bm25 is not None and bm25.output[0] != ids["env"], "BM25 alone prefers the scattered pieces"
    first = result.hits[0].id
    assert (first == ids["env"]) is literal, result.explain(3)
