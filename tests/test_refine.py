"""Passages made in the background (nbmemory.refine): an index is searchable before its passages
exist and ranks then as passages off does; once they are made, rankings, flags and the
near-miss cosine equal those of a memory that made them with each write; no answerable question
is flagged while passages are pending; a search waits for no more than the one step under way."""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nbmemory import Memory, PipelineConfig
from nbmemory import refine as refine_mod
from nbmemory.embed import FakeEmbedder
from nbmemory.embed.base import ProgressFn
from nbmemory.embed.sentence import SentenceTransformerEmbedder
from nbmemory.errors import ConfigError
from nbmemory.progress import refine_line
from nbmemory.store import db as store_db
from nbmemory.store import passages
from tests.search.test_real_notes import (
    ANSWERABLE_ELSEWHERE,
    FIRST,
    JUDGED,
    NEAR_MISS,
    NO_ANSWER,
    NOTES,
    remembered,
)
from tests.test_magics import ip, shell  # noqa: F401  (the magics' shell, for %memstats)

#: Every judged question of the notes benchmark whose note is in tests/data/til (dev and test).
ANSWERABLE = [
    q["query"]
    for q in map(json.loads, JUDGED.read_text(encoding="utf-8").splitlines())
    if any((NOTES / t).exists() for t in q["targets"])
]
TARGETS = sorted(
    {
        t
        for q in map(json.loads, JUDGED.read_text(encoding="utf-8").splitlines())
        for t in q["targets"]
        if (NOTES / t).exists()
    }
)
QUERIES = [*FIRST, *ANSWERABLE_ELSEWHERE, *NO_ANSWER, *NEAR_MISS, *ANSWERABLE]


@contextlib.contextmanager
def held_off(mem: Memory) -> Iterator[None]:
    """A write under way, as far as the refiner can tell: it starts no step until the block ends
    (writes go first), so the test sees the memory with its passages pending."""
    with mem._model.use.writing():
        yield


def rankings(mem: Memory, queries: Sequence[str], config: PipelineConfig | None = None) -> dict[str, Any]:
    out = {}
    for query in queries:
        result = mem.search(query, k=10, log=False, config=config)
        out[query] = ([h.id for h in result.hits], [h.score for h in result.hits], result.rejected)
    return out


def near_miss(mem: Memory) -> float:
    raw = mem.db.get_meta(f"near_miss:{mem.embedder.fingerprint}")
    assert raw is not None
    return float(json.loads(raw)["cosine"])


@pytest.fixture(scope="module")
def til(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the notes (one test edits some of them and puts them back)."""
    return Path(shutil.copytree(NOTES, tmp_path_factory.mktemp("til") / "til"))


@pytest.fixture(scope="module")
def embedder(real_embedder: SentenceTransformerEmbedder) -> Any:
    return remembered(real_embedder)


@pytest.fixture(scope="module")
def inline_store(tmp_path_factory: pytest.TempPathFactory, til: Path, embedder: Any) -> Path:
    """The notes indexed with passages made by each write: what the default did before."""
    path = tmp_path_factory.mktemp("inline") / "m.duckdb"
    with Memory(path, embedder=embedder, refine="inline") as mem:
        report = mem.index(til)
        assert report.passages_embedded > 0 and report.passages_pending == 0
    return path


def test_an_index_is_searchable_before_its_passages_and_ranks_as_with_passages_off_until_they_are_made(
    tmp_path: Path, til: Path, embedder: Any, inline_store: Path
) -> None:
    with Memory(inline_store, embedder=embedder, refine="inline") as inline:
        off = rankings(inline, QUERIES, PipelineConfig(passages=False))
        full = rankings(inline, QUERIES)
        inline_near = near_miss(inline)
        needed = inline.stats()["refine"]
    assert needed["done"] == needed["total"] > 0

    with Memory(tmp_path / "m.duckdb", embedder=embedder, refine="background") as mem:
        assert mem.refine == "background"
        with held_off(mem):
            report = mem.index(til)
            # Searchable: every chunk is stored with its postings and its vector, no passage yet.
            assert report.files_changed == 882 and report.passages_embedded == 0
            assert report.passages_pending == needed["total"]
            assert "passages to refine in the background" in report.summary()
            assert mem.db.scalar("SELECT count(*) FROM passages") == 0
            assert mem.stats()["refine"] == {"done": 0, "total": needed["total"]}
            assert refine_line(mem.stats()["refine"]) == f"refining: 0 of {needed['total']:,} passages"
            pending = rankings(mem, QUERIES)
            assert mem.wait_refined(timeout=0.2) is False
        # Each item scored by its own vector: the rankings (ids and scores) of passages off.
        assert {q: r[:2] for q, r in pending.items()} == {q: r[:2] for q, r in off.items()}
        assert [q for q in ANSWERABLE if pending[q][2]] == []

        assert mem.wait_refined(timeout=900) is True
        assert mem.stats()["refine"] == needed
        assert refine_line(mem.stats()["refine"]) == f"passages: {needed['total']:,}, complete"
        assert passages.missing(mem.db, mem.embedder.fingerprint) == []
        # Refined: the memory ranks and flags as the one whose writes made them, with the same
        # near-miss cosine (measured again once the last passage was stored).
        assert near_miss(mem) == inline_near
        assert rankings(mem, QUERIES) == full


def test_no_answerable_question_is_flagged_while_its_notes_passages_are_pending(
    tmp_path: Path, til: Path, embedder: Any, inline_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A memory whose passages are complete (its near-miss cosine measured with them), then the
    # judged questions' notes edited (a checkout, a sync): their chunks are new, their passages
    # pending, and their own cosines are what passages off compares with that near-miss cosine.
    path = shutil.copy(inline_store, tmp_path / "m.duckdb")
    originals = {t: (til / t).read_bytes() for t in TARGETS}
    try:
        for target in TARGETS:
            (til / target).write_bytes(originals[target] + b"\n\nEdited.\n")
        with Memory(path, embedder=embedder, refine="background") as mem:
            assert mem.wait_refined(timeout=600)  # complete before the edit
            with held_off(mem):
                report = mem.index(til)
                assert report.files_changed == len(TARGETS) and report.passages_pending > 0
                flagged = [q for q in ANSWERABLE if mem.search(q, k=5, log=False).rejected]
                assert flagged == []
                # Without the check of pending passages, passages off's false flag comes back.
                monkeypatch.setattr(passages, "refining", lambda db, fingerprint: False)
                unguarded = [q for q in ANSWERABLE if mem.search(q, k=5, log=False).rejected]
                monkeypatch.undo()
            assert unguarded, "the edited notes' questions should test the check"
            assert mem.wait_refined(timeout=600)
            assert [q for q in ANSWERABLE if mem.search(q, k=5, log=False).rejected] == []
    finally:
        for target, data in originals.items():
            (til / target).write_bytes(data)


# -- plumbing, with a model slow enough that refinement takes a while -------------------------------


class SlowFake(FakeEmbedder):
    """The fake embedder at about a real model's pace on documents (a few ms a text)."""

    def embed_documents(self, texts: Sequence[str], progress: ProgressFn | None = None) -> np.ndarray:
        time.sleep(0.003 * len(texts))
        return super().embed_documents(texts, progress)


def prose(folder: Path, notes: int = 60, sentences: int = 40) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(notes):
        body = " ".join(
            f"Note {n} sentence {s} is about topic{n}x{s} and nothing else." for s in range(sentences)
        )
        (folder / f"note-{n}.md").write_text(f"# Note {n}\n\n{body}\n", encoding="utf-8")
    return folder


def test_a_search_during_refinement_waits_for_no_more_than_the_step_under_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # However slow a search is on a busy machine, a step's commit lets it finish first.
    monkeypatch.setattr(store_db, "YIELD_S", 60.0)
    mem = Memory(tmp_path / "m.duckdb", embedder=SlowFake(dim=32), refine="background")
    begun: list[int] = []  # the refiner's transactions, counted
    sizes: list[int] = []
    transaction = mem.db.transaction
    store = passages._store

    @contextlib.contextmanager
    def recorded() -> Iterator[Any]:
        with transaction() as con:
            if threading.current_thread().name == "nbmemory-refine":
                begun.append(len(begun))
            yield con

    def counted(*args: Any, **kwargs: Any) -> int:
        sizes.append(store(*args, **kwargs))
        return sizes[-1]

    monkeypatch.setattr(mem.db, "transaction", recorded)
    monkeypatch.setattr(passages, "_store", counted)
    try:
        report = mem.index(prose(tmp_path / "notes"))
        total = report.passages_pending
        assert total > 20 * refine_mod.STEP_WINDOWS
        during: list[int] = []
        states: list[int] = []
        for i in range(30):
            before = len(begun)
            mem.search(f"topic{i}x{i}", log=False)
            during.append(len(begun) - before)
            states.append(mem.stats()["refine"]["done"])
            # A gap: once searches are quiet the refiner takes a step (waited for, not timed).
            deadline = time.monotonic() + 120
            while states[-1] < total and mem.stats()["refine"]["done"] == states[-1]:
                assert time.monotonic() < deadline, f"no refine step after search {i}: {states}"
                time.sleep(0.01)
        assert mem.wait_refined(timeout=300)
        rows = mem.db.fetchall("SELECT heading, text, kind FROM chunks")
        longest = max(len(passages.texts_of(h or "", t, k)) for h, t, k in rows)
    finally:
        mem.close()
    assert max(during) <= 1, during
    assert any(0 < done < total for done in states), states  # searched while it refined
    assert sum(sizes) == total
    # One step's commit is what a search may wait for: a few chunks' windows, never the backlog.
    assert max(sizes) < refine_mod.STEP_WINDOWS + longest, (sizes, longest)


def test_writes_go_first_and_the_memory_opens_again_with_its_passages_pending(tmp_path: Path) -> None:
    notes = prose(tmp_path / "notes", notes=20)
    mem = Memory(tmp_path / "m.duckdb", embedder=SlowFake(dim=32), refine="background")
    with held_off(mem):
        total = mem.index(notes).passages_pending
        time.sleep(0.5)
        assert mem.stats()["refine"] == {"done": 0, "total": total}  # no step while a write runs
        mem.close()  # a script that indexed and ended: nothing refined yet
    with Memory(tmp_path / "m.duckdb", embedder=SlowFake(dim=32), refine="inline") as again:
        assert again.stats()["refine"] == {"done": 0, "total": total}
        assert again.wait_refined() is True  # inline: made here
        assert again.stats()["refine"] == {"done": total, "total": total}


def test_remember_leaves_long_texts_passages_to_the_refiner(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=32), refine="background") as mem:
        with held_off(mem):
            item = mem.remember(" ".join(f"Sentence {i} of a long remembered fact." for i in range(60)))
            assert mem.stats()["refine"]["done"] == 0 < mem.stats()["refine"]["total"]
            assert mem.search("long remembered fact", k=1, log=False).ids == [item.id]
        assert mem.wait_refined(timeout=60)
        refine = mem.stats()["refine"]
        assert refine["done"] == refine["total"] > 0


def test_a_refine_mode_that_is_neither_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="refine='later': give background or inline"):
        Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=32), refine="later")  # type: ignore[arg-type]
    monkeypatch.setenv("NBMEMORY_REFINE", "sometime")
    with pytest.raises(ConfigError, match="NBMEMORY_REFINE='sometime'"):
        Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=32))
    monkeypatch.delenv("NBMEMORY_REFINE")
    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=32)) as mem:
        assert mem.refine == "background"  # the default


def test_an_owner_that_stops_when_idle_is_not_idle_while_it_refines(tmp_path: Path) -> None:
    from nbmemory.remote import connect

    shared = connect(tmp_path / "m.duckdb", embedder=SlowFake(dim=32), refine="background")
    try:
        assert shared.role == "owner" and shared.memory is not None
        with held_off(shared.memory):
            shared.index(prose(tmp_path / "notes", notes=10))
            time.sleep(0.1)
            assert shared.memory.refining and shared.idle_seconds() == 0.0
        assert shared.wait_refined(timeout=120)
        assert not shared.memory.refining
        time.sleep(0.1)
        assert shared.idle_seconds() > 0.0
    finally:
        shared.close()


def test_status_and_memstats_say_how_far_refining_got(
    tmp_path: Path,
    ip: Any,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from IPython.utils.capture import capture_output

    from nbmemory.cli import main
    from tests.test_magics import magics_of, outputs

    home = tmp_path / "home"
    mem = Memory(home / "memory.duckdb", embedder=FakeEmbedder(dim=32), refine="background")
    with held_off(mem):
        total = mem.index(prose(tmp_path / "notes", notes=30)).passages_pending
        magics_of(ip).memory = mem
        with capture_output() as cap:
            ip.run_line_magic("memstats", "")
        assert f"refining: 0 of {total:,} passages" in outputs(cap, "text/plain")
        mem.close()  # indexed, then ended before a step
    # The command line, opening the file itself (no owner; tests make passages inline, so
    # nothing is refined while it looks).
    monkeypatch.setenv("NBMEMORY_IDLE_SECONDS", "0")
    monkeypatch.setenv("NBMEMORY_HOME", str(home))
    capsys.readouterr()
    assert main(["-q", "status"]) == 0
    assert f"refining: 0 of {total:,} passages" in capsys.readouterr().out
    assert main(["-q", "status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["refine"] == {"done": 0, "total": total}
    with Memory(home / "memory.duckdb", embedder=FakeEmbedder(dim=32), refine="background") as again:
        assert again.wait_refined(timeout=120)
    assert main(["-q", "status"]) == 0
    assert f"passages: {total:,}, complete" in capsys.readouterr().out


def test_a_file_of_another_model_is_re_embedded_by_its_user_then_refined_for_the_new_one(
    tmp_path: Path,
) -> None:
    notes = prose(tmp_path / "notes", notes=6)
    mem = Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=32, tag="a"), refine="background")
    with held_off(mem):
        mem.index(notes)
        mem.close()  # its passages left pending, for model a
    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=32, tag="b"), refine="background") as again:
        assert again.wait_refined(timeout=60)
        refine = again.stats()["refine"]
        assert refine["done"] == refine["total"] > 0
        fingerprints = again.db.fetchall("SELECT DISTINCT fingerprint FROM passages")
        assert fingerprints == [(again.embedder.fingerprint,)]


def test_on_a_gpu_documents_go_in_larger_length_sorted_batches() -> None:
    from nbmemory.ingest import indexer

    class OnGpu(FakeEmbedder):
        device = "cuda"

    assert indexer.batch_chunks(OnGpu()) == indexer.GPU_BATCH_CHUNKS > indexer.batch_chunks(FakeEmbedder())
    assert (
        refine_mod.step_windows(OnGpu())
        == refine_mod.GPU_STEP_WINDOWS
        > refine_mod.step_windows(FakeEmbedder())
    )


def test_a_live_batch_says_it_is_searchable_with_passages_to_refine(tmp_path: Path) -> None:
    from nbmemory.live import Batch, ChangeQueue, Root

    notes = prose(tmp_path / "notes", notes=3)
    batches: list[Batch] = []
    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=32), refine="background") as mem:
        queue = ChangeQueue(mem, roots=[Root(str(notes), "default")], on_batch=batches.append, quiet=0.0)
        try:
            with held_off(mem):
                for path in sorted(notes.iterdir()):
                    queue.put(path)
                assert queue.wait_idle(timeout=60)
        finally:
            queue.close()
        assert mem.wait_refined(timeout=60)
    refining = sum(b.refining for b in batches)
    assert refining > 0
    assert any(f"searchable, {b.refining} passages to refine" in b.line() for b in batches if b.refining)
