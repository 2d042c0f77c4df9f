"""The issue's acceptance behaviours, on a real DuckDB file and (where quality matters) the real model."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import nbmemory.memory as memory_module
from nbmemory import ConfigError, Memory, ModelMismatchError, NotFoundError, PipelineConfig
from nbmemory.embed import FakeEmbedder
from nbmemory.store import fts

from .conftest import CountingEmbedder

TOPICS = {
    "cooking": "Simmer the tomato sauce slowly with garlic, basil and olive oil before adding pasta.",
    "gardening": "Water the tomato seedlings in the morning and mulch the beds to keep moisture in.",
    "cycling": "Check the chain tension and tyre pressure before a long ride in the hills.",
    "finance": "Rebalance the index fund portfolio once a year and keep three months of savings.",
    "music": "Practice scales slowly with a metronome before playing the piece at full tempo.",
    "travel": "Book the night train early; the sleeper cabins sell out weeks before summer.",
    "astronomy": "The best time to see the meteor shower is after midnight away from city lights.",
    "chess": "Control the centre early and develop knights before bishops in the opening.",
}


def filler(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    names = list(TOPICS)
    out = []
    for i in range(n):
        topic = names[i % len(names)]
        extra = rng.choice(["Noted on a Tuesday.", "Worth repeating.", "From a friend.", "Try again soon."])
        out.append(f"{TOPICS[topic]} {extra} Entry {i}.")
    return out


SECURITY_NOTES = [
    "Two-factor login codes come from the authenticator app on my phone.",
    "The TLS certificate for the intranet expires in March; the platform team owns it.",
    "The password manager vault is shared with the on-call group.",
    "API tokens for the billing service live in the vault under prod/billing.",
    "SSH access to bastion hosts requires a hardware security key.",
    "Service accounts should have least-privilege IAM policies.",
    "Revoke access for people who leave the team on their last day.",
    "The signing key for release artifacts is stored in the HSM.",
    "OAuth client secrets are injected at deploy time, never committed.",
    "Audit logs of who accessed production are kept for a year.",
    "Rotate the database passwords when an engineer leaves.",
    "Expired tokens cause 401 errors in the ingestion job.",
    "Never paste access keys into chat; share them through the vault instead.",
    "The cloud console requires single sign-on through the company identity provider.",
    "Temporary session tokens from the identity broker last twelve hours.",
    "Service principals for the data lake get read-only scopes by default.",
    "Login failures after the holidays are usually expired passwords.",
    "Keys that leaked in a public repo must be revoked within the hour.",
]


@pytest.mark.model
def test_keyword_only_and_vector_only_hits_both_survive_fusion(tmp_path: Path, real_embedder) -> None:
    with Memory(tmp_path / "m.duckdb", embedder=real_embedder) as mem:
        mem.remember_many(filler(160) + SECURITY_NOTES)
        # Only BM25 finds this: it shares the rare ticket id with the query and nothing else, and a
        # dozen security notes are semantically closer to the query.
        kw = mem.remember(
            "Ticket QX-88231: the warehouse forklift battery charger was replaced and the loading "
            "dock lights were fixed after the facilities walk-through."
        )
        # Only the vector side finds this: a paraphrase sharing no query term.
        vec = mem.remember("How I rotate expiring access keys for the cloud account each quarter.")
        result = mem.search("QX-88231 renewing credentials", k=10, config=PipelineConfig(depth=10))
        by_id = {h.id: h for h in result.hits}
        assert kw.id in by_id and vec.id in by_id, result.explain()
        assert set(by_id[kw.id].ranks) == {"bm25"}, result.explain()
        assert set(by_id[vec.id].ranks) == {"vector"}, result.explain()


@pytest.mark.model
def test_remembered_item_is_found_by_the_very_next_search(mem: Memory) -> None:
    for text in filler(20):
        mem.remember(text)
    fts.rebuild(mem.db)
    item = mem.remember(
        "Deploys need the VPN on; staging uses the 10.2 subnet.", tags=["ops"], importance=0.8
    )
    result = mem.search("do deploys need the vpn", k=3)
    assert result.hits[0].id == item.id
    bm25 = result.trace.stage("bm25")
    assert bm25 is not None and item.id in bm25.output
    assert bm25.notes["index_rebuilt"] is False  # found through the delta, not a rebuild
    assert result.hits[0].tags == ["ops"]


@pytest.mark.model
def test_forgotten_item_is_never_returned(mem: Memory) -> None:
    for text in filler(30):
        mem.remember(text)
    item = mem.remember("The staging database password rotates every Friday at noon.")
    assert item.id in mem.search("staging database password rotation", k=5).ids
    assert mem.forget(item.id) == [item.id]
    for _ in range(2):
        result = mem.search("staging database password rotates every Friday at noon", k=50)
        assert item.id not in result.ids
        for stage in result.trace.stages:
            assert item.id not in stage.output
        fts.rebuild(mem.db)
    with pytest.raises(NotFoundError, match="forgotten"):
        mem.get(item.id)
    assert mem.get(item.id, include_forgotten=True).deleted_at is not None
    assert item.id not in [h.id for h in mem.related(mem.search("tomato", k=1).ids[0], k=50)]


@pytest.mark.integration
def test_filtered_search_returns_k_hits_when_one_percent_match(tmp_path: Path, monkeypatch) -> None:
    from nbmemory.store import vectors

    emb = FakeEmbedder(dim=32)
    monkeypatch.setattr(vectors, "IN_MEMORY", False)  # built with the HNSW index the SQL path uses
    with Memory(tmp_path / "m.duckdb", embedder=emb) as mem:
        texts = filler(5000, seed=3)
        rare = [t for i, t in enumerate(texts) if i % 100 == 7]
        mem.remember_many([t for i, t in enumerate(texts) if i % 100 != 7], namespace="common")
        mem.remember_many(rare, namespace="rare")
        assert mem.stats()["by_namespace"]["rare"] == 50
        methods = set()
        # Every path: the memory-resident index with a filter mask, and through SQL the exact
        # scan for a selective filter and HNSW over-fetch (with its fallback).
        for exact_max, served in ((0, True), (vectors.EXACT_SCAN_MAX_ROWS, False), (0, False)):
            monkeypatch.setattr(vectors, "EXACT_SCAN_MAX_ROWS", exact_max)
            monkeypatch.setattr(vectors, "IN_MEMORY", served)
            for query in ("tomato sauce garlic", "meteor shower midnight", "chain tension"):
                result = mem.search(query, k=10, namespace="rare", config=PipelineConfig(depth=10))
                assert len(result.hits) == 10, result.explain()
                assert {h.namespace for h in result.hits} == {"rare"}
                vector_stage = result.trace.stage("vector")
                assert vector_stage is not None and len(vector_stage.output) == 10
                methods.add(vector_stage.notes["method"])
        assert {"memory", "exact"} <= methods and methods & {"hnsw+filter", "hnsw->exact"}, methods


def _write_corpus(root: Path) -> None:
    (root / "notes").mkdir(parents=True)
    for i in range(4):
        sections = "\n\n".join(
            f"## Section {j}\n\nNote {i} section {j}: {TOPICS[list(TOPICS)[(i + j) % len(TOPICS)]]}"
            for j in range(3)
        )
        (root / "notes" / f"note{i}.md").write_text(f"# Note {i}\n\n{sections}\n", encoding="utf-8")
    (root / "tool.py").write_text(
        'def rotate(key):\n    """Rotate a key."""\n    return key[::-1]\n\n\n'
        "class Cache:\n    def get(self, k):\n        return k\n",
        encoding="utf-8",
    )


@pytest.mark.model
def test_reindex_after_editing_one_file_reembeds_only_its_changed_chunks(
    tmp_path: Path, real_embedder
) -> None:
    root = tmp_path / "corpus"
    _write_corpus(root)
    counting = CountingEmbedder(real_embedder)
    with Memory(tmp_path / "m.duckdb", embedder=counting) as mem:
        first = mem.index(root)
        assert first.files_changed == 5 and not first.skipped
        assert len(counting.texts) == first.chunks_embedded > 0
        ids_before = {h for (h,) in mem.db.fetchall("SELECT id FROM chunks")}

        counting.texts.clear()
        again = mem.index(root)
        assert again.files_unchanged == 5 and again.chunks_embedded == 0 and counting.texts == []

        note = root / "notes" / "note2.md"
        note.write_text(note.read_text().replace("Note 2 section 1:", "Note 2 section 1 (edited):"))
        counting.texts.clear()
        edited = mem.index(root)
        assert edited.files_changed == 1 and edited.files_unchanged == 4
        assert edited.chunks_embedded == 1 and len(counting.texts) == 1
        assert "edited" in counting.texts[0]
        ids_after = {h for (h,) in mem.db.fetchall("SELECT id FROM chunks")}
        assert len(ids_before - ids_after) == 1  # only the edited chunk was replaced
        edited_hits = mem.search("edited", k=3, config=PipelineConfig(retrievers=("bm25",)))
        assert edited_hits.hits[0].source == str(note)

        note.unlink()
        removed = mem.index(root)
        assert removed.files_removed == 1
        assert all(h.source != str(note) for h in mem.search("Note 2 section", k=20))


def test_a_note_named_only_by_its_file_is_found_by_that_name(tmp_path: Path) -> None:
    # An Obsidian-style vault: the file name is the note's title, the text never repeats it.
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "Kubernetes autoscaler.md").write_text("Scale pods on cpu: min 2, max 10, target 70 %.\n")
    (vault / "pod-disruption-budget.md").write_text("Keep one replica up while nodes drain.\n")
    for topic, text in TOPICS.items():
        (vault / f"{topic}.md").write_text(text + "\n")
    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=32)) as mem:
        mem.index(vault)
        bm25 = PipelineConfig(retrievers=("bm25",))
        assert Path(mem.search("kubernetes autoscaler", k=3, config=bm25).hits[0].source).name == (
            "Kubernetes autoscaler.md"
        )
        hit = mem.search("disruption budget", k=3, config=bm25).hits[0]
        assert Path(hit.source).name == "pod-disruption-budget.md"
        assert hit.heading == "pod disruption budget"


def test_changed_model_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "m.duckdb"
    with Memory(path, embedder=FakeEmbedder(dim=32, tag="a")) as mem:
        first = mem.remember("the quick brown fox")
    with Memory(path, embedder=FakeEmbedder(dim=48, tag="b"), on_model_change="error") as mem:
        with pytest.raises(ModelMismatchError, match="fake-a"):
            mem.search("fox")
    with Memory(path, embedder=FakeEmbedder(dim=48, tag="b"), on_model_change="defer") as mem:
        with pytest.raises(ModelMismatchError):
            mem.search("fox")
    with Memory(path, embedder=FakeEmbedder(dim=48, tag="b")) as mem:
        result = mem.search("quick brown fox", k=1)
        assert result.ids == [first.id]
        assert mem.stats()["dim"] == 48
        assert mem.stats()["model_fingerprint"] == FakeEmbedder(dim=48, tag="b").fingerprint
        assert mem.doctor().ok


@pytest.mark.model
def test_planted_secrets_are_redacted_in_stored_text(mem: Memory, tmp_path: Path) -> None:
    root = tmp_path / "src"
    root.mkdir()
    key_block = (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7d9s8c2JxYk1m3Qe0pW9s0aBcDeFgHiJkLmNoPqRsTuVwXyZ\n"
        "q1w2e3r4t5y6u7i8o9p0AaSsDdFfGgHhJjKkLlZzXxCcVvBbNnMm1234567890ab\n-----END RSA PRIVATE KEY-----"
    )
    (root / "creds.md").write_text(
        "# Credentials\n\n## AWS\n\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\n"
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n\n"
        "## GitHub\n\nexport GITHUB_TOKEN=ghp_1A2b3C4d5E6f7G8h9I0jK1l2M3n4O5p6Q7r8\n\n"
        f"## Deploy key\n\n{key_block}\n",
        encoding="utf-8",
    )
    report = mem.index(root)
    stored = "\n".join(t for (t,) in mem.db.fetchall("SELECT text || heading FROM chunks"))
    for secret in (
        "AKIAIOSFODNN7EXAMPLE",
        "wJalrXUtnFEMI/K7MDENG",
        "ghp_1A2b3C4d5E6f7G8h9I0jK1l2M3n4O5p6Q7r8",
        "MIIEowIBAAKCAQEA7d9s8c2JxYk1m3Qe0pW9s0",
    ):
        assert secret not in stored
    assert "[REDACTED:aws-access-key-id]" in stored
    assert "[REDACTED:github-token]" in stored
    assert "[REDACTED:private-key]" in stored
    assert report.redactions["github-token"] == 1
    item = mem.remember("my token ghp_1A2b3C4d5E6f7G8h9I0jK1l2M3n4O5p6Q7r8 for CI")
    assert "ghp_" not in item.text


def test_corrupt_notebook_is_reported_and_skipped_while_others_are_indexed(
    fake_mem: Memory, tmp_path: Path
) -> None:
    root = tmp_path / "nbs"
    root.mkdir()
    good = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [
            {
                "cell_type": "markdown",
                "id": "a1",
                "metadata": {},
                "source": ["# Good notebook\n", "Polars joins are fast."],
            },
            {
                "cell_type": "code",
                "id": "b2",
                "metadata": {},
                "execution_count": 1,
                "source": "df.join(other, on='id')",
                "outputs": [{"output_type": "stream", "name": "stdout", "text": "joined 42 rows\n"}],
            },
        ],
    }
    (root / "good.ipynb").write_text(json.dumps(good), encoding="utf-8")
    (root / "broken.ipynb").write_text(json.dumps(good)[:120], encoding="utf-8")
    (root / "binary.md").write_bytes(b"# hi\x00\x01\x02 binary")
    (root / "latin1.txt").write_bytes("caf\xe9 au lait".encode("latin-1"))
    (root / "ok.md").write_text("# Fine\n\nA normal note about joins.\n", encoding="utf-8")
    before = fake_mem.remember("something stored before the bad run")
    report = fake_mem.index(root)
    skipped = dict(report.skipped)
    assert set(skipped) == {str(root / "broken.ipynb"), str(root / "binary.md"), str(root / "latin1.txt")}
    assert "JSON" in skipped[str(root / "broken.ipynb")]
    assert "binary" in skipped[str(root / "binary.md")]
    assert "UTF-8" in skipped[str(root / "latin1.txt")]
    sources = {
        s for (s,) in fake_mem.db.fetchall("SELECT DISTINCT source FROM chunks WHERE source IS NOT NULL")
    }
    assert sources == {str(root / "good.ipynb"), str(root / "ok.md")}
    cells = fake_mem.search("joined rows polars", k=5, kind="notebook")
    assert cells.hits and cells.hits[0].cell_id in {"a1", "b2"} and cells.hits[0].cell_index in {0, 1}
    assert fake_mem.get(before.id).text == "something stored before the bad run"


def test_memory_operations_update_link_related_and_counters(fake_mem: Memory) -> None:
    a = fake_mem.remember("old procedure: restart the worker by hand", tags=["ops"])
    b = fake_mem.remember("new procedure: the worker restarts itself via systemd", tags=["ops"])
    fake_mem.link(b.id, a.id, "supersedes", note="systemd now")
    assert fake_mem.links(a.id)[0]["type"] == "supersedes"
    with pytest.raises(ConfigError, match="link type"):
        fake_mem.link(a.id, b.id, "likes")
    assert b.id in [h.id for h in fake_mem.related(a.id, k=3)]
    updated = fake_mem.update(a.id, text="old procedure (retired): restart by hand", importance=0.9)
    assert updated.importance == 0.9 and "retired" in updated.text
    # Only the old item says "retired", but b supersedes it: b is shown first, a right below it.
    found = fake_mem.search("retired", k=5)
    assert found.ids.index(b.id) + 1 == found.ids.index(a.id)
    assert "superseded by" in found.trace.stage("supersede").detail[a.id]
    fake_mem.get(a.id)
    row = fake_mem.db.fetchone("SELECT access_count, retrieval_count FROM chunks WHERE id = ?", [a.id])
    assert row is not None and row[0] == 1 and row[1] >= 1
    assert fake_mem.stats()["searches"] >= 1


def test_forget_by_query_and_path(fake_mem: Memory, tmp_path: Path) -> None:
    root = tmp_path / "d"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nalpha bravo charlie\n")
    (root / "b.md").write_text("# B\n\ndelta echo foxtrot\n")
    fake_mem.index(root)
    target = fake_mem.remember("zulu yankee xray")
    assert fake_mem.forget(query="zulu yankee xray", k=1) == [target.id]
    forgotten = fake_mem.forget(path=str(root / "a.md"))
    assert forgotten
    assert all(h.source != str(root / "a.md") for h in fake_mem.search("alpha bravo", k=10))
    # A forgotten file stays forgotten on re-index.
    (root / "a.md").write_text("# A\n\nalpha bravo charlie, edited\n")
    fake_mem.index(root)
    assert all(h.source != str(root / "a.md") for h in fake_mem.search("alpha bravo", k=10))
    with pytest.raises(ConfigError):
        fake_mem.forget()
    with pytest.raises(NotFoundError):
        fake_mem.forget(999999)


def test_restore_brings_forgotten_items_back_to_both_retrievers(fake_mem: Memory, tmp_path: Path) -> None:
    root = tmp_path / "d"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nalpha bravo charlie. Second sentence about delta.\n")
    fake_mem.index(root)
    old = fake_mem.remember("zulu yankee xray, the staging password rotation")
    fake_mem.forget(old.id)
    # Forgotten before this snapshot of the full-text index (which covers it): the other after it.
    fts.rebuild(fake_mem.db)
    new = fake_mem.remember("whiskey victor uniform, the kafka lag runbook")
    from_file = fake_mem.forget(path=str(root / "a.md"))
    fake_mem.forget(new.id)
    for query in ("zulu yankee xray", "whiskey victor uniform", "alpha bravo charlie"):
        assert not fake_mem.search(query, k=3).hits, query

    restored = fake_mem.restore([old.id, new.id, *from_file])
    assert restored == sorted([old.id, new.id, *from_file])
    for query, item_id in (("zulu yankee xray", old.id), ("whiskey victor uniform", new.id)):
        top = fake_mem.search(query, k=3).hits[0]
        assert top.id == item_id and {"bm25", "vector"} <= set(top.ranks), (query, top.ranks)
    assert fake_mem.get(old.id).text == old.text
    assert fake_mem.search("alpha bravo charlie", k=3).hits[0].id in from_file
    assert fake_mem.doctor().ok
    # Items not forgotten are left as they are; an id never stored is an error.
    assert fake_mem.restore(old.id) == []
    with pytest.raises(NotFoundError, match="no item with id 999999"):
        fake_mem.restore([old.id, 999999])
    # The file is no longer forgotten: an edit is indexed again.
    (root / "a.md").write_text("# A\n\nalpha bravo charlie, edited.\n")
    assert fake_mem.index(root).files_changed == 1


def test_index_time_is_the_wall_time_of_the_whole_call(
    fake_mem: Memory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    for i in range(3):
        # Prose past one window (400 characters): its passages are embedded too.
        prose = " ".join(
            f"Step {j} of kafka lag runbook {i} pages the on-call engineer at night." for j in range(9)
        )
        (notes / f"n{i}.md").write_text(f"# Note {i}\n\n{prose}\n")
    # The model's load and the index update after the write take time the report must count: on
    # a clock of the facade's own that moves only while they run (1 s a load, 10 s an update), the
    # report's time is all the clock moved only when it starts before the load and ends after the
    # update.
    clock = [0.0]
    monkeypatch.setattr(memory_module, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    load, update = fake_mem._model.matching, fake_mem._after_bulk_write

    def slow_load() -> Any:
        clock[0] += 1.0
        return load()

    def slow_update(*args: Any) -> None:
        clock[0] += 10.0
        update(*args)

    monkeypatch.setattr(fake_mem._model, "matching", slow_load)
    monkeypatch.setattr(fake_mem, "_after_bulk_write", slow_update)
    snapshots: list[dict[str, Any]] = []
    report = fake_mem.index(notes, progress=lambda done, total, path, snap: snapshots.append(snap))
    assert clock[0] >= 11.0 and report.seconds == clock[0]
    phases = [s["phase"] for s in snapshots]
    assert list(dict.fromkeys(phases)) == [
        "loading the model",
        "reading files",
        "embedding chunks",
        "embedding passages",
        "updating the search index",
        "done",
    ]
    assert snapshots[-1]["text"] == f"done — 3 files, 3 chunks in {report.seconds:.1f} s"
    assert snapshots[-1]["chunks_done"] == snapshots[-1]["chunks_total"] == 3
    assert snapshots[-1]["passages_done"] == snapshots[-1]["passages_total"] == report.passages_embedded > 0


def test_bad_arguments_raise_clear_errors(fake_mem: Memory) -> None:
    with pytest.raises(ConfigError, match="empty"):
        fake_mem.search("   ")
    with pytest.raises(ConfigError, match="k must be"):
        fake_mem.search("x", k=0)
    with pytest.raises(ConfigError, match="importance"):
        fake_mem.remember("x", importance=3)
    with pytest.raises(ConfigError, match="kind"):
        fake_mem.search("x", kind="video")
    with pytest.raises(ConfigError, match="date"):
        fake_mem.search("x", since="last tuesday")


def test_odd_queries_do_not_break_search(fake_mem: Memory) -> None:
    fake_mem.remember("O'Reilly's \"quoted\" text; DROP TABLE chunks; -- with * and ? and (parens)")
    for query in ["'; DROP TABLE chunks; --", "*", "a AND (b OR", "émoji 🎉 检索 поиск", "x" * 10000, "\x00"]:
        result = fake_mem.search(query, k=5)
        assert isinstance(result.ids, list)
    assert fake_mem.stats()["items"] == 1


def test_export_and_stats(fake_mem: Memory, tmp_path: Path) -> None:
    import polars as pl

    fake_mem.remember("one", tags=["t"])
    gone = fake_mem.remember("two")
    fake_mem.forget(gone.id)
    out = tmp_path / "out.parquet"
    assert fake_mem.export(out) == 1
    frame = pl.read_parquet(out)
    assert frame["text"].to_list() == ["one"]
    assert fake_mem.export(tmp_path / "all.jsonl", include_forgotten=True) == 2
    with pytest.raises(ConfigError, match="parquet"):
        fake_mem.export(tmp_path / "x.xlsx")
    stats = fake_mem.stats()
    assert stats["items"] == 1 and stats["forgotten"] == 1 and stats["schema_version"] >= 1


def test_search_results_as_polars(fake_mem: Memory) -> None:
    fake_mem.remember("polars dataframes are columnar")
    frame = fake_mem.search("polars columnar", k=3).to_polars()
    assert frame.columns[:5] == ["rank", "id", "score", "bm25_rank", "vector_rank"]
    assert frame.height == 1 and frame["bm25_rank"][0] == 1


def test_search_counters_and_log_are_buffered_but_never_lost_on_close(tmp_path: Path) -> None:
    from nbmemory.store.search_log import LOG_FLUSH_EVERY

    path = tmp_path / "m.duckdb"
    with Memory(path, embedder=FakeEmbedder(dim=32)) as mem:
        item = mem.remember("buffered counters check")
        for _ in range(LOG_FLUSH_EVERY + 3):
            mem.search("buffered counters", k=1)
    with Memory(path, embedder=FakeEmbedder(dim=32)) as mem:
        assert mem.stats()["searches"] == LOG_FLUSH_EVERY + 3
        row = mem.db.fetchone("SELECT retrieval_count, last_retrieved_at FROM chunks WHERE id = ?", [item.id])
        assert row is not None and row[0] == LOG_FLUSH_EVERY + 3 and row[1] is not None


def test_a_search_never_writes_the_log_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The log is written by a background writer once searches pause, never by a search.
    from nbmemory.store import search_log

    monkeypatch.setattr(search_log, "LOG_IDLE_S", 0.05)
    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=32)) as mem:
        item = mem.remember("written in the background")
        writes: list[str] = []
        monkeypatch.setattr(
            mem._search_log, "_write", lambda pending: writes.append(threading.current_thread().name)
        )
        for _ in range(search_log.LOG_FLUSH_EVERY - 1):
            mem.search("background", k=1)
        deadline = time.monotonic() + 30
        # The writer ends once it has written everything buffered.
        while mem._search_log._writer is not None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert mem._search_log._writer is None and not mem._search_log._pending
        assert writes and set(writes) == {"nbmemory-search-log"}
        monkeypatch.undo()
        mem.search("background", k=1)
    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=32)) as mem:
        assert mem.stats()["searches"] == 1  # the one after the patch, written on close
        assert mem.get(item.id).retrieval_count == 1


def test_stats_counts_the_write_ahead_log_in_the_file_size(tmp_path: Path) -> None:
    from nbmemory.embed import FakeEmbedder

    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=32)) as mem:
        mem.remember_many([f"note {i} about the staging database" for i in range(300)])
        wal = tmp_path / "m.duckdb.wal"
        on_disk = (tmp_path / "m.duckdb").stat().st_size + (wal.stat().st_size if wal.exists() else 0)
        assert mem.stats()["file_mb"] == round(on_disk / 1e6, 2)


def test_a_link_note_that_is_not_valid_unicode_is_refused_by_name(fake_mem: Memory) -> None:
    a, b = fake_mem.remember("first note"), fake_mem.remember("second note")
    with pytest.raises(ConfigError, match="link's note is not valid Unicode"):
        fake_mem.link(a.id, b.id, note="bad \ud800 note")
    assert fake_mem.links(a.id) == []
    fake_mem.link(a.id, b.id, note="fine")
    assert [link["note"] for link in fake_mem.links(a.id)] == ["fine"]
