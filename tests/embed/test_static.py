"""The static model: distilled from the bundled model once, read back from its cache, a model of
its own to a memory (switching to it or back re-embeds)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nbmemory import Memory
from nbmemory.embed.sentence import SentenceTransformerEmbedder
from nbmemory.embed.static import StaticEmbedder, is_static, source_of
from nbmemory.errors import ModelNotFoundError

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def distilled(tmp_path_factory: pytest.TempPathFactory) -> tuple[StaticEmbedder, Path, list[str]]:
    folder = tmp_path_factory.mktemp("static-models")
    said: list[str] = []
    return StaticEmbedder("static", folder=folder, log=said.append), folder, said


def test_the_setting_names_a_static_model_and_its_source() -> None:
    assert is_static("static") and is_static("static:BAAI/bge-small-en-v1.5")
    assert not is_static("all-MiniLM-L6-v2") and not is_static("statistics-model")
    assert source_of("static") == "all-MiniLM-L6-v2"
    assert source_of("static:/models/mine") == "/models/mine"
    with pytest.raises(ModelNotFoundError, match="not a static model setting"):
        StaticEmbedder("all-MiniLM-L6-v2")


def test_it_is_distilled_once_and_read_back_with_the_same_vectors(
    distilled: tuple[StaticEmbedder, Path, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, folder, said = distilled
    assert any("distilling" in line for line in said)

    def no_model(*args: object, **kwargs: object) -> None:
        raise AssertionError("a cached table is read without loading the source model")

    monkeypatch.setattr(SentenceTransformerEmbedder, "__init__", no_model)
    again: list[str] = []
    second = StaticEmbedder("static", folder=folder, log=again.append)
    assert again == []  # read from the cache, not distilled again
    texts = ["rotate the API token", "VACUUM FULL locks the table"]
    assert np.array_equal(first.embed_documents(texts), second.embed_documents(texts))
    assert first.fingerprint == second.fingerprint and first.dim == 384


def test_its_vectors_are_unit_length_and_rank_the_matching_text_first(
    distilled: tuple[StaticEmbedder, Path, list[str]],
) -> None:
    model = distilled[0]
    docs = [
        "To rotate the token, revoke the old key and create a new one in the settings page.",
        "git checkout stash@{1} -- README.md restores one file from a stash.",
        "VACUUM FULL takes an exclusive lock on the table while it rewrites it.",
        "Banana bread needs three ripe bananas and an hour in the oven.",
    ]
    queries = [
        "how do I rotate an API token",
        "restore a single file from git stash",
        "does vacuum lock postgres tables",
    ]
    vectors = model.embed_documents(docs)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    scores = np.stack([model.embed_query(q) for q in queries]) @ vectors.T
    assert list(scores.argmax(axis=1)) == [0, 1, 2]
    # A text with no token in the vocabulary's reach is a zero vector, not an error.
    assert model.embed_documents([""]).shape == (1, 384)


def test_a_memory_switched_to_the_static_model_and_back_is_re_embedded(
    distilled: tuple[StaticEmbedder, Path, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NBMEMORY_CACHE", str(tmp_path / "cache"))
    static = distilled[0]
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "tokens.md").write_text("# Tokens\n\nRotate the API token every ninety days.\n")
    (notes / "bread.md").write_text("# Bread\n\nBanana bread needs three ripe bananas.\n")
    path = tmp_path / "m.duckdb"
    with Memory(path, embedder=static, refine="inline") as mem:
        mem.index(notes)
        assert mem.db.get_meta("model_fingerprint") == static.fingerprint
        assert mem.search("when should the token be rotated", k=1).hits[0].source.endswith("tokens.md")
    with Memory(path, model="all-MiniLM-L6-v2", refine="inline") as mem:
        # The first use re-embeds with the model the memory was opened with.
        assert mem.search("when should the token be rotated", k=1).hits[0].source.endswith("tokens.md")
        assert mem.db.get_meta("model_fingerprint") == mem.embedder.fingerprint != static.fingerprint
        assert mem.stats()["items"] == 2
