"""Fine-tuning: deterministic with a seed, pairs-only works, bad inputs are refused clearly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nbmemory.config import DEFAULT_MODEL
from nbmemory.embed import SentenceTransformerEmbedder
from nbmemory.errors import ConfigError
from nbmemory.tune.mine import Triple
from nbmemory.tune.train import CPU_MAX_STEPS, REPORT_NAME, TrainConfig, planned_steps, train_model

TOPICS = ["vpn", "docker cache", "token rotation", "postgres vacuum", "cron failures", "ssh config"]
TRIPLES = [
    Triple(
        f"how to fix {t} {i}",
        f"Notes on {t}: step {i} of the runbook explains what to check first.",
        f"Unrelated notes about {TOPICS[(n + 1) % len(TOPICS)]} number {i}.",
        "title",
        10 * n + i,
        10 * ((n + 1) % len(TOPICS)) + i,
    )
    for n, t in enumerate(TOPICS)
    for i in range(3)
]
TINY = TrainConfig(batch_size=6, max_steps=2, max_seq_length=32, device="cpu", seed=11)


def embed(folder: Path) -> np.ndarray:
    return SentenceTransformerEmbedder(str(folder), device="cpu").embed_documents(["vpn drops on the train"])


@pytest.mark.model
def test_training_is_deterministic_and_keeps_the_search_sequence_length(tmp_path: Path) -> None:
    first = train_model(TRIPLES, DEFAULT_MODEL, tmp_path / "a", TINY)
    second = train_model(TRIPLES, DEFAULT_MODEL, tmp_path / "b", TINY)
    assert first.steps == second.steps == 2 and first.triples == 12
    assert first.losses and first.device == "cpu" and first.max_seq_length == 32
    np.testing.assert_allclose(embed(tmp_path / "a"), embed(tmp_path / "b"), atol=1e-6)
    base = SentenceTransformerEmbedder(DEFAULT_MODEL, device="cpu")
    assert not np.allclose(embed(tmp_path / "a"), base.embed_documents(["vpn drops on the train"]), atol=1e-4)
    # Trained at 32 word pieces, saved with the base model's length (documents are not cut shorter).
    tuned = SentenceTransformerEmbedder(str(tmp_path / "a"), device="cpu")
    assert tuned._model.max_seq_length == base._model.max_seq_length
    assert json.loads((tmp_path / "a" / REPORT_NAME).read_text())["steps"] == 2
    # Two identical trainings make one model: the same fingerprint, though each report names its
    # own folder and seconds (a vector cache then serves the second the first one's vectors).
    assert tuned.fingerprint == SentenceTransformerEmbedder(str(tmp_path / "b"), device="cpu").fingerprint


@pytest.mark.model
def test_pairs_without_hard_negatives(tmp_path: Path) -> None:
    config = TrainConfig(batch_size=6, max_steps=1, max_seq_length=32, device="cpu", hard_negatives=False)
    report = train_model(TRIPLES, DEFAULT_MODEL, tmp_path / "pairs", config)
    assert report.steps == 1 and report.config["hard_negatives"] is False


def test_bad_inputs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="fewer than one batch"):
        train_model(TRIPLES[:3], DEFAULT_MODEL, tmp_path / "x", TINY)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not empty"):
        train_model(TRIPLES, DEFAULT_MODEL, tmp_path / "full", TINY)
    with pytest.raises(ConfigError, match="batch_size"):
        TrainConfig(batch_size=1)
    with pytest.raises(ConfigError, match="epochs"):
        TrainConfig(epochs=0)


def test_cpu_runs_are_capped() -> None:
    config = TrainConfig(batch_size=32)
    assert planned_steps(100_000, config, "cpu") == CPU_MAX_STEPS
    assert planned_steps(100_000, config, "cuda") == 100_000 // 32
    assert planned_steps(100_000, TrainConfig(batch_size=32, max_steps=0), "cpu") == 100_000 // 32
    assert planned_steps(64, config, "cpu") == 2
