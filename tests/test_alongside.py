"""An index runs beside the owner's other requests: a search, a remember or a stats call made
while an index embeds is answered before that embedding ends (nbmemory/remote/owner.py, ALONGSIDE).

No timing decides these tests: the embedder holds the index inside its embedding until the test
releases it, so a search that waited for the index could only end after the release.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nbmemory.embed import FakeEmbedder
from nbmemory.remote import connect

WAIT = 60.0


class HeldEmbedder(FakeEmbedder):
    """Embeds documents only once :attr:`release` is set (queries at once); the first document
    batch sets :attr:`embedding`."""

    def __init__(self) -> None:
        super().__init__(dim=32)
        self.embedding = threading.Event()
        self.release = threading.Event()

    def embed_documents(self, texts: Sequence[str], progress: Any = None) -> np.ndarray:
        if any("held" in t for t in texts):
            self.embedding.set()
            assert self.release.wait(WAIT), "the test never released the embedding"
        return super().embed_documents(texts, progress)


def _notes(folder: Path) -> Path:
    folder.mkdir()
    for n in range(3):
        (folder / f"held-{n}.md").write_text(f"# Held note {n}\n\nThis held note waits in the embedder.\n")
    return folder


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Any, HeldEmbedder, Path]]:
    embedder = HeldEmbedder()
    mem = connect(tmp_path / "m.duckdb", embedder=embedder)
    try:
        mem.remember("the deploy runbook lives in ops/deploy.md")
        yield mem, embedder, _notes(tmp_path / "notes")
    finally:
        embedder.release.set()
        mem.close()


def _in_thread(call: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = call()
        except BaseException as exc:  # reported by the test that reads ``out``
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _while_held(owner_or_client: Any, embedder: HeldEmbedder, notes: Path, during: Any) -> Any:
    """Start an index of ``notes`` through ``owner_or_client``; once it embeds, call ``during``
    and return its value, asserting it came while the index was still held."""
    index, indexed = _in_thread(lambda: owner_or_client.index(notes))
    assert embedder.embedding.wait(WAIT), indexed.get("error")
    call, got = _in_thread(during)
    call.join(WAIT)
    still_held = not embedder.release.is_set() and index.is_alive()
    embedder.release.set()
    index.join(WAIT)
    assert not call.is_alive(), "the call waited for the index"
    assert still_held
    assert "error" not in got, got.get("error")
    assert "error" not in indexed, indexed.get("error")
    assert indexed["value"].files_changed == 3
    return got["value"]


def test_the_owners_search_does_not_wait_for_its_own_index(held: tuple[Any, HeldEmbedder, Path]) -> None:
    mem, embedder, notes = held
    assert mem.role == "owner"
    result = _while_held(mem, embedder, notes, lambda: mem.search("deploy runbook", k=3, log=False))
    assert "ops/deploy.md" in result.hits[0].text
    # Once the index is in, its notes are found.
    assert any("held-" in (h.source or "") for h in mem.search("held note waits", k=3, log=False).hits)


def test_a_client_searches_and_remembers_while_its_own_index_embeds_in_the_owner(
    held: tuple[Any, HeldEmbedder, Path],
) -> None:
    owner, embedder, notes = held
    with connect(owner.path, allow_owner=False) as client:
        assert client.role == "client"

        def search_and_remember() -> Any:
            client.remember("a note written during the index")
            return client.search("deploy runbook", k=3, log=False)

        result = _while_held(client, embedder, notes, search_and_remember)
        assert "ops/deploy.md" in result.hits[0].text
        assert client.stats()["items"] >= 5  # the first note, the one written meanwhile, 3 held


def test_closing_waits_for_an_index_in_flight(tmp_path: Path) -> None:
    embedder = HeldEmbedder()
    mem = connect(tmp_path / "m.duckdb", embedder=embedder)
    notes = _notes(tmp_path / "notes")
    index, indexed = _in_thread(lambda: mem.index(notes))
    assert embedder.embedding.wait(WAIT)
    closing, closed = _in_thread(mem.close)
    closing.join(0.5)  # not a timing assertion: only a chance for close to run ahead if it could
    assert closing.is_alive(), "close returned while an index was writing"
    embedder.release.set()
    index.join(WAIT)
    closing.join(WAIT)
    assert not closing.is_alive() and "error" not in closed
    assert "error" not in indexed, indexed.get("error")
    with connect(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=32)) as again:
        assert again.stats()["items"] == 3
