"""Queries embedded through ONNX Runtime give sentence-transformers' vectors (same weights)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from nbmemory.embed import onnx_query
from nbmemory.embed.sentence import SentenceTransformerEmbedder

QUERIES = [
    json.loads(line)["query"]
    for line in (Path(__file__).resolve().parents[2] / "bench" / "data" / "notes-queries.jsonl").open()
]
pytestmark = pytest.mark.model


def torch_vector(embedder: SentenceTransformerEmbedder, text: str) -> np.ndarray:
    return embedder._model.encode([text], normalize_embeddings=True, convert_to_numpy=True)[0]


def test_query_vectors_equal_the_models_own_to_six_decimals(
    real_embedder: SentenceTransformerEmbedder,
) -> None:
    assert real_embedder.query_runtime == "onnxruntime"
    texts = [*QUERIES, "", "🙂", "a" * 5000, "Straße 東京 ΑΒΓ"]
    for text in texts:
        real_embedder._query_cache.clear()
        got = real_embedder.embed_query(text)
        assert got.dtype == np.float32 and got.shape == (real_embedder.dim,)
        assert float(np.abs(got - torch_vector(real_embedder, text)).max()) < 1e-6, text


def test_a_corrupt_export_is_replaced_and_a_disabled_runtime_uses_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real_embedder: SentenceTransformerEmbedder
) -> None:
    monkeypatch.setenv("NBMEMORY_CACHE", str(tmp_path))
    model, fingerprint = real_embedder._model, real_embedder.fingerprint
    path = tmp_path / "onnx" / f"{fingerprint}.onnx"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not an onnx graph")
    assert onnx_query.OnnxQueryEncoder.for_model(model, fingerprint, "cpu") is None  # torch serves
    assert not path.exists()  # ... and the next process exports it again
    encoder = onnx_query.OnnxQueryEncoder.for_model(model, fingerprint, "cpu")
    assert encoder is not None and path.stat().st_size > 1_000_000
    assert float(np.abs(encoder.encode("kafka lag") - torch_vector(real_embedder, "kafka lag")).max()) < 1e-6
    assert onnx_query.OnnxQueryEncoder.for_model(model, fingerprint, "cuda") is None
    monkeypatch.setenv("NBMEMORY_ONNX", "0")
    assert onnx_query.OnnxQueryEncoder.for_model(model, fingerprint, "cpu") is None


def test_the_cache_keeps_the_most_recently_used_exports_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real_embedder: SentenceTransformerEmbedder
) -> None:
    monkeypatch.setenv("NBMEMORY_CACHE", str(tmp_path))
    folder = tmp_path / "onnx"
    folder.mkdir()
    # Exports of earlier tunings, oldest first; the second oldest was used a moment ago.
    old = [folder / f"tuned{i}.onnx" for i in range(onnx_query.KEEP_EXPORTS + 1)]
    for age, path in enumerate(reversed(old), start=1):
        path.write_bytes(b"x")
        os.utime(path, (1_000_000 - age, 1_000_000 - age))
    os.utime(old[1], (2_000_000, 2_000_000))
    model, fingerprint = real_embedder._model, real_embedder.fingerprint
    assert onnx_query.OnnxQueryEncoder.for_model(model, fingerprint, "cpu") is not None
    kept = sorted(p.name for p in folder.glob("*.onnx"))
    newest_old = sorted([old[1], *old[-2:]], key=lambda p: p.name)
    assert kept == sorted([f"{fingerprint}.onnx", *(p.name for p in newest_old)])
