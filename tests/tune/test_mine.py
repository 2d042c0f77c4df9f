"""Mining on a small real corpus: disagreement is found and every triple is well formed."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbmemory import Memory
from nbmemory.embed import SentenceTransformerEmbedder
from nbmemory.errors import ConfigError
from nbmemory.tune.mine import (
    KEYWORD_HEAVY,
    VECTOR_HEAVY,
    PseudoQuery,
    choose_negative,
    first_sentence,
    heavy_runs,
    held_out,
    mine_triples,
    pipeline_retriever,
    pseudo_queries,
    title_query,
)


def test_first_sentence_and_title_query() -> None:
    assert first_sentence("Deploys need the VPN. Staging uses 10.2.\nDone.") == (
        "Deploys need the VPN.",
        "Staging uses 10.2. Done.",
    )
    assert first_sentence("no end here") == ("no end here", "")
    assert title_query("Runbook > Deploy > Staging cluster") == "Deploy Staging cluster"


def test_heavy_runs_follow_the_weights() -> None:
    bm25 = list(range(1, 21))
    vector = list(range(21, 41))
    keyword, vec = heavy_runs(bm25, vector)
    assert keyword == bm25[:10] and vec == vector[:10]
    assert KEYWORD_HEAVY["bm25"] > KEYWORD_HEAVY["vector"] and VECTOR_HEAVY["vector"] > VECTOR_HEAVY["bm25"]
    # Same lists: the two fusions agree, so there is no disagreement to mine.
    keyword, vec = heavy_runs(bm25, bm25)
    assert set(keyword) == set(vec)


def test_negative_rule_prefers_what_only_the_vector_run_ranks() -> None:
    keyword = [1, 2, 3, 4]
    vector = [1, 9, 2, 8]
    assert choose_negative(keyword, vector, lambda i: False) == (9, "vector_only")
    assert choose_negative(keyword, vector, lambda i: i in (9, 8)) == (3, "keyword_only")
    assert choose_negative(keyword, keyword, lambda i: False) == (None, "")


def test_held_out_split_is_seeded_and_about_the_share() -> None:
    picked = [i for i in range(2000) if held_out(i, 0.2, seed=3)]
    assert picked == [i for i in range(2000) if held_out(i, 0.2, seed=3)]
    assert 320 < len(picked) < 480
    assert picked != [i for i in range(2000) if held_out(i, 0.2, seed=4)]
    assert not any(held_out(i, 0.0, seed=3) for i in range(100))


def test_pseudo_queries_never_contain_their_answer(
    notes_copy: Path, real_embedder: SentenceTransformerEmbedder
) -> None:
    with Memory(notes_copy, embedder=real_embedder) as mem:
        queries = pseudo_queries(mem.db, ("title", "first_sentence"))
        kinds = {q.kind for q in queries}
        assert kinds == {"title", "first_sentence"}
        texts = [q.text.lower() for q in queries]
        assert len(texts) == len(set(texts))
        for q in queries:
            assert q.source_id is not None and q.positive
            if q.kind == "first_sentence":
                # The positive is the rest of the item: the query's own words are cut out.
                assert q.text not in q.positive
                assert 4 <= len(q.text.split()) <= 40
            else:
                assert len(q.text.split()) >= 3
        code_ids = {int(r[0]) for r in mem.db.fetchall("SELECT id FROM chunks WHERE kind = 'code'")}
        assert not {q.source_id for q in queries if q.kind == "first_sentence"} & code_ids
        with pytest.raises(ConfigError, match="query source"):
            pseudo_queries(mem.db, ("titles",))


def test_mining_finds_disagreement_and_builds_well_formed_triples(
    notes_copy: Path, real_embedder: SentenceTransformerEmbedder
) -> None:
    with Memory(notes_copy, embedder=real_embedder) as mem:
        queries = pseudo_queries(mem.db, ("title", "first_sentence"))
        report = mine_triples(
            mem.db, queries, pipeline_retriever(mem.db, real_embedder), hold_out=0.2, seed=7
        )
        rows = {
            int(r[0]): (r[1], r[2], r[3] or "", r[4])
            for r in mem.db.fetchall("SELECT id, heading, text, source, deleted_at FROM chunks")
        }
    assert report.queries + len(report.held_out) == len(queries)
    assert 0 < report.disagreements <= report.queries
    assert 0.0 < report.disagreement_rate <= 1.0
    assert 0 < len(report.triples) <= report.disagreements
    assert sum(k["triples"] for k in report.by_kind.values()) == len(report.triples)
    held_ids = {q.source_id for q in report.held_out}
    assert held_ids, "a 20 % split of ~76 items holds some out"
    for t in report.triples:
        assert t.positive_id != t.negative_id
        assert t.positive_id not in held_ids and t.negative_id not in held_ids
        pos_heading, pos_text, pos_source, _ = rows[t.positive_id]
        neg_heading, neg_text, neg_source, deleted = rows[t.negative_id]
        assert deleted is None
        assert t.query and t.positive and t.negative and t.positive != t.negative
        assert neg_text != pos_text
        # Never a sibling chunk of the same section of the same file.
        assert not (neg_source == pos_source and neg_heading == pos_heading)
        # The query is not its own hard negative, nor copied into its positive.
        assert t.query not in t.negative or t.kind == "title"
        assert t.negative in (neg_text, f"{neg_heading}\n{neg_text}" if neg_heading else neg_text)
    # Training and held-out queries never share a source item.
    assert not {t.positive_id for t in report.triples} & held_ids
    assert "disagree" in report.summary()


def test_logged_queries_take_the_item_both_runs_agree_on(
    notes_copy: Path, real_embedder: SentenceTransformerEmbedder
) -> None:
    with Memory(notes_copy, embedder=real_embedder) as mem:
        for text in ("rotate the github token", "vpn drops on the train wifi", "docker layer cache"):
            mem.search(text)
        mem.flush()
        queries = pseudo_queries(mem.db, ("log",))
        assert {q.kind for q in queries} == {"log"} and len(queries) == 3
        assert all(q.source_id is None for q in queries)
        report = mine_triples(mem.db, queries, pipeline_retriever(mem.db, real_embedder), hold_out=0.2)
    # Logged queries have no source item: none is held out, all are mined.
    assert report.queries == 3 and not report.held_out
    for t in report.triples:
        assert t.kind == "log" and t.positive_id != t.negative_id


def test_a_query_without_candidates_gives_no_triple(tmp_path: Path) -> None:
    from nbmemory.embed import FakeEmbedder

    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder()) as mem:
        mem.remember(
            "alpha beta gamma delta epsilon. zeta eta theta iota kappa lambda.", heading="alpha beta gamma"
        )
        only = PseudoQuery("alpha beta gamma", "title", 1, "zeta")
        report = mine_triples(mem.db, [only], lambda q: ([1], [1]), hold_out=0.0)
    assert report.queries == 1 and report.disagreements == 0 and not report.triples


def test_negative_margin_keeps_only_clearly_less_similar_negatives(
    notes_copy: Path, real_embedder: SentenceTransformerEmbedder
) -> None:
    with Memory(notes_copy, embedder=real_embedder) as mem:
        queries = pseudo_queries(mem.db, ("title",))
        retrieve = pipeline_retriever(mem.db, real_embedder)
        plain = mine_triples(mem.db, queries, retrieve, hold_out=0.0, max_queries=30, seed=2)
        guarded = mine_triples(
            mem.db, queries, retrieve, hold_out=0.0, max_queries=30, seed=2, negative_margin=0.9
        )
        for t in guarded.triples:
            sims = retrieve.similarity(t.query, [t.positive_id, t.negative_id])
            assert sims[t.negative_id] < 0.9 * sims[t.positive_id]
    assert guarded.queries == plain.queries
    assert len(guarded.triples) <= len(plain.triples)
    assert sum(guarded.skipped.values()) == guarded.disagreements - len(guarded.triples)
