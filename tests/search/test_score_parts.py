"""Every hit's score is the sum of the named parts the trace records, whatever stages ran, and
recording them changes no score and no order."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from nbmemory import Memory, PipelineConfig
from nbmemory.remote import wire
from nbmemory.search import rerank as rerank_mod
from nbmemory.search.convex import ConvexParts, convex
from nbmemory.search.decay import ItemSignals, factor_parts, recency_factor
from nbmemory.search.result import SearchResult
from nbmemory.search.rrf import rrf, rrf_parts

NOTES = [
    "Rotate the API token every quarter; the vault holds the current one.",
    "Deploys to staging need the VPN on and the 10.2 subnet routed.",
    "INC-4821: the nightly backup failed because the token had expired.",
    "parse_config reads the YAML file and fills in defaults for missing keys.",
    "The VPN client drops the route after sleep: reconnect before deploying.",
    "Token rotation checklist: revoke the old token, update CI secrets, redeploy.",
    "Staging database snapshots run at 02:00; restores take about ten minutes.",
    "git reset --hard HEAD~ throws away the last commit and its changes.",
] + [f"note {i} about deploys, tokens and the vpn, version {i % 5}" for i in range(30)]
QUERIES = [
    "token rotation",
    "INC-4821",
    "deploy to staging over vpn",
    "parse_config defaults",
    "git reset --hard HEAD~",
]


def assert_parts_sum(result: SearchResult) -> None:
    parts = result.parts()
    for hit in result.hits:
        assert parts[hit.id], (hit.id, result.explain())
        assert sum(parts[hit.id].values()) == pytest.approx(hit.score, abs=1e-9), (parts[hit.id], hit.score)


@pytest.fixture
def notes_mem(fake_mem: Memory) -> Memory:
    items = fake_mem.remember_many(NOTES)
    # Importance and a supersedes link, so recency and supersede change scores.
    fake_mem.update(items[0], importance=0.9, pinned=True)
    fake_mem.link(items[5], items[0], "supersedes")
    return fake_mem


@pytest.mark.parametrize(
    "config",
    [
        PipelineConfig(),
        PipelineConfig(recency=True, recency_weight=0.2),
        PipelineConfig(mmr=True),
        PipelineConfig(fusion="rrf"),
        PipelineConfig(fusion="rrf", adaptive=False, recency=True),
        PipelineConfig(retrievers=("bm25",)),
        PipelineConfig(group=False, dedup=False, supersede=True, recency=True, mmr=True),
    ],
    ids=["default", "recency", "mmr", "rrf", "rrf-recency", "bm25-only", "every-stage"],
)
def test_every_hit_is_the_sum_of_its_parts(notes_mem: Memory, config: PipelineConfig) -> None:
    for query in QUERIES:
        assert_parts_sum(notes_mem.search(query, k=8, config=config, log=False))


def test_a_superseded_item_records_its_move(notes_mem: Memory) -> None:
    result = notes_mem.search(
        "token rotation checklist quarter", k=10, config=PipelineConfig(group=False), log=False
    )
    stage = result.trace.stage("supersede")
    assert stage is not None
    moved = [i for i, parts in stage.parts.items() if "superseded" in parts]
    assert moved, result.explain()
    assert_parts_sum(result)


def test_recency_parts_name_each_signal(notes_mem: Memory) -> None:
    result = notes_mem.search("token", k=10, config=PipelineConfig(recency=True), log=False)
    names = {name for parts in result.parts().values() for name in parts}
    assert {"bm25", "cosine", "pinned", "recency", "importance", "retrievals"} <= names


def test_reranked_scores_break_down_into_both_ranks(
    notes_mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    class ByLength:
        name = "by-length"

        def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
            return np.array([len(t) for t in texts], dtype=np.float32)

    monkeypatch.setattr(rerank_mod, "load_reranker", lambda model, device=None: ByLength())
    config = PipelineConfig(reranker="by-length", rerank_gate=None, rerank_depth=5)
    result = notes_mem.search("token rotation", k=8, config=config, log=False)
    assert result.trace.stage("rerank").notes["ran"]  # type: ignore[union-attr]
    first = result.parts()[result.hits[0].id]
    assert set(first) == {"fused rank", "cross-encoder"}
    assert_parts_sum(result)


def test_the_parts_cross_the_wire(notes_mem: Memory) -> None:
    result = notes_mem.search("token rotation", k=5, log=False)
    back = wire.loads(wire.dumps(result))
    assert back.parts() == result.parts() and back.trace.labels == result.trace.labels


def test_recording_the_parts_changes_no_score() -> None:
    lexical = {1: 0.9, 2: 0.1, 3: 1.4}
    chunk = {1: 0.2, 2: 0.6, 4: 0.55}
    raised = {1: 0.25, 2: 0.6, 4: 0.7}
    alpha, base = 0.8 * (1 - 0.5 * 0.6), 0.8
    fused = convex({"bm25": lexical, "vector": raised}, {"bm25": 1 - alpha, "vector": alpha})
    parts = ConvexParts(lexical, chunk, raised, alpha, base, [i for i, _ in fused])
    assert {i: sum(p.values()) for i, p in parts.items()} == pytest.approx(dict(fused), abs=1e-12)
    assert parts[1]["passage"] == pytest.approx(alpha * 0.05) and parts[4]["bm25"] == 0.0
    assert parts[3]["identifier"] == pytest.approx((base - alpha) * 1.4)
    ranked = rrf({"bm25": [1, 2, 3], "vector": [3, 4]}, k=60, weights={"bm25": 2.0})
    terms = rrf_parts(
        {"bm25": [1, 2, 3], "vector": [3, 4]}, [i for i, _ in ranked], k=60, weights={"bm25": 2.0}
    )
    assert terms[3] == {"bm25": 2 / 63, "vector": 1 / 61}
    assert {i: sum(p.values()) for i, p in terms.items()} == dict(ranked)


def test_the_recency_factor_is_one_plus_its_parts() -> None:
    now = datetime(2026, 3, 1)
    for signals in (
        ItemSignals(datetime(2026, 1, 1), None, 0.9, 12, False),
        ItemSignals(datetime(2025, 1, 1), datetime(2026, 2, 27), 0.1, 0, False),
        ItemSignals(datetime(2026, 1, 1), None, 0.5, 3, True),
    ):
        factor, _ = recency_factor(signals, now, 30.0, 0.1)
        assert 1 + sum(factor_parts(signals, now, 30.0, 0.1).values()) == pytest.approx(factor, abs=1e-12)


def test_explain_names_items_by_place(notes_mem: Memory, tmp_path: Path) -> None:
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "deploy.md").write_text(
        "# Deploy\n\nDeploys need the VPN and the token.\n", encoding="utf-8"
    )
    notes_mem.index(tmp_path / "ops")
    text = notes_mem.search("deploy vpn token", k=5, log=False).explain(5)
    assert "ops/deploy.md:" in text and "(remembered) #" in text
    assert " = bm25 " in text  # a fused score is followed by its parts
