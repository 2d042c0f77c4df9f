"""Embedders: the bundled model offline, local folders, prefixes, errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from nbmemory import ConfigError, ModelNotFoundError
from nbmemory.embed import FakeEmbedder, SentenceTransformerEmbedder, bundled_model_path
from nbmemory.embed.sentence import prefixes_for


@pytest.mark.model
def test_bundled_model_gives_unit_vectors_and_ranks_paraphrases(real_embedder) -> None:
    assert real_embedder.dim == 384
    docs = real_embedder.embed_documents(
        ["The cat sat on the mat.", "Quarterly revenue grew by ten percent.", "A kitten rested on the rug."]
    )
    assert docs.shape == (3, 384) and docs.dtype == np.float32
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    query = real_embedder.embed_query("a small cat lying on a carpet")
    sims = docs @ query
    assert sims[2] > sims[1] and sims[0] > sims[1]


@pytest.mark.model
def test_a_local_copy_of_the_model_loads_by_path_with_the_same_fingerprint(
    tmp_path: Path, real_embedder
) -> None:
    copy = tmp_path / "my-model"
    shutil.copytree(bundled_model_path(), copy)
    local = SentenceTransformerEmbedder(str(copy), device="cpu")
    assert local.fingerprint == real_embedder.fingerprint
    text = ["same weights, same vectors"]
    assert np.allclose(local.embed_documents(text), real_embedder.embed_documents(text), atol=1e-5)


@pytest.mark.model
def test_an_unknown_model_fails_offline_with_a_message_that_says_what_to_do() -> None:
    with pytest.raises(ModelNotFoundError, match="local folder"):
        SentenceTransformerEmbedder("no-such-org/no-such-model-xyz", device="cpu")


def test_known_prefixes_are_applied_by_model_name() -> None:
    assert prefixes_for("BAAI/bge-small-en-v1.5")[0].startswith("Represent this sentence")
    assert prefixes_for("intfloat/e5-small-v2") == ("query: ", "passage: ")
    assert prefixes_for("all-MiniLM-L6-v2") == ("", "")
    assert prefixes_for("/home/me/models/multilingual-e5-base") == ("query: ", "passage: ")


def test_bad_embedder_arguments() -> None:
    with pytest.raises(ValueError, match="dim must be greater than 0"):
        FakeEmbedder(dim=0)
    with pytest.raises(ConfigError, match="batch_size"):
        SentenceTransformerEmbedder(batch_size=0)


def test_fake_embedder_is_deterministic_and_word_sensitive() -> None:
    a, b = FakeEmbedder(dim=64), FakeEmbedder(dim=64)
    va = a.embed_documents(["tomato sauce", "meteor shower"])
    assert np.array_equal(va, b.embed_documents(["tomato sauce", "meteor shower"]))
    q = a.embed_query("tomato")
    assert va[0] @ q > va[1] @ q
    assert FakeEmbedder(tag="x").fingerprint != FakeEmbedder(tag="y").fingerprint
