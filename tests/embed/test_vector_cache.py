"""NBMEMORY_VECTOR_CACHE: a text embedded once is read back by any later embedder of the same
model (another process, another memory file) instead of running the model again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nbmemory import Memory
from nbmemory.embed.sentence import SentenceTransformerEmbedder

pytestmark = pytest.mark.model

NOTES = {
    "tokens.md": "# Tokens\n\nThe API tokens rotate every thirty days. The rotation job runs at night.\n",
    "deploy.md": "# Deploy\n\nStaging deploys need the VPN. Production deploys wait for a green build.\n",
}


def counted(embedder: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts the model itself is asked to encode from now on."""
    seen: list[str] = []
    encode = embedder._model.encode

    def counting(texts: Any, *args: Any, **kwargs: Any) -> Any:
        seen.extend(texts)
        return encode(texts, *args, **kwargs)

    monkeypatch.setattr(embedder._model, "encode", counting)
    return seen


def test_a_second_embedder_reads_what_the_first_wrote_and_encodes_only_new_texts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real_embedder: SentenceTransformerEmbedder
) -> None:
    monkeypatch.setenv("NBMEMORY_VECTOR_CACHE", str(tmp_path / "vectors"))
    texts = ["tokens rotate every thirty days", "staging deploys need the VPN", "tokens rotate every thirty days"]
    first = SentenceTransformerEmbedder(device="cpu")
    first_seen = counted(first, monkeypatch)
    done: list[int] = []
    vecs = first.embed_documents(texts, progress=done.append)
    assert sorted(first_seen) == sorted(set(texts))  # the repeated text once
    assert sum(done) == len(texts)
    # The same vectors as the model gives without a cache.
    assert float(np.abs(vecs - real_embedder.embed_documents(texts)).max()) < 1e-5

    second = SentenceTransformerEmbedder(device="cpu")  # as a new process would
    second_seen = counted(second, monkeypatch)
    done.clear()
    again = second.embed_documents([*texts, "a note nobody embedded yet"], progress=done.append)
    assert second_seen == ["a note nobody embedded yet"]
    assert sum(done) == len(texts) + 1
    assert np.array_equal(again[: len(texts)], vecs)

    # A block written after the second embedder started is read when it is missing a text.
    third = SentenceTransformerEmbedder(device="cpu")
    third.embed_documents(["written by a third process"])
    assert second.embed_documents(["written by a third process"]).shape == (1, second.dim)
    assert second_seen == ["a note nobody embedded yet"]


def test_a_second_memory_of_the_same_notes_runs_the_model_on_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NBMEMORY_VECTOR_CACHE", str(tmp_path / "vectors"))
    notes = tmp_path / "notes"
    notes.mkdir()
    for name, text in NOTES.items():
        (notes / name).write_text(text)
    with Memory(tmp_path / "a.duckdb", embedder=SentenceTransformerEmbedder(device="cpu")) as mem:
        mem.index(notes)
        expected = [h.text for h in mem.search("when do tokens rotate", k=2).hits]
    # A cut-short block (a writer killed mid-write would leave only its temporary file; this is
    # worse) is skipped, not fatal.
    (next((tmp_path / "vectors" / "embeddings").iterdir()) / "documents" / "block-0-0.npz").write_bytes(b"PK\x03")
    embedder = SentenceTransformerEmbedder(device="cpu")
    seen = counted(embedder, monkeypatch)
    with Memory(tmp_path / "b.duckdb", embedder=embedder) as mem:
        report = mem.index(notes)
        assert report.chunks_embedded > 0 and seen == []
        assert [h.text for h in mem.search("when do tokens rotate", k=2).hits] == expected


def test_without_the_variable_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real_embedder: SentenceTransformerEmbedder
) -> None:
    monkeypatch.delenv("NBMEMORY_VECTOR_CACHE", raising=False)
    monkeypatch.setenv("NBMEMORY_CACHE", str(tmp_path / "cache"))
    embedder = SentenceTransformerEmbedder(device="cpu")
    seen = counted(embedder, monkeypatch)
    embedder.embed_documents(["one text"])
    embedder.embed_documents(["one text"])
    assert seen == ["one text", "one text"]
    assert not list(tmp_path.rglob("block-*.npz"))
