"""Passage vectors pooled from the chunk's own forward pass ("late chunking"), checked against a
reference computed here from the transformer's hidden states, and what the indexer stores."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from nbmemory import Memory
from nbmemory.embed import SentenceTransformerEmbedder
from nbmemory.embed.sentence import LATE_OVERLAP
from nbmemory.store import passages
from nbmemory.store.chunks import embedding_text

pytestmark = pytest.mark.model

#: How close a pooled vector must be to the reference (cosine distance).
TOLERANCE = 1e-5

HEADING = "Git > Undo"
SHORT = (
    "To undo the last commit, run git reset --soft HEAD~1. It keeps the changes staged, so nothing "
    "you wrote is lost. Then fix what was wrong and commit again with the same message or a new one. "
    "A commit that was already pushed is better reverted: git revert HEAD writes a new commit that "
    "undoes it, and nobody who pulled has to rewrite their history. To drop the changes as well, "
    "git reset --hard HEAD~1 throws them away; git reflog still finds the old commit for a while. "
    "Amending is the third way: git commit --amend replaces the last commit with the staged changes."
)


def hidden_states(embedder: SentenceTransformerEmbedder, text: str) -> tuple[np.ndarray, np.ndarray]:
    """The reference: the transformer's last hidden states for ``text`` (cut where the model
    cuts it) and each token's character span, computed without nbmemory's pooling code."""
    model = embedder._model  # the test reads the weights nbmemory loaded
    enc = model.tokenizer(text, truncation=True, max_length=model.max_seq_length, return_offsets_mapping=True, return_tensors="pt")
    offsets = enc.pop("offset_mapping")[0].numpy()
    with torch.inference_mode():
        out = model[0].auto_model(**enc).last_hidden_state[0].numpy()
    return out, offsets


def reference(states: np.ndarray, offsets: np.ndarray, a: int, b: int) -> np.ndarray:
    inside = (offsets[:, 1] > offsets[:, 0]) & (offsets[:, 0] >= a) & (offsets[:, 1] <= b)
    vec = states[inside].mean(axis=0)
    return vec / np.linalg.norm(vec)


def test_a_window_vector_is_the_mean_of_its_tokens_in_the_chunk_pass(real_embedder: SentenceTransformerEmbedder) -> None:
    text = embedding_text(HEADING, SHORT)
    spans, keep = passages.plan(HEADING, SHORT, "markdown")
    assert len(spans) >= 2 and keep == len(HEADING) + 1
    docs, pooled = real_embedder.embed_with_spans([text], [spans], [keep])
    # The chunk's own vector is what embed_documents gives.
    assert np.allclose(docs[0], real_embedder.embed_documents([text])[0], atol=1e-6)
    states, offsets = hidden_states(real_embedder, text)
    for (a, b), vec in zip(spans, pooled[0], strict=True):
        assert vec is not None
        assert 1.0 - float(vec @ reference(states, offsets, a, b)) < TOLERANCE


def test_a_chunk_past_the_model_window_is_read_on_and_every_window_gets_a_vector(
    real_embedder: SentenceTransformerEmbedder,
) -> None:
    sentences = [f"Step {n}: the {w} service restarts after its config file at /etc/{w}.conf changes." for n, w in enumerate(["kafka", "nginx", "redis", "postgres", "grafana", "airflow", "vault", "consul", "etcd", "jenkins", "minio", "traefik"] * 2)]
    body = " ".join(sentences)
    text = embedding_text(HEADING, body)
    spans, keep = passages.plan(HEADING, body, "markdown")
    model = real_embedder._model
    assert len(model.tokenizer(text)["input_ids"]) > model.max_seq_length  # longer than one pass reads
    _, pooled = real_embedder.embed_with_spans([text], [spans], [keep])
    assert all(v is not None for v in pooled[0])
    states, offsets = hidden_states(real_embedder, text)
    read_to = int(offsets[:, 1].max())
    inside = [n for n, (a, b) in enumerate(spans) if b <= read_to]
    past = [n for n, (a, b) in enumerate(spans) if a >= read_to]
    assert inside and past
    for n in inside:  # read whole by the first pass: exactly its tokens' mean there
        assert 1.0 - float(pooled[0][n] @ reference(states, offsets, *spans[n])) < TOLERANCE
    # A window past the first pass: its tokens from the second, which starts LATE_OVERLAP
    # tokens before the first stopped, after the heading.
    real = offsets[offsets[:, 1] > offsets[:, 0]]
    start = int(real[len(real) - LATE_OVERLAP, 0])
    tail = text[:keep] + text[start:]
    shift = start - keep
    states2, offsets2 = hidden_states(real_embedder, tail)
    read_to2 = int(offsets2[:, 1].max()) + shift
    past = [n for n in past if spans[n][1] <= read_to2]  # later ones come from a third pass
    assert past
    for n in past:
        a, b = spans[n]
        assert 1.0 - float(pooled[0][n] @ reference(states2, offsets2, a - shift, b - shift)) < TOLERANCE


def test_indexing_stores_the_pooled_passages_and_embeds_each_chunk_once(
    tmp_path: Path, real_embedder: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NBMEMORY_PASSAGE_METHOD", "late")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "undo.md").write_text(f"# Undo\n\n{SHORT}\n")
    calls: list[int] = []
    original = real_embedder.embed_documents

    def counting(texts, progress=None):  # type: ignore[no-untyped-def]
        calls.append(len(texts))
        return original(texts, progress=progress)

    real_embedder.embed_documents = counting  # type: ignore[method-assign]
    try:
        with Memory(tmp_path / "m.duckdb", embedder=real_embedder) as mem:
            report = mem.index(notes)
            stored = mem.db.fetchall("SELECT content_hash, n, vec FROM passages ORDER BY n")
            (heading, text), = mem.db.fetchall("SELECT heading, text FROM chunks")
            assert mem.db.get_meta("passage_method") == passages.LATE
    finally:
        del real_embedder.embed_documents
    assert report.chunks_added == 1 and len(stored) >= 2
    assert calls == []  # no window was embedded on its own
    spans, keep = passages.plan(heading, text, "markdown")
    _, pooled = real_embedder.embed_with_spans([embedding_text(heading, text)], [spans], [keep])
    for (_, _n, vec), expected in zip(stored, pooled[0], strict=True):
        assert expected is not None and 1.0 - float(np.asarray(vec) @ expected) < TOLERANCE


def test_windows_are_embedded_alone_by_default_and_a_memory_switches_method_once(
    tmp_path: Path, real_embedder: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "undo.md").write_text(f"# Undo\n\n{SHORT}\n")
    assert passages.method(real_embedder) == passages.SEPARATE
    monkeypatch.setenv("NBMEMORY_PASSAGE_METHOD", "late")
    with Memory(tmp_path / "m.duckdb", embedder=real_embedder) as mem:
        mem.index(notes)
        late = mem.db.fetchall("SELECT n, vec FROM passages ORDER BY n")
        (heading, text), = mem.db.fetchall("SELECT heading, text FROM chunks")
    monkeypatch.delenv("NBMEMORY_PASSAGE_METHOD")
    with Memory(tmp_path / "m.duckdb", embedder=real_embedder) as mem:
        mem.search("undo a pushed commit", k=1)  # the first use makes them again, as windows alone
        alone = mem.db.fetchall("SELECT n, vec FROM passages ORDER BY n")
        assert mem.db.get_meta("passage_method") == passages.SEPARATE
    expected = real_embedder.embed_documents(passages.texts_of(heading, text, "markdown"))
    assert len(alone) == len(late) == len(expected) >= 2
    for (_, vec), want in zip(alone, expected, strict=True):
        assert 1.0 - float(np.asarray(vec) @ want) < TOLERANCE
    assert any(1.0 - float(np.asarray(a[1]) @ np.asarray(b[1])) > 1e-3 for a, b in zip(late, alone, strict=True))
