"""``doctor --repair`` on a memory whose active model is a tuned version keeps that version.

Before one loader decided the model of a store, ``doctor`` built the configured base model when
nothing had been loaded yet, saw a "mismatch" with the tuned vectors and re-embedded every item
with the base model: the tuning was silently undone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nbmemory import Memory
from nbmemory.active_model import load_for_store
from nbmemory.embed.sentence import SentenceTransformerEmbedder, bundled_model_path
from nbmemory.tune import versions

NOTES = [
    "The staging database runs on db-stg-12 behind the VPN.",
    "Rotate the deploy token every ninety days with the vault CLI.",
    "Kafka consumer lag above ten thousand pages the on-call engineer.",
    "Use polars lazy frames to keep memory flat on large parquet files.",
]


def _a_tuned_model(out: Path) -> Path:
    """A real sentence-transformers folder whose weights differ from the bundled model's."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(bundled_model_path()), device="cpu")
    rng = np.random.default_rng(0)
    import torch

    with torch.no_grad():
        for param in list(model.parameters())[:4]:
            param.add_(torch.from_numpy(rng.normal(0, 0.02, tuple(param.shape)).astype(np.float32)))
    model.save(str(out))
    return out


def record_adopted(mem: Memory, version: str, folder: Path, tuned: SentenceTransformerEmbedder) -> None:
    """Record ``folder`` as an adopted version of ``mem``'s model, as ``tune`` does."""
    with mem.db.transaction():
        versions.record(
            mem.db,
            version,
            str(folder),
            status="adopted",
            base_model=mem.settings.model,
            fingerprint=tuned.fingerprint,
        )


@pytest.mark.usefixtures("real_embedder")
def test_doctor_repair_keeps_the_active_tuned_version(tmp_path: Path) -> None:
    db_path = tmp_path / "m.duckdb"
    with Memory(db_path) as mem:
        mem.remember_many(NOTES)
        base_fingerprint = mem.db.get_meta("model_fingerprint")
        mem.models()  # records the base version
        folder = _a_tuned_model(versions.models_dir(db_path) / "v1")
        tuned = SentenceTransformerEmbedder(str(folder), device="cpu")
        assert tuned.fingerprint != base_fingerprint
        record_adopted(mem, "v1", folder, tuned)
        assert mem.use_model("v1") == len(NOTES)
        assert mem.db.get_meta("model_fingerprint") == tuned.fingerprint

    # A new process: nothing loaded yet, and doctor is the first thing it runs.
    with Memory(db_path) as mem:
        report = mem.doctor(repair=True)
        assert report.ok, report.summary()
        model_check = next(c for c in report.checks if c.name == "model")
        assert model_check.ok and not model_check.repaired, model_check.detail
        assert mem.db.get_meta("model_fingerprint") == tuned.fingerprint
        assert load_for_store(mem.db, mem.settings.model, "cpu").fingerprint == tuned.fingerprint
        hit = mem.search("which host is the staging database on", k=1).hits[0]
        assert "db-stg-12" in hit.text
