"""The memory-resident index (:mod:`nbmemory.search.hot`) ranks exactly as the SQL path does:
on real notes, with and without filters, after writes it learns incrementally, and while it is
being rebuilt in the background (searches then go through SQL)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from nbmemory import Memory, PipelineConfig
from nbmemory.embed import FakeEmbedder
from nbmemory.search import hot
from nbmemory.search.filters import Filters
from nbmemory.store import fts, vectors

ROOT = Path(__file__).resolve().parents[2]
NOTES = ROOT / "tests" / "data" / "til"
QUESTIONS = [json.loads(line)["query"] for line in (ROOT / "bench" / "data" / "notes-queries.jsonl").open()]
FILTERS = [{}, {"kind": "markdown"}, {"path": "*/git/*"}, {"namespace": "other"}, {"tags": ["x"]}]

# Real notes (882 files), every search twice.
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def notes() -> Iterator[Memory]:
    import tempfile

    with (
        tempfile.TemporaryDirectory() as folder,
        Memory(Path(folder) / "m.duckdb", embedder=FakeEmbedder(dim=64)) as mem,
    ):
        mem.index(NOTES)
        mem.remember("a remembered note about git rebase onto main", namespace="other", tags=["x"])
        yield mem


def ranked(mem: Memory, query: str, served: bool, config: PipelineConfig | None = None, **filters):  # type: ignore[no-untyped-def]
    """(ids, scores) of a search, each retriever's stage too, through the index or through SQL
    (with an exact vector scan: HNSW's approximate tail differs from any exact ranking)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(vectors, "IN_MEMORY", served)
        mp.setattr(vectors, "index_exists", lambda db: False)
        result = mem.search(query, k=10, log=False, config=config, **filters)
    method = "memory" if served else "sql"
    for name in ("bm25", "vector"):
        stage = result.trace.stage(name)
        if stage is not None:
            assert (stage.notes["method"] == "memory") == served, (name, stage.notes, method)
    stages = {
        name: [(i, stage.scores[i]) for i in stage.output]
        for name in ("bm25", "vector", "convex")
        if (stage := result.trace.stage(name)) is not None
    }
    return [h.id for h in result.hits], [h.score for h in result.hits], stages


def assert_same(a, b, what: str) -> None:  # type: ignore[no-untyped-def]
    ids_a, scores_a, stages_a = a
    ids_b, scores_b, stages_b = b
    # Hits too may swap places only between scores equal to float32 precision (a passage's and
    # another chunk's cosine can agree that far).
    assert len(ids_a) == len(ids_b), what
    hits_a, hits_b = list(zip(ids_a, scores_a, strict=True)), list(zip(ids_b, scores_b, strict=True))
    same_order_up_to_float32(hits_a, hits_b, f"{what} (hits)")
    assert sorted(scores_a) == pytest.approx(sorted(scores_b), abs=1e-5), what
    for name in stages_a:
        same_order_up_to_float32(stages_a[name], stages_b[name], f"{what} ({name})")


def same_order_up_to_float32(a: list[tuple[int, float]], b: list[tuple[int, float]], what: str) -> None:
    """``a`` and ``b`` hold the same candidates with the same scores (to float32 precision: DuckDB's
    cosine and numpy's), in the same order except between candidates whose scores agree that far."""
    tol = 1e-5
    score_a, score_b = dict(a), dict(b)
    cut_a, cut_b = a[-1][1] if a else 0.0, b[-1][1] if b else 0.0
    for i, s in a:
        assert (i in score_b and score_b[i] == pytest.approx(s, abs=tol)) or s <= cut_b + tol, (what, i)
    for i, s in b:
        assert i in score_a or s <= cut_a + tol, (what, i)
    later_best = -1.0
    for i, _ in reversed([p for p in a if p[0] in score_b]):
        assert score_b[i] >= later_best - tol, (what, i)
        later_best = max(later_best, score_b[i])


def test_rankings_equal_the_sql_path_on_real_notes_with_and_without_filters(notes: Memory) -> None:
    assert len(QUESTIONS) >= 150
    for n, query in enumerate(QUESTIONS):
        filters = FILTERS[n % len(FILTERS)]
        assert_same(ranked(notes, query, True, **filters), ranked(notes, query, False, **filters), query)
    # Each retriever alone, and a deep flat list (every candidate of the pool compared).
    for config in (
        PipelineConfig.plain(("bm25",)),
        PipelineConfig.plain(("vector",)),
        PipelineConfig(group=False, depth=200),
    ):
        for query in QUESTIONS[:20]:
            assert_same(ranked(notes, query, True, config), ranked(notes, query, False, config), query)


def convex_scores(
    mem: Memory, query: str, served: bool, config: PipelineConfig
) -> tuple[dict[int, float], int]:
    """Every fused candidate's convex score, and how many candidates BM25 scored below its cut."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(vectors, "IN_MEMORY", served)
        # k past the store's size: the fused pool keeps every candidate.
        stage = mem.search(query, k=5000, log=False, config=config).trace.stage("convex")
    assert stage is not None
    return dict(stage.scores), stage.notes.get("bm25_filled", 0)


@pytest.mark.parametrize("served", [True, False], ids=["memory", "sql"])
def test_a_candidate_only_the_vector_side_found_gets_its_bm25_share_whatever_the_depth(
    notes: Memory, served: bool
) -> None:
    # Read 3 deep, BM25 leaves out notes that hold the query's words; the vector side brings
    # some of them in. Each candidate's fused score must be the one it gets when BM25 is read
    # to the end: the ranking does not depend on how deep it was read (on k).
    filled = differs_without = 0
    for query in QUESTIONS[:40]:
        deep, _ = convex_scores(notes, query, served, PipelineConfig(group=False, depth=5000))
        shallow, n = convex_scores(notes, query, served, PipelineConfig(group=False, depth=3))
        filled += n
        for item, score in shallow.items():
            assert score == pytest.approx(deep[item], abs=1e-6), (query, item)
        unfilled, _ = convex_scores(
            notes, query, served, PipelineConfig(group=False, depth=3, fill_bm25=False)
        )
        differs_without += any(abs(s - deep[i]) > 1e-6 for i, s in unfilled.items())
    assert filled > 0
    assert differs_without > 0  # what the fill changes: without it the scores depend on depth


@pytest.mark.parametrize("words", [8, 90], ids=["short query", "more terms than an int64 codes"])
def test_the_terms_each_chunk_holds_are_those_sql_finds(notes: Memory, words: int) -> None:
    # The index codes each row's terms as bits of one integer up to 62 terms, one term at a time
    # past that: both must name the terms the SQL path names, for the cut and below it.
    text = " ".join(QUESTIONS[:40])
    terms = list(dict.fromkeys(fts.query_terms(notes.db, text)))[:words]
    assert len(terms) == words
    with notes.db.lock:
        index = hot.serving(notes.db)
        assert index is not None
        ranked_ids, held, every = index.bm25(notes.db, terms, 200, None)
        sql_held: dict[int, set[str]] = {}
        sql_ranked = fts.search(notes.db, terms, 200, matched=sql_held)
    assert [i for i, _ in ranked_ids] == [i for i, _ in sql_ranked]
    assert held == {i: frozenset(t) for i, t in sql_held.items()}
    assert len({frozenset(t) for t in held.values()}) > 1
    below = [int(i) for i in index.ids[:400] if int(i) not in held]
    _, below_held = every.of(below)
    with notes.db.lock:
        sql_below: dict[int, set[str]] = {}
        fts.search(notes.db, terms, len(below), "c.id IN (SELECT unnest(?::BIGINT[]))", [below], sql_below)
    assert below_held == {i: frozenset(t) for i, t in sql_below.items()}


def test_writes_reach_the_index_without_a_rebuild(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=64)) as mem:
        mem.index(NOTES / "git")
        index = hot.ensure(mem.db)
        assert index is not None
        first = mem.remember("zanzibar quokka deployment checklist for the staging cluster")
        second = mem.remember("quokka feeding schedule", tags=["zoo"])
        mem.update(second.id, text="quokka feeding schedule moved to the zanzibar office")
        gone = mem.search("git bisect skip", k=1, log=False).ids[0]
        mem.forget(gone)
        assert fts.corpus_stats(mem.db)[2] > 0  # the new texts are in the BM25 delta
        for query in ("zanzibar quokka", "quokka feeding office", "git bisect skip", "staging cluster"):
            for filters in ({}, {"tags": ["zoo"]}, {"kind": "markdown"}):
                assert_same(ranked(mem, query, True, **filters), ranked(mem, query, False, **filters), query)
        assert hot.serving(mem.db) is index  # kept in step, not rebuilt
        served = mem.search("zanzibar quokka", k=5, log=False).ids
        assert first.id in served and second.id in served and gone not in served
        # Rows the index holds are not served once written: tags, importance, text.
        held = mem.search("git bisect", k=3, log=False).hits[0]
        mem.update(held.id, tags=["retagged"], importance=0.9)
        again = next(h for h in mem.search("git bisect", k=3, log=False).hits if h.id == held.id)
        assert again.tags == ["retagged"] and again.importance == pytest.approx(0.9)
        assert gone not in mem.search("git bisect skip", k=50, log=False).ids


def _delta_as_sets(index: hot.HotIndex) -> tuple[dict[str, set[tuple[int, float, float]]], dict[str, int]]:
    postings = {
        term: {(int(r), float(t), float(n)) for r, t, n in zip(*arrays, strict=True)}
        for term, arrays in index.delta.postings.items()
    }
    return {t: p for t, p in postings.items() if p}, dict(index.delta.df)


def test_the_delta_kept_in_step_by_writes_equals_one_read_afresh(tmp_path: Path) -> None:
    """A search re-reads only the changed chunks' delta postings; after inserts, edits, purges
    and forgets they are what reading the whole delta gives."""
    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=64)) as mem:
        mem.index(NOTES / "git")
        index = hot.ensure(mem.db)
        assert index is not None
        notes = tmp_path / "notes"
        notes.mkdir()
        for n in range(6):
            (notes / f"n{n}.md").write_text(f"# Note {n}\n\nzanzibar quokka {n} rebase onto main\n\nsecond part {n}\n")
        mem.index(notes)
        kept = mem.remember("quokka feeding schedule", tags=["zoo"])
        mem.search("quokka", k=3, log=False)  # syncs
        (notes / "n1.md").write_text("# Note 1\n\nwallaby now, not the other one\n")
        (notes / "n2.md").unlink()
        mem.index(notes)
        mem.update(kept.id, text="quokka feeding schedule moved to the zanzibar office")
        mem.forget(mem.search("zanzibar quokka 3", k=1, log=False).ids[0])
        mem.search("quokka", k=3, log=False)
        assert hot.serving(mem.db) is index and fts.corpus_stats(mem.db)[2] > 0
        kept_in_step = _delta_as_sets(index)
        index._read_delta(mem.db.con, True)
        assert kept_in_step == _delta_as_sets(index)
        assert set(fts.query_terms(mem.db, "wallaby office")) <= set(kept_in_step[0])


def test_a_search_during_a_background_rebuild_is_served_through_sql_with_the_same_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=64)) as mem:
        mem.index(NOTES / "git", NOTES / "vim")
        expected = {q: ranked(mem, q, False) for q in QUESTIONS[:10]}
        monkeypatch.setattr(hot, "SYNC_BUILD_ROWS", 0)  # as for a large memory: build in the background
        release, started = threading.Event(), threading.Event()
        build = hot.HotIndex.build

        def slow_build(self: hot.HotIndex, db) -> None:  # type: ignore[no-untyped-def]
            started.set()
            assert release.wait(30)
            build(self, db)

        monkeypatch.setattr(hot.HotIndex, "build", slow_build)
        hot.reset(mem.db)
        for query, want in expected.items():
            got = mem.search(query, k=10, log=False)
            assert started.is_set() and hot.state(mem.db) == "building"
            assert got.trace.stage("bm25").notes["method"] == "sql"  # type: ignore[union-attr]
            assert [h.id for h in got.hits] == want[0], query
        release.set()
        for _ in range(200):
            if hot.state(mem.db) == "serving":
                break
            threading.Event().wait(0.05)
        for query, want in expected.items():
            assert_same(ranked(mem, query, True), want, query)


def test_an_unknown_filter_value_and_an_empty_store_give_empty_results(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=64)) as mem:
        assert mem.search("anything at all", log=False).hits == []
        mem.remember("one note about postgres vacuum")
        assert mem.search("postgres", namespace="nowhere", log=False).hits == []
        assert mem.search("postgres", log=False).ids
        assert hot.state(mem.db) == "serving"
        assert Filters().empty


WRITER = """
import sys
from nbmemory import Memory
from nbmemory.embed import FakeEmbedder

mem = Memory(sys.argv[1], embedder=FakeEmbedder(dim=64))
mem.index(sys.argv[2])
print("indexed", flush=True)
i = 0
while True:
    print(mem.remember(f"committed note {i} about the zanzibar release").id, flush=True)
    i += 1
"""


def test_after_a_crash_doctor_reports_the_index_being_rebuilt_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import signal
    import subprocess
    import sys

    path = tmp_path / "m.duckdb"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(NOTES / "git")],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    lines = [proc.stdout.readline() for _ in range(30)]
    os.kill(proc.pid, signal.SIGKILL)  # mid-write: a write-ahead log is left behind
    proc.wait()
    assert lines[0].strip() == "indexed" and all(line.strip().isdigit() for line in lines[1:])
    committed = [int(line) for line in lines[1:]]
    monkeypatch.setattr(hot, "SYNC_BUILD_ROWS", 0)  # as for a large memory
    release = threading.Event()
    build = hot.HotIndex.build
    monkeypatch.setattr(hot.HotIndex, "build", lambda self, db: (release.wait(30), build(self, db))[1])
    with Memory(path, embedder=FakeEmbedder(dim=64)) as mem:
        assert not vectors.index_exists(mem.db)  # no HNSW graph to rebuild before the first search
        first = mem.search("zanzibar release", k=5, log=False)
        assert hot.state(mem.db) == "building"
        assert set(first.ids) <= set(committed) and len(first.ids) == 5
        report = mem.doctor()
        assert report.ok, report.summary()
        vector_check = next(c for c in report.checks if c.name == "vector index")
        assert "being built in the background" in vector_check.detail
        release.set()
        for _ in range(200):
            if hot.state(mem.db) == "serving":
                break
            threading.Event().wait(0.05)
        assert mem.search("zanzibar release", k=5, log=False).ids == first.ids
        assert "in memory:" in next(c for c in mem.doctor().checks if c.name == "vector index").detail


def test_partitions_of_a_large_memory_probed_in_full_rank_like_the_exact_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Above ANN_MIN_ROWS an unfiltered vector search probes the partitions nearest the query;
    # probing all of them must give the exact scan's ranking, also for rows written after the
    # partitions were made (scanned exactly) and rows forgotten since (skipped).
    monkeypatch.setattr(hot, "ANN_MIN_ROWS", 100)
    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=64)) as mem:
        mem.index(NOTES / "git", NOTES / "vim", NOTES / "postgres")
        index = hot.ensure(mem.db)
        assert index is not None and index.ivf is not None
        assert len(index.ivf.centroids) >= 16 and len(index.ivf.rows) == int(index.has_vec.sum())
        new = mem.remember("an entirely new note about the zanzibar postgres replica")
        mem.forget(mem.search("git bisect skip", k=1, log=False).ids[0])
        monkeypatch.setattr(hot, "IVF_PROBES", 10_000)
        config = PipelineConfig.plain(("vector",), depth=100)
        for query in [*QUESTIONS[:30], "zanzibar postgres replica"]:
            assert_same(ranked(mem, query, True, config), ranked(mem, query, False, config), query)
        assert hot.serving(mem.db) is index and index.ivf.stale.any()
        assert new.id in mem.search("zanzibar postgres replica", k=3, log=False, config=config).ids
        # Probing a few partitions is approximate, and still returns k live items.
        monkeypatch.setattr(hot, "IVF_PROBES", 2)
        for query in QUESTIONS[:10]:
            got = mem.search(query, k=10, log=False, config=config)
            assert len(got.ids) == 10 and all(mem.get(i, touch=False) for i in got.ids)


def test_exact_cosines_score_a_row_the_same_alone_or_among_others() -> None:
    # Chunk cosines (the index's re-scoring) and passage cosines (passages.best) come from
    # cosine64 over different batches: a passage equal to a chunk's text must tie with it.
    import numpy as np

    rng = np.random.default_rng(7)
    rows = rng.standard_normal((300, 384)).astype(np.float32)
    rows[150] = rows[20]
    query = rng.standard_normal(384).astype(np.float32)
    together = hot.cosine64(rows, query)
    alone = np.array([hot.cosine64(rows[i : i + 1], query)[0] for i in range(len(rows))])
    assert np.array_equal(together, alone)
    assert together[150] == together[20]
    assert np.allclose(
        together, rows @ query / (np.linalg.norm(rows, axis=1) * np.linalg.norm(query)), atol=1e-6
    )
    assert hot.cosine64(np.zeros((2, 384), np.float32), query).tolist() == [0.0, 0.0]
