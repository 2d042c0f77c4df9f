"""A re-embed is resumable: interrupted, it keeps its committed batches and goes on from there.

Plumbing only, so the fake embedder stands in for two models (tags ``a`` and ``b``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from nbmemory import Memory
from nbmemory.embed import FakeEmbedder
from nbmemory.search import hot
from nbmemory.search.config import PipelineConfig
from nbmemory.store import vectors
from nbmemory.store.chunks import embedding_text

DIM = 32
WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
]
QUERIES = ["alpha bravo", "golf hotel india", "mike november lima"]
VECTOR_ONLY = PipelineConfig(retrievers=("vector",))


class Interrupted(RuntimeError):
    pass


class StoppingEmbedder(FakeEmbedder):
    """Model ``b`` that is interrupted on its ``stop_at``-th batch; ``before(n)`` runs before batch n."""

    def __init__(self, stop_at: int, before: Callable[[int], None] | None = None) -> None:
        super().__init__(dim=DIM, tag="b")
        self.stop_at = stop_at
        self.before = before
        self.batches = 0

    def embed_documents(self, texts: Sequence[str], progress: object = None) -> np.ndarray:
        self.batches += 1
        if self.before is not None:
            self.before(self.batches)
        if self.batches >= self.stop_at:
            raise Interrupted(f"stopped at batch {self.batches}")
        return super().embed_documents(texts)


class Counting(FakeEmbedder):
    def __init__(self, tag: str) -> None:
        super().__init__(dim=DIM, tag=tag)
        self.texts: list[str] = []

    def embed_documents(self, texts: Sequence[str], progress: object = None) -> np.ndarray:
        self.texts.extend(texts)
        return super().embed_documents(texts)


def texts(n: int) -> list[str]:
    rng = np.random.default_rng(5)
    return [f"item{i} " + " ".join(rng.choice(WORDS, size=8)) for i in range(n)]


def live_vectors(mem: Memory) -> dict[int, np.ndarray]:
    rows = mem.db.fetchall(
        "SELECT v.chunk_id, v.vec FROM vectors v JOIN chunks c ON c.id = v.chunk_id WHERE c.deleted_at IS NULL"
    )
    return {int(i): np.asarray(v, dtype=np.float32) for i, v in rows}


def expected_vectors(mem: Memory, tag: str) -> dict[int, np.ndarray]:
    rows = mem.db.fetchall("SELECT id, heading, text FROM chunks WHERE deleted_at IS NULL ORDER BY id")
    vecs = FakeEmbedder(dim=DIM, tag=tag).embed_documents([embedding_text(h, t) for _, h, t in rows])
    return {int(r[0]): v for r, v in zip(rows, vecs, strict=True)}


def assert_vectors_are(mem: Memory, tag: str) -> None:
    got, want = live_vectors(mem), expected_vectors(mem, tag)
    assert set(got) == set(want)
    for i in want:
        np.testing.assert_allclose(got[i], want[i], atol=1e-6)


def test_interrupted_reembed_resumes_and_equals_a_full_one(tmp_path: Path) -> None:
    path = tmp_path / "m.duckdb"
    with Memory(path, embedder=FakeEmbedder(dim=DIM, tag="a")) as mem:
        ids = mem.remember_many(texts(700))
        before = {q: mem.search(q, k=5, config=VECTOR_ONLY, log=False).ids for q in QUERIES}
        during: list[dict[str, list[int]]] = []
        extra: list[int] = []

        def meanwhile(batch: int) -> None:
            if batch == 2:
                # Searches while the re-embed runs use the old model with the old vectors.
                during.append({q: mem.search(q, k=5, config=VECTOR_ONLY, log=False).ids for q in QUERIES})
            if batch == 3:
                # Writes while it runs: a new item, and an item whose staged vector goes stale.
                extra.append(mem.remember("zulu yankee xray written during the re-embed").id)
                mem.update(ids[0], text="item0 rewritten while staging")

        stopping = StoppingEmbedder(stop_at=3, before=meanwhile)
        with pytest.raises(Interrupted):
            mem._reembed(stopping)
        assert during == [before]
        # Nothing switched: the store still answers with model a, two batches are staged for b.
        assert mem.db.get_meta("model_fingerprint") == "fake:a:32"
        assert mem.db.get_meta("reembed_target") == "fake:b:32"
        assert mem.db.scalar("SELECT count(*) FROM vectors_new") == 512
        assert mem.embedder.fingerprint == "fake:a:32"
        assert_vectors_are(mem, "a")
        assert {q: mem.search(q, k=5, config=VECTOR_ONLY, log=False).ids for q in QUERIES} == before
        report = mem.doctor()
        assert [c.name for c in report.checks if not c.ok] == ["interrupted re-embed"]

    # A new process opens the file with model b: the re-embed goes on from where it stopped.
    counting = Counting("b")
    with Memory(path, embedder=counting) as mem:
        mem.search("alpha", k=3)
        # 700 - 512 unstaged + the item written meanwhile + the item whose text changed.
        assert len(counting.texts) == 700 - 512 + 1 + 1
        assert mem.db.get_meta("model_fingerprint") == "fake:b:32"
        assert mem.db.get_meta("reembed_target") is None
        assert not mem.db.table_exists("vectors_new")
        # The vector index serving searches is over the new vectors: the memory-resident copy
        # (rebuilt after the swap), or the HNSW graph where searches go through SQL.
        if vectors.persisted(mem.db):
            assert vectors.index_exists(mem.db)
        else:
            index = hot.ensure(mem.db)
            assert index is not None and int(index.has_vec.sum()) == 701
        assert_vectors_are(mem, "b")
        assert mem.search("zulu yankee xray", k=1).ids == extra
        # Re-embedding again from scratch gives the same vectors.
        assert mem.reembed() == 701
        assert_vectors_are(mem, "b")
        assert mem.doctor().ok


def test_doctor_drops_a_staged_reembed_for_another_model(tmp_path: Path) -> None:
    path = tmp_path / "m.duckdb"
    with Memory(path, embedder=FakeEmbedder(dim=DIM, tag="a")) as mem:
        mem.remember_many(texts(300))
        with pytest.raises(Interrupted):
            mem._reembed(StoppingEmbedder(stop_at=2))
        report = mem.doctor(repair=True)
        assert [c.name for c in report.checks if not c.ok] == ["interrupted re-embed"]
        assert not mem.db.table_exists("vectors_new") and mem.db.get_meta("reembed_target") is None
        assert mem.doctor().ok
        assert_vectors_are(mem, "a")


def test_doctor_finishes_a_staged_reembed_for_the_current_model(tmp_path: Path) -> None:
    path = tmp_path / "m.duckdb"
    with Memory(path, embedder=FakeEmbedder(dim=DIM, tag="a")) as mem:
        mem.remember_many(texts(300))
        with pytest.raises(Interrupted):
            mem._reembed(StoppingEmbedder(stop_at=2))
    with Memory(path, embedder=FakeEmbedder(dim=DIM, tag="b"), on_model_change="defer") as mem:
        assert mem.doctor(repair=True).ok
        assert mem.db.get_meta("model_fingerprint") == "fake:b:32"
        assert_vectors_are(mem, "b")


def test_a_staging_table_for_another_model_is_not_reused(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=DIM, tag="a")) as mem:
        mem.remember_many(texts(300))
        with pytest.raises(Interrupted):
            mem._reembed(StoppingEmbedder(stop_at=2))
        other = Counting("c")
        assert mem._reembed(other) == 300
        assert len(other.texts) == 300
        assert_vectors_are(mem, "c")
