"""A small real memory for the tuning tests: the bundled sample notes, indexed once per session."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from nbmemory import Memory
from nbmemory.embed import SentenceTransformerEmbedder
from nbmemory.eval.cache import CachedEmbedder
from tests.conftest import SHARED_VECTORS

SAMPLE = Path(__file__).resolve().parents[2] / "nbmemory" / "sample_corpus" / "notes"
# Ops and incident notes: 76 chunks, ~120 pseudo-queries; a 30 % held-out split gives ~35 queries.
FOLDERS = ("ops", "incidents")


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> Iterator[None]:
    # On a shared 2-core machine torch's two threads wait on each other: one is several times faster.
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _shared_vectors(monkeypatch: pytest.MonkeyPatch) -> None:
    # The candidate models these tests train are deterministic, so one trained again (in a later
    # test or run) has the same fingerprint, and its vectors of the sample notes are read back.
    monkeypatch.setenv("NBMEMORY_VECTOR_CACHE", str(SHARED_VECTORS))


@pytest.fixture(scope="session")
def notes_store(tmp_path_factory: pytest.TempPathFactory, real_embedder: SentenceTransformerEmbedder) -> Path:
    """A closed memory file holding the sample notes, embedded with the bundled model."""
    path = tmp_path_factory.mktemp("notes") / "notes.duckdb"
    # The base model's vectors of these notes, as earlier test processes embedded them.
    with Memory(path, embedder=CachedEmbedder(real_embedder, "documents", root=SHARED_VECTORS)) as mem:
        mem.index(*(SAMPLE / f for f in FOLDERS))
    return path


@pytest.fixture
def notes_copy(tmp_path: Path, notes_store: Path) -> Path:
    """A private copy of :func:`notes_store` (tests may change it)."""
    target = tmp_path / "home" / "memory.duckdb"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(notes_store, target)
    return target
