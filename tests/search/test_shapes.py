"""What a search reads on a notebook-shaped memory (many cells per file), and that the walk of
dedup and group ranks as the stages did before it (saved rankings)."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from nbmemory import Memory
from nbmemory.embed import FakeEmbedder
from tests.conftest import copy_store
from tests.search.notebook_shapes import CELLS, NOTEBOOKS, QUERIES, rankings, write_notebooks

SAVED = Path(__file__).resolve().parents[1] / "data" / "notebook-rankings.json"


@pytest.fixture(scope="module")
def notebook_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("notebooks")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NBMEMORY_HOME", str(folder / "home"))
        with Memory(folder / "nb.duckdb", embedder=FakeEmbedder(dim=32)) as mem:
            mem.index(write_notebooks(folder / "corpus"))
    return folder / "nb.duckdb"


@pytest.fixture
def notebook_mem(notebook_store: Path, tmp_path: Path) -> Iterator[Memory]:
    with Memory(copy_store(notebook_store, tmp_path / "nb.duckdb"), embedder=FakeEmbedder(dim=32)) as mem:
        yield mem


def test_the_fixture_is_notebook_shaped(notebook_mem: Memory) -> None:
    assert notebook_mem.stats()["items"] >= NOTEBOOKS * (CELLS - 2)


@pytest.mark.parametrize("query", QUERIES)
def test_dedup_and_group_read_down_to_the_kth_group_only(notebook_mem: Memory, query: str) -> None:
    k = 10
    trace = notebook_mem.search(query, k=k, log=False).trace
    fused, dedup, group = trace.stage("convex"), trace.stage("dedup"), trace.stage("group")
    assert fused is not None and dedup is not None and group is not None
    read = dedup.notes["read"]
    # The walk stops at the k-th group: the last candidate read leads a group, nothing below it is read.
    assert group.notes["groups"] == k
    assert fused.output[read - 1] == group.output[-1]
    assert group.notes["read"] == read - dedup.notes["collapsed"]
    # The first pass reads at most its pool, max(k + 20, 2k) candidates; a deeper one (a query
    # whose first candidates are cells of a few notebooks) reads at most the cells of the k
    # notebooks shown that rank above the k-th one's best.
    assert read <= (max(k + 20, 2 * k) if trace.passes == 1 else k * CELLS)
    # No all-pairs comparison: each candidate is checked against the few kept items it could
    # contain or be contained in (here at most the cells of its own notebook ending alike).
    assert dedup.notes["checked"] <= 8 * read


def test_rankings_equal_the_ones_saved_before_the_walk(notebook_mem: Memory) -> None:
    saved = json.loads(SAVED.read_text(encoding="utf-8"))
    assert rankings(notebook_mem, k=saved["k"]) == saved["rankings"]


def test_more_lists_a_leaders_other_cells_read_above_the_kth_group(notebook_mem: Memory) -> None:
    result = notebook_mem.search("tokenizer", k=10, log=False)
    group = result.trace.stage("group")
    assert group is not None
    shown = {h.id for h in result.hits}
    riders = [i for h in result.hits for i in h.more]
    assert riders and not shown & set(riders)
    fused = result.trace.stage("convex")
    assert fused is not None
    last = fused.output.index(result.hits[-1].id)
    assert all(fused.output.index(i) < last for i in riders)


def test_the_trace_counts_garbage_collections_and_objects(notebook_mem: Memory) -> None:
    notebook_mem.search("tokenizer", k=10, log=False)  # rows and vectors read once
    gc.collect()
    gc.disable()
    try:
        trace = notebook_mem.search("tokenizer", k=10, log=False).trace
    finally:
        gc.enable()
    # No collection ran, so the objects it left alive are known: its result, not its postings.
    assert trace.gc_collections == [0, 0, 0]
    assert trace.gc_objects is not None and trace.gc_objects < 2000  # about 1,000: hits, trace
    assert trace.to_dict()["gc_collections"] == [0, 0, 0]
    gc.collect()
    collected = notebook_mem.search("tokenizer", k=10, log=False).trace
    assert len(collected.gc_collections) == 3
