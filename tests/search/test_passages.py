"""Passages: window vectors inside long chunks of prose, stored per content and model, used to
score a chunk by the best of its own cosine and its windows'."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from nbmemory import Memory, PipelineConfig
from nbmemory.embed import FakeEmbedder, SentenceTransformerEmbedder
from nbmemory.store import passages
from nbmemory.store.db import Database
from nbmemory.store.migrations import SCHEMA_VERSION
from nbmemory.store.windows import WINDOW_CHARS, pieces, windows

WEEK = """# Platform week

Monday was spent on the quarterly capacity review. We looked at disk growth on the warehouse hosts and agreed to add two nodes before the holidays. The forecast assumes the same ingest rate as last quarter.

Tuesday we paired on the flaky integration tests. Most failures came from a fixture that shared a temporary directory between workers; giving each worker its own directory fixed it.

Wednesday: if you are locked out of Grafana, reset the admin password on the host with `grafana-cli admin reset-admin-password`, then log in and rotate it from the UI.

Thursday the team reviewed the on-call handbook. Escalation now goes to the secondary after fifteen minutes instead of thirty, and the runbooks link to the dashboards directly.

Friday was a demo of the new deploy pipeline: every merge to main builds an image, runs the smoke tests against staging and waits for a manual approval before production.
"""
DASHBOARDS = """# Dashboards

Our dashboards live in Grafana. Each service has an overview board with latency, error rate and saturation panels, and alerts are defined next to the panels they watch. Boards are provisioned from the repository, so edits in the UI are lost on the next deploy.
"""
VPN = """# VPN access

New laptops need the VPN profile from the IT portal. Access to staging requires the VPN; production access also needs a hardware key.
"""


def test_windows_take_sentences_and_keep_code_blocks_whole() -> None:
    text = "One. Two is here! Three?\n\n```\ncode line\n\nmore\n```\n\n    indented block"
    assert pieces(text) == ["One.", "Two is here!", "Three?", "```\ncode line", "more\n```", "indented block"]
    long = " ".join(f"Sentence number {i} is about something." for i in range(40))
    found = windows(long)
    assert len(found) > 2 and all(len(w) < WINDOW_CHARS for w in found)
    assert found[0].startswith("Sentence number 0 ") and found[-1].endswith("number 39 is about something.")
    assert windows("A single short sentence.") == ["A single short sentence."]
    assert len(windows("x" * 5000)[0]) == 2 * WINDOW_CHARS


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    for name, text in (("platform-week.md", WEEK), ("dashboards.md", DASHBOARDS), ("vpn.md", VPN)):
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def test_a_sentence_buried_in_a_long_note_finds_its_note(
    tmp_path: Path, notes: Path, real_embedder: SentenceTransformerEmbedder
) -> None:
    query = "I forgot the administrator login of our metrics dashboard tool, how do I get back in"
    with Memory(tmp_path / "m.duckdb", embedder=real_embedder) as mem:
        report = mem.index(notes)
        assert report.passages_embedded >= 5  # only the long note has two or more windows
        stored = mem.db.fetchall("SELECT DISTINCT content_hash, fingerprint FROM passages")
        assert len(stored) == 1 and stored[0][1] == real_embedder.fingerprint
        found = mem.search(query, log=False)
        assert Path(found.hits[0].source or "").name == "platform-week.md"
        assert "with_passages=1" in found.explain()
        # Chunk vectors alone: the short note about dashboards wins; the long one is diluted.
        plain = mem.search(query, config=PipelineConfig(passages=False), log=False)
        assert Path(plain.hits[0].source or "").name == "dashboards.md"


def test_passages_follow_content_model_and_repairs(tmp_path: Path, fake_embedder: FakeEmbedder) -> None:
    with Memory(tmp_path / "m.duckdb", embedder=fake_embedder) as mem:
        long_item = mem.remember(WEEK.split("\n", 2)[2], heading="Platform week")
        mem.remember(VPN.split("\n", 2)[2], heading="VPN")  # one window: no passages
        mem.remember(WEEK.split("\n", 2)[2], heading="Platform week")  # same content: shared
        rows = mem.db.fetchall("SELECT content_hash, count(*) FROM passages GROUP BY ALL")
        assert len(rows) == 1 and rows[0][1] == len(windows(WEEK.split("\n", 2)[2]))

        # A new text gets its own passages; the old content's stay while a chunk holds it.
        mem.update(long_item.id, text=WEEK.split("\n", 2)[2].replace("Grafana", "Kibana"))
        assert int(mem.db.scalar("SELECT count(DISTINCT content_hash) FROM passages")) == 2

        # A write killed between its chunk and its passages: doctor finds it, repair fills it.
        mem.db.execute("DELETE FROM passages")
        mem.db.passage_cache.clear()
        report = mem.doctor()
        check = next(c for c in report.checks if c.name == "passages")
        assert not check.ok and "2 chunks" in check.detail
        assert mem.doctor(repair=True).ok
        assert int(mem.db.scalar("SELECT count(DISTINCT content_hash) FROM passages")) == 2

        # Vectors of another model never mix in: a lookup names the model, keep_only drops others.
        digest = rows[0][0]
        assert passages.vectors_of(mem.db, "another-model", [digest]) == {}
        got = passages.vectors_of(mem.db, fake_embedder.fingerprint, [digest])[digest]
        assert got.shape == (len(windows(WEEK.split("\n", 2)[2])), fake_embedder.dim)
        mem.db.execute("UPDATE passages SET fingerprint = 'another-model' WHERE content_hash = ?", [digest])
        passages.keep_only(mem.db, [fake_embedder.fingerprint])
        assert passages.vectors_of(mem.db, fake_embedder.fingerprint, [digest]) == {}
        assert int(mem.db.scalar("SELECT count(*) FROM passages WHERE fingerprint = 'another-model'")) == 0


def test_passages_of_edited_notes_are_dropped(
    tmp_path: Path, notes: Path, fake_embedder: FakeEmbedder
) -> None:
    with Memory(tmp_path / "m.duckdb", embedder=fake_embedder) as mem:
        mem.index(notes)
        before = {r[0] for r in mem.db.fetchall("SELECT DISTINCT content_hash FROM passages")}
        (notes / "platform-week.md").write_text(WEEK.replace("Grafana", "Kibana"), encoding="utf-8")
        report = mem.index(notes)
        assert report.chunks_removed == 1 and report.passages_embedded > 0
        after = {r[0] for r in mem.db.fetchall("SELECT DISTINCT content_hash FROM passages")}
        assert len(before) == len(after) == 1 and before != after


def test_a_store_made_before_passages_gets_them_on_open_and_by_repair(
    tmp_path: Path, notes: Path, fake_embedder: FakeEmbedder
) -> None:
    path = tmp_path / "old.duckdb"
    with Memory(path, embedder=fake_embedder) as mem:
        mem.index(notes)
    db = Database(path)
    # A store from before migration 5 has neither its table nor those of the migrations after it.
    db.execute("DROP TABLE passages")
    db.execute("DROP TABLE roots")
    db.execute("DELETE FROM migrations WHERE version >= 5")
    db.close()
    with Memory(path, embedder=fake_embedder) as mem:
        assert mem.db.schema_version() == SCHEMA_VERSION  # migration 5 ran again, and what follows it
        check = next(c for c in mem.doctor().checks if c.name == "passages")
        assert not check.ok and "1 chunks" in check.detail
        assert mem.doctor(repair=True).ok
        assert int(mem.db.scalar("SELECT count(DISTINCT content_hash) FROM passages")) == 1


def test_code_gets_no_passages(tmp_path: Path, fake_embedder: FakeEmbedder) -> None:
    code = "\n\n".join(f"def f{i}():\n    return {i}  # step {i} of the job." for i in range(30))
    (tmp_path / "job.py").write_text(code, encoding="utf-8")
    with Memory(tmp_path / "m.duckdb", embedder=fake_embedder) as mem:
        report = mem.index(tmp_path / "job.py")
        assert report.chunks_added > 0 and report.passages_embedded == 0


def test_passages_can_be_switched_off(
    tmp_path: Path, notes: Path, fake_embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NBMEMORY_PASSAGES", "0")
    with Memory(tmp_path / "m.duckdb", embedder=fake_embedder) as mem:
        report = mem.index(notes)
        mem.remember(WEEK.split("\n", 2)[2], heading="Platform week")
        assert report.chunks_added == 3 and report.passages_embedded == 0
        assert int(mem.db.scalar("SELECT count(*) FROM passages")) == 0
        assert mem.doctor().ok  # nothing is missing when they are off
        assert passages.none_stored(mem.db, fake_embedder.fingerprint)
        result = mem.search("grafana admin password", log=False)
        assert result.hits and result.trace.stage("convex").notes["with_passages"] == 0
    monkeypatch.setenv("NBMEMORY_PASSAGES", "1")
    with Memory(tmp_path / "m.duckdb", embedder=fake_embedder) as mem:
        mem.doctor(repair=True)  # fills them, and the copy in memory with them
        assert not passages.none_stored(mem.db, fake_embedder.fingerprint)
        assert mem.search("grafana admin password", log=False).trace.stage("convex").notes["with_passages"]


def test_passages_are_committed_batch_by_batch(
    tmp_path: Path, fake_embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(passages, "BATCH", 1)
    body = WEEK.split("\n", 2)[2]
    with Memory(tmp_path / "m.duckdb", embedder=fake_embedder) as mem:
        mem.remember_many([body, body.replace("Monday", "Sunday"), body.replace("Friday", "Saturday")])
        counts = mem.db.fetchall("SELECT count(*) FROM passages GROUP BY content_hash")
        assert len(counts) == 3 and {c[0] for c in counts} == {len(windows(body))}


def test_a_large_memory_reads_its_passages_in_the_background_and_loses_no_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_embedder: FakeEmbedder
) -> None:
    body = WEEK.split("\n", 2)[2]
    path = tmp_path / "m.duckdb"
    with Memory(path, embedder=fake_embedder) as mem:
        mem.remember(body, heading="Platform week")
        query = "reset the grafana admin password"
        expected = mem.search(query, log=False)
    # Every memory counts as large here; the read is held until the searches below are done.
    monkeypatch.setattr(passages, "SYNC_LOAD_ROWS", 0)
    go, read = threading.Event(), passages._read
    monkeypatch.setattr(
        passages,
        "_read",
        lambda db, fp, hashes=None, con=None: (con is None or go.wait(30)) and read(db, fp, hashes, con),
    )
    with Memory(path, embedder=fake_embedder) as mem:
        during = mem.search(query, log=False)
        assert isinstance(mem.db.passage_cache[fake_embedder.fingerprint], passages._Loading)
        # The same ranking and scores while the read is under way (the candidates' passages
        # come from the table) ...
        assert [(h.id, h.score) for h in during.hits] == [(h.id, h.score) for h in expected.hits]
        # ... and what is written meanwhile joins the copy when it is ready.
        added = mem.remember(body.replace("Grafana", "Kibana"), heading="Platform week")
        digest = mem.db.scalar("SELECT content_hash FROM chunks WHERE id = ?", [added.id])
        go.set()
        for _ in range(300):
            if isinstance(mem.db.passage_cache[fake_embedder.fingerprint], dict):
                break
            time.sleep(0.05)
        held = mem.db.passage_cache[fake_embedder.fingerprint]
        assert isinstance(held, dict) and digest in held and len(held) == 2
        stored = read(mem.db, fake_embedder.fingerprint, [digest])[digest]
        assert np.array_equal(held[digest], stored)


def test_the_best_window_is_the_float64_best_of_every_window() -> None:
    # Windows are scored in float32 first and only those near their chunk's best again in float64:
    # the value must be the float64 best of all, with windows that differ past float32's precision,
    # exact copies, zero vectors and chunks of one window.
    from nbmemory.store.passages import best_cosines
    from nbmemory.store.vectors import cosine64

    rng = np.random.default_rng(0)
    q = rng.standard_normal(384).astype(np.float32)
    mats = []
    for n in range(300):
        m = rng.standard_normal((1 + n % 9, 384)).astype(np.float32)
        if n % 3 == 0:  # a window a hair from the best one: which wins is float64's call
            top = int(np.argmax(cosine64(m, q)))
            m = np.concatenate(
                [m, m[top : top + 1] + np.float32(1e-7) * rng.standard_normal((1, 384)).astype(np.float32)]
            )
        if n % 5 == 0:
            m = np.concatenate([m, m[:1]])  # an exact copy
        if n % 7 == 0:
            m[0] = 0.0
        mats.append(m)
    mats.append(np.zeros((2, 384), dtype=np.float32))
    want = [float(cosine64(m, q).max()) for m in mats]
    assert best_cosines(mats, q).tolist() == want
    few = [m[: 1 + n % 2] for n, m in enumerate(mats)]  # a window or two each: all in float64
    assert best_cosines(few, q).tolist() == [float(cosine64(m, q).max()) for m in few]
