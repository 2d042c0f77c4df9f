"""The whole pipeline on a real DuckDB file with the bundled model: stages, traces, explain."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from nbmemory.memory import Memory
from nbmemory.search import rerank as rerank_mod
from nbmemory.search.config import PipelineConfig
from nbmemory.store.db import utcnow

NOTES = [
    ("INC-4821: billing-api returned 502 after the deploy; the load balancer kept old targets.", "ops"),
    ("Rotate the API token for the payments service every 90 days with vault.", "ops"),
    ("For quick notebook analysis I prefer polars over pandas because lazy queries are faster.", "prefs"),
    ("The staging database of auth-gateway is on db-stg-12.internal.", "infra"),
    ("Our cafeteria serves lunch between noon and two.", "misc"),
    ("To restart the ingest worker, run systemctl restart ingest-worker on the host.", "ops"),
]


@pytest.fixture
def notes(mem: Memory) -> dict[str, int]:
    ids = mem.remember_many([t for t, _ in NOTES])
    return {text.split()[0].rstrip(":"): i for (text, _), i in zip(NOTES, ids, strict=True)}


def test_identifier_query_leans_to_bm25_and_says_why(mem: Memory, notes: dict[str, int]) -> None:
    result = mem.search("INC-4821", k=3, log=False)
    fused = result.fusion
    assert fused is not None
    assert fused.notes["weights"]["bm25"] > fused.notes["weights"]["vector"]
    assert "identifier 'INC-4821'" in fused.notes["why"]
    assert result.ids[0] == notes["INC-4821"]


def test_paraphrase_without_shared_words_leans_to_vectors(mem: Memory, notes: dict[str, int]) -> None:
    result = mem.search("which dataframe library do I like?", k=3, log=False)
    fused = result.fusion
    assert fused is not None and fused.notes["weights"]["vector"] > fused.notes["weights"]["bm25"]
    assert result.ids[0] == notes["For"]


def test_no_answer_counts_only_missing_words_rare_in_english(mem: Memory, notes: dict[str, int]) -> None:
    # Six notes lack most words: a missing common word ("recipe", "grandmother") is no evidence,
    # a missing word rare in English ("kubernetes") is (tests/search/test_real_notes.py checks
    # the flag on real notes).
    common = mem.search("my grandmother's favourite soup recipe", k=5, log=False)
    assert not common.rejected and common.hits
    stage = common.trace.stage("reject")
    assert stage is not None and "unseen words rare in English 0% < 35%" in stage.notes["why"]
    rare = mem.search("configure the kubernetes autoscaler", k=5, log=False)
    assert rare.rejected and rare.hits and "'kubernetes'" in rare.reason
    assert mem.search("how do I restart the ingest worker", k=5, log=False).ids[0] == notes["To"]


def test_hits_carry_similarity_and_tier(mem: Memory, notes: dict[str, int]) -> None:
    result = mem.search("rotate the payments API token with vault", k=3, log=False)
    top = result.hits[0]
    assert top.id == notes["Rotate"]
    assert top.similarity is not None and top.similarity > 0.6
    assert top.tier in ("high", "medium")
    assert result.hits[-1].tier in ("low", "none", "medium")


def test_dedup_collapses_a_note_stored_twice(mem: Memory, notes: dict[str, int]) -> None:
    again = mem.remember("Rotate the API token for the payments service every 90 days with vault!")
    result = mem.search("rotate api token", k=5, log=False)
    assert (notes["Rotate"] in result.ids) != (again.id in result.ids)
    stage = result.trace.stage("dedup")
    assert stage is not None and len(stage.dropped) == 1
    assert "duplicate of" in next(iter(stage.dropped.values()))
    off = mem.search("rotate api token", k=5, log=False, config=PipelineConfig(dedup=False))
    assert notes["Rotate"] in off.ids and again.id in off.ids


def test_dedup_reads_a_note_as_it_is_now_after_an_edit(mem: Memory, notes: dict[str, int]) -> None:
    # Dedup reads each candidate's text through a cache keyed by its content: an edit that makes
    # two notes the same must be seen at the next search, and one that makes them differ again too.
    other = mem.remember("Vault tokens for payments get rotated each quarter by the platform team.")
    assert len(mem.search("rotate api token", k=5, log=False).trace.stage("dedup").dropped) == 0  # type: ignore[union-attr]
    mem.update(other.id, text="Rotate the API token for the payments service every 90 days with vault.")
    stage = mem.search("rotate api token", k=5, log=False).trace.stage("dedup")
    assert stage is not None and len(stage.dropped) == 1
    mem.update(other.id, text="Vault tokens for payments get rotated each quarter by the platform team.")
    stage = mem.search("rotate api token", k=5, log=False).trace.stage("dedup")
    assert stage is None or not stage.dropped


def test_superseded_note_ranks_below_its_successor(mem: Memory, notes: dict[str, int]) -> None:
    new = mem.remember("The staging database of auth-gateway moved to db-stg-47.internal.")
    old = notes["The"]
    assert mem.search("auth-gateway staging database host", k=3, log=False).ids[0] == old
    mem.link(new.id, old, "supersedes")
    result = mem.search("auth-gateway staging database host", k=3, log=False)
    assert result.ids.index(new.id) < result.ids.index(old)
    assert "superseded by" in result.trace.stage("supersede").detail[old]  # type: ignore[union-attr]


def test_recency_prefers_the_newer_of_two_equal_notes(mem: Memory) -> None:
    a = mem.remember("The on-call owner of the export scheduler is Priya.")
    b = mem.remember("The on-call owner of the export scheduler is Marek.")
    old = utcnow() - timedelta(days=300)
    mem.db.execute("UPDATE chunks SET created_at = ?, updated_at = ? WHERE id = ?", [old, old, b.id])
    mem.db.execute("UPDATE chunks SET created_at = ?, updated_at = ? WHERE id = ?", [old, old, a.id])
    mem.db.execute("UPDATE chunks SET created_at = ? WHERE id = ?", [utcnow() - timedelta(days=2), a.id])
    mem.db.rows_changed()  # written behind the API's back: cached rows are stale
    # Recency moves an item among near-ties: the two notes tie in RRF (equal BM25, adjacent vector
    # ranks); in the convex scores the names alone put 6 % between them, more than recency's 5 %.
    result = mem.search(
        "who is on call for the export scheduler",
        k=2,
        log=False,
        config=PipelineConfig(recency=True, fusion="rrf"),
    )
    assert result.ids[0] == a.id
    assert "age 2 d" in result.trace.stage("recency").detail[a.id]  # type: ignore[union-attr]


def test_mmr_changes_order_only_when_on(mem: Memory, notes: dict[str, int]) -> None:
    mem.remember_many(
        [
            "Rotate the payments API token every 90 days using vault.",
            "Every 90 days, rotate the API token of payments in vault.",
        ]
    )
    plain = mem.search("rotate the payments token", k=4, log=False, config=PipelineConfig(dedup=False))
    diverse = mem.search(
        "rotate the payments token",
        k=4,
        log=False,
        config=PipelineConfig(dedup=False, mmr=True, mmr_lambda=0.3),
    )
    assert plain.trace.stage("mmr") is None and diverse.trace.stage("mmr") is not None
    # Three near-copies lead the plain top 3; MMR lets something else in.
    assert len(set(diverse.ids[:3]) - set(plain.ids[:3])) >= 1


def test_explain_shows_each_stage_what_moved_and_why(mem: Memory, notes: dict[str, int]) -> None:
    mem.remember("Rotate the API token for the payments service every 90 days with vault.")
    text = mem.search("rotate api token", k=5, log=False, config=PipelineConfig(recency=True)).explain()
    for part in (
        "[bm25]",
        "[vector]",
        "[convex]",
        "[recency]",
        "[dedup]",
        "[reject]",
        "[hydrate]",
        "weights=",
        "why=",
        # Items named by their place and id.
        "dropped (remembered) #",
        "duplicate of (remembered) #",
    ):
        assert part in text, (part, text)


# -- the gated cross-encoder ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_cross_encoder() -> Iterator[str]:
    """A cross-encoder trained here from a handful of pairs (no weights ship in any package)."""
    pairs = [
        ("rotate the api token", "Rotate the API token every 90 days with vault", 1.0),
        ("rotate the api token", "Our cafeteria serves lunch at noon", 0.0),
        ("restart the worker", "Restart the worker with systemctl", 1.0),
        ("restart the worker", "I prefer polars over pandas", 0.0),
    ] * 4
    with tempfile.TemporaryDirectory() as tmp:
        yield rerank_mod.train_cross_encoder(pairs, f"{tmp}/ce", epochs=2, max_length=64)
    rerank_mod.load_reranker.cache_clear()


def test_reranker_runs_only_when_the_gate_opens_and_blends_by_rank(
    mem: Memory, notes: dict[str, int], tiny_cross_encoder: str
) -> None:
    config = PipelineConfig(reranker=tiny_cross_encoder, rerank_depth=5, dedup=False, reject=False)
    ran: list[Any] = []
    for query in (
        "INC-4821",
        "token rotation",
        "what do I use for dataframes",
        "lunch time",
        "restart things",
    ):
        result = mem.search(query, k=5, log=False, config=config)
        stage = result.trace.stage("rerank")
        assert stage is not None and isinstance(stage.notes["ran"], bool) and stage.notes["why"]
        if stage.notes["ran"]:
            ran.append(query)
            fused = result.fusion
            assert fused is not None
            head = fused.output[:5]
            model = rerank_mod.load_reranker(tiny_cross_encoder)
            texts = dict(
                mem.db.fetchall(
                    "SELECT id, text FROM chunks WHERE id IN (SELECT unnest(?::BIGINT[]))", [head]
                )
            )
            ce = dict(zip(head, model.score(query, [texts[i] for i in head]).tolist(), strict=True))
            expected = [i for i, _ in rerank_mod.blend(fused.output, ce, k=60)][:5]
            assert result.ids == expected
            assert all("cross-encoder #" in stage.detail[i] for i in head)
        else:
            assert "both retrievers" in stage.notes["why"] or "clear leader" in stage.notes["why"]
    # The identifier query has one clear answer: the gate keeps the model out of it; the vaguer
    # ones open it.
    assert "INC-4821" not in ran and ran
    always = PipelineConfig(reranker=tiny_cross_encoder, rerank_gate=None, rerank_depth=5)
    assert mem.search("INC-4821", k=3, log=False, config=always).trace.stage("rerank").notes["ran"]  # type: ignore[union-attr]


def test_missing_reranker_is_a_clear_error(mem: Memory, notes: dict[str, int], tmp_path: Path) -> None:
    from nbmemory.errors import ConfigError

    config = PipelineConfig(reranker=str(tmp_path / "no-such-model"), rerank_gate=None)
    with pytest.raises(ConfigError, match=r"reranker .* not found"):
        mem.search("token", k=3, log=False, config=config)
