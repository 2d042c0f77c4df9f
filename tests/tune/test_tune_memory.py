"""``Memory.tune`` end to end on a small real memory: refused, adopted, switched back and forth."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nbmemory import Memory
from nbmemory.embed import FakeEmbedder, SentenceTransformerEmbedder
from nbmemory.errors import ConfigError, NotFoundError
from nbmemory.search.reject import thresholds_for
from nbmemory.tune.run import TuneOptions
from nbmemory.tune.train import TrainConfig
from nbmemory.tune.versions import models_dir

REPO = Path(__file__).resolve().parents[2]
# A few seconds of training: enough to make a different model, not a better one.
TINY = TrainConfig(batch_size=8, max_steps=2, max_seq_length=32, device="cpu", seed=3)


def vectors_of(mem: Memory) -> dict[int, np.ndarray]:
    return {int(i): np.asarray(v) for i, v in mem.db.fetchall("SELECT chunk_id, vec FROM vectors")}


def test_tune_refuses_keeps_the_store_then_adopts_and_switches(
    notes_copy: Path,
    real_embedder: SentenceTransformerEmbedder,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NBMEMORY_CACHE", str(tmp_path / "cache"))  # where carried tiers are written
    thresholds_for.cache_clear()
    with Memory(notes_copy, embedder=real_embedder) as mem:
        before = vectors_of(mem)
        hits_before = mem.search("rotate the github token", log=False).ids
        # A gain no model can reach: the gate must refuse and leave everything as it was.
        refused = mem.tune(
            TuneOptions(
                sources=("title", "first_sentence"),
                max_queries=40,
                max_triples=16,
                hold_out=0.3,
                train=TINY,
                min_delta=1.0,
            )
        )
        assert not refused.adopted and refused.version == "v1"
        assert "keep the current model" in refused.reason
        assert refused.mining.disagreements > 0 and len(refused.mining.held_out) >= 20
        assert refused.training is not None and refused.training.steps == 2
        assert mem.db.get_meta("model_fingerprint") == real_embedder.fingerprint
        assert mem.embedder is real_embedder
        assert not mem.db.table_exists("vectors_new")
        after = vectors_of(mem)
        assert after.keys() == before.keys() and all(np.array_equal(after[i], before[i]) for i in before)
        assert mem.search("rotate the github token", log=False).ids == hits_before
        assert not (models_dir(notes_copy) / "v1").exists()
        assert not (tmp_path / "cache" / "eval" / "thresholds").exists()  # a refused model gets none
        rows = {v.version: v for v in mem.models()}
        assert rows["v1"].status == "refused" and rows["v1"].scores["gate"]["adopt"] is False
        assert rows["base"].active and rows["base"].in_use
        with pytest.raises(ConfigError, match="refused"):
            mem.use_model("v1")

        # Any gain accepted: the candidate is adopted, its staged vectors swapped in.
        adopted = mem.tune(
            TuneOptions(
                sources=("title", "first_sentence"),
                max_queries=40,
                max_triples=16,
                hold_out=0.3,
                train=TINY,
                min_delta=-1.0,
                max_p=1.0,
            )
        )
        assert adopted.adopted and adopted.version == "v2", adopted.reason
        tuned_fp = mem.db.get_meta("model_fingerprint")
        assert tuned_fp != real_embedder.fingerprint and mem.embedder.fingerprint == tuned_fp
        assert (models_dir(notes_copy) / "v2" / "config.json").exists()
        rows = {v.version: v for v in mem.models()}
        assert rows["v2"].active and rows["v2"].in_use and rows["v2"].status == "adopted"
        assert not rows["base"].active
        assert set(rows["v2"].scores["held_out_ndcg@10"]) == {"current", "candidate"}
        # The adopted model keeps tiers, the no-answer flag and the weak tail: its levels are the
        # base model's carried over to its cosines.
        carried = thresholds_for(tuned_fp)
        assert carried is not None and set(carried.tiers) == {"high", "medium", "low"}
        assert carried.tiers["high"] < carried.tiers["medium"] < carried.tiers["low"]
        hits = mem.search("rotate the github token", log=False).hits
        assert hits and hits[0].tier != "none"

    # Reopened with the configured model name, the memory loads its active tuned version.
    with Memory(notes_copy) as mem:
        assert mem.embedder.fingerprint == tuned_fp
        assert mem.search("vpn", log=False).hits
        assert mem.use_model("base") == len(before)
        assert mem.db.get_meta("model_fingerprint") == real_embedder.fingerprint
        rows = {v.version: v for v in mem.models()}
        assert rows["base"].active and rows["base"].in_use and not rows["v2"].in_use
        with pytest.raises(NotFoundError, match="no model version 'v9'"):
            mem.use_model("v9")

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "nbmemory.cli", "-q", "--db", str(notes_copy), "models"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("* base") for line in lines)
    assert any(" v1 " in line and "refused" in line for line in lines)
    assert any(" v2 " in line and "adopted" in line for line in lines)


def test_tune_needs_a_sentence_transformers_model_and_enough_content(
    tmp_path: Path, real_embedder: SentenceTransformerEmbedder
) -> None:
    with Memory(tmp_path / "f.duckdb", embedder=FakeEmbedder()) as mem:
        mem.remember("Deploys need the VPN on. Staging uses the 10.2 subnet.")
        with pytest.raises(ConfigError, match="sentence-transformers"):
            mem.tune()
    with Memory(tmp_path / "r.duckdb", embedder=real_embedder) as mem:
        mem.remember("Deploys need the VPN on. Staging uses the 10.2 subnet.", heading="Deploy to staging")
        with pytest.raises(ConfigError, match="too small to tune"):
            mem.tune(TuneOptions(train=TINY))


@pytest.mark.model
def test_writes_during_a_model_switch_store_vectors_of_the_model_in_use(tmp_path: Path) -> None:
    """A switch running in another thread (a background ``%memtune`` adopting its candidate) waits
    for the write that embedded with the old model; the writes after it use the new one."""
    import threading

    from nbmemory.store.chunks import embedding_text
    from tests.search.test_passages import WEEK
    from tests.tune.test_doctor_tuned import NOTES, _a_tuned_model, record_adopted

    db_path = tmp_path / "m.duckdb"
    with Memory(db_path) as mem:
        mem.remember_many(NOTES)
        mem.remember(WEEK.split("\n", 2)[2], heading="Platform week")  # long: it has passages
        mem.models()  # records the base version
        folder = _a_tuned_model(models_dir(db_path) / "v1")
        tuned = SentenceTransformerEmbedder(str(folder), device="cpu")
        record_adopted(mem, "v1", folder, tuned)
        switch = threading.Thread(target=mem.use_model, args=("v1",))
        switch.start()
        written = 0
        while switch.is_alive() or written < 3:
            mem.remember(f"Note {written} written while the model was being switched.", heading="during")
            written += 1
        switch.join()
        assert mem.db.get_meta("model_fingerprint") == tuned.fingerprint
        rows = mem.db.fetchall(
            "SELECT c.heading, c.text, v.vec FROM chunks c JOIN vectors v ON v.chunk_id = c.id "
            "WHERE c.deleted_at IS NULL"
        )
        assert len(rows) == len(NOTES) + 1 + written
        # The passages are the new model's only: filled before the swap, the old ones dropped.
        assert mem.db.fetchall("SELECT DISTINCT fingerprint FROM passages") == [(tuned.fingerprint,)]
        stored = np.asarray([r[2] for r in rows], dtype=np.float32)
        fresh = tuned.embed_documents([embedding_text(r[0], r[1]) for r in rows])
        np.testing.assert_allclose(np.sum(stored * fresh, axis=1), 1.0, atol=1e-4)
