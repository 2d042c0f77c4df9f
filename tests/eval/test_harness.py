"""The BEIR harness indexes through the public ingest path and scores what search returns."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from nbmemory.embed import FakeEmbedder
from nbmemory.errors import ConfigError
from nbmemory.eval import cache, harness
from nbmemory.eval.harness import IndexOptions, evaluate_beir, resolve_configs, stage_toggles
from nbmemory.memory import Memory
from nbmemory.search.config import PipelineConfig
from nbmemory.store.db import Database

SCIFACT = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "beir" / "scifact"


def _rows(path: Path) -> list[tuple[Any, ...]]:
    db = Database(path)
    try:
        return db.fetchall("SELECT source, heading, text, kind FROM chunks ORDER BY id")
    finally:
        db.close()


def test_documents_are_stored_with_remember_many(tiny_beir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    original = Memory.remember_many

    def spy(self: Memory, texts: Any, **kwargs: Any) -> list[int]:
        calls.append({"texts": list(texts), **kwargs})
        return original(self, texts, **kwargs)

    monkeypatch.setattr(Memory, "remember_many", spy)
    result = evaluate_beir(tiny_beir, "bm25,vector,rrf,default", embedder=FakeEmbedder(dim=32), log=None)

    assert len(calls) == 1
    assert calls[0]["sources"] == [f"d{i}" for i in range(1, 11)]
    assert calls[0]["headings"][0] == "Vitamin D and bone density"
    rows = _rows(result.store.path)
    assert [r[0] for r in rows] == [f"d{i}" for i in range(1, 11)]
    assert rows[0][1] == "Vitamin D and bone density"
    assert rows[0][2].startswith("Vitamin D supplements")
    assert {r[3] for r in rows} == {"memory"}

    assert set(result.runs) == {"bm25", "vector", "rrf", "default"}
    bm25 = result.runs["bm25"]
    # Every tiny query shares its key words with its relevant document.
    assert bm25.ranked["q1"][0] == "d1"
    assert bm25.per_query["q2"]["mrr@10"] == 1.0
    assert bm25.overall["recall@10"] == 1.0
    assert 0.0 < result.runs["rrf"].overall["ndcg@10"] <= 1.0
    assert result.queries == 4


def test_hits_tables_and_json(tiny_beir: Path) -> None:
    result = evaluate_beir(tiny_beir, "bm25,rrf", embedder=FakeEmbedder(dim=32), log=None)
    table = result.table()
    assert table["config"].to_list() == ["bm25", "rrf"]
    assert {"ndcg@10", "recall@100", "map@10", "mrr@10", "p50_ms", "p95_ms"} <= set(table.columns)
    per_query = result.per_query()
    assert per_query.height == 2 * 4
    hits = result.hits()
    top = hits.filter((hits["config"] == "rrf") & (hits["query_id"] == "q1") & (hits["rank"] == 1))
    assert top["doc_id"].item() == "d1"
    assert top["relevance"].item() == 1
    assert top["bm25_rank"].item() is not None
    payload = result.to_dict()
    assert payload["configs"]["bm25"]["metrics"]["recall@10"] == 1.0
    assert payload["configs"]["rrf"]["pipeline"]["retrievers"] == ["bm25", "vector"]
    assert "q1" in payload["configs"]["rrf"]["per_query"]


def test_rerun_reuses_cached_store_and_vectors(tiny_beir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Pinned: an edit of the store code while the suite runs must not look like a cache miss.
    monkeypatch.setattr(cache, "code_version", lambda: "pinned")
    first_embedder = FakeEmbedder(dim=32)
    first = evaluate_beir(tiny_beir, "bm25", embedder=first_embedder, log=None)
    assert not first.store.reused
    assert first_embedder.texts_embedded == 10

    again = FakeEmbedder(dim=32)
    second = evaluate_beir(tiny_beir, "bm25", embedder=again, log=None)
    assert second.store.reused
    assert second.store.path == first.store.path
    assert again.texts_embedded == 0
    assert second.runs["bm25"].overall == first.runs["bm25"].overall

    # Another store layout re-indexes, but the vectors of unchanged texts come from the cache.
    third = FakeEmbedder(dim=32)
    body = evaluate_beir(tiny_beir, "bm25", embedder=third, options=IndexOptions(title="body"), log=None)
    assert not body.store.reused
    assert third.texts_embedded == 0


def test_no_cache_writes_nothing(tiny_beir: Path, tmp_path: Path) -> None:
    result = evaluate_beir(tiny_beir, "bm25", embedder=FakeEmbedder(dim=32), cache=False, log=None)
    assert result.runs["bm25"].overall["recall@10"] == 1.0
    assert not (tmp_path / "cache").exists()


def test_title_in_body(tiny_beir: Path) -> None:
    result = evaluate_beir(
        tiny_beir, "bm25", embedder=FakeEmbedder(dim=32), options=IndexOptions(title="body"), log=None
    )
    source, heading, text, _ = _rows(result.store.path)[0]
    assert (source, heading) == ("d1", "")
    assert text.startswith("Vitamin D and bone density\nVitamin D supplements")


def test_maxp_scores_a_document_by_its_best_chunk(tiny_beir: Path) -> None:
    # A long document is cut into chunks; its doc id appears once in the ranking.
    long_text = " ".join(f"Sentence {i} about vitamin D and bone density." for i in range(30))
    corpus = tiny_beir / "corpus.jsonl"
    corpus.write_text(
        corpus.read_text(encoding="utf-8").replace(
            "Vitamin D supplements increase bone mineral density in older adults.", long_text
        ),
        encoding="utf-8",
    )
    result = evaluate_beir(
        tiny_beir,
        "bm25",
        embedder=FakeEmbedder(dim=32),
        options=IndexOptions(chunking="maxp", max_chars=200),
        log=None,
    )
    sources = [r[0] for r in _rows(result.store.path)]
    assert sources.count("d1") > 1
    assert result.store.items == len(sources) > result.store.documents == 10
    for docs in result.runs["bm25"].ranked.values():
        assert len(docs) == len(set(docs))
    assert result.runs["bm25"].ranked["q1"][0] == "d1"


def test_named_configs() -> None:
    configs = resolve_configs("bm25,vector,rrf,default")
    assert configs["bm25"].retrievers == ("bm25",)
    assert configs["vector"].retrievers == ("vector",)
    assert configs["rrf"].rrf_k == 60
    assert configs["rrf"].weights == {"bm25": 1.0, "vector": 1.0}
    assert configs["default"] == PipelineConfig()
    with pytest.raises(ConfigError, match="unknown configuration 'bm52'"):
        resolve_configs("bm52")
    custom = resolve_configs({"heavy": PipelineConfig(fusion="rrf", adaptive=False, weights={"bm25": 1.0, "vector": 0.2})})
    assert list(custom) == ["heavy"]


def test_stage_toggles_are_found_by_introspection(monkeypatch: pytest.MonkeyPatch) -> None:
    toggles = stage_toggles()
    # Every boolean stage switch of PipelineConfig, flipped from its default.
    assert set(toggles) == {
        "default-adaptive",
        "default-passages",
        "default-literal",
        "default-turns",
        "default-time_words",
        "default-fill_bm25",
        "default-symbols",
        "default-supersede",
        "default-dedup",
        "default+mmr",
        "default-group",
        "default-reject",
        "default+recency",
    }
    assert toggles["default+mmr"].mmr is True
    assert toggles["default-dedup"].dedup is False
    assert toggles["default-dedup"].adaptive is True
    assert set(resolve_configs("all")) == {"bm25", "vector", "rrf", "default", *toggles}

    @dataclasses.dataclass
    class WithStage(PipelineConfig):
        spell_check: bool = False

    monkeypatch.setattr(harness, "PipelineConfig", WithStage)
    assert "default+spell_check" in stage_toggles()


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.skipif(not SCIFACT.exists(), reason="the shared BEIR SciFact folder is not on this machine")
def test_real_model_on_a_scifact_slice(real_embedder: Any) -> None:
    result = evaluate_beir(
        SCIFACT, "bm25,vector,rrf", embedder=real_embedder, limit_queries=40, limit_docs=200, log=None
    )
    assert result.store.documents == 200
    for name in ("bm25", "vector", "rrf"):
        # Among 200 documents (the judged ones included) both retrievers find most answers.
        assert result.runs[name].overall["ndcg@10"] > 0.5, name
        assert result.runs[name].overall["recall@100"] > 0.8, name
    assert result.runs["vector"].hits[0]["vector_sim"] is not None


def test_changed_store_code_rebuilds_and_drops_the_old_store(
    tiny_beir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache, "code_version", lambda: "before")
    first = evaluate_beir(tiny_beir, "bm25", embedder=FakeEmbedder(dim=32), log=None)
    monkeypatch.setattr(cache, "code_version", lambda: "changed")
    embedder = FakeEmbedder(dim=32)
    second = evaluate_beir(tiny_beir, "bm25", embedder=embedder, log=None)
    assert not second.store.reused
    assert second.store.path != first.store.path
    assert not first.store.path.exists()
    assert embedder.texts_embedded == 0  # the vectors still come from the cache
    assert second.runs["bm25"].overall == first.runs["bm25"].overall
