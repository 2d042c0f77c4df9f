"""One save, one indexing: two indexings of the same file at once (the Jupyter server and
``nbmemory watch`` both hear a save, both index it through the memory's owner) leave one set of
its chunks; ``doctor`` finds duplicate chunks in a store and ``doctor(repair=True)`` removes them."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest

from nbmemory import Memory
from nbmemory.embed import FakeEmbedder
from nbmemory.ingest.indexer import CHANGED_MEANWHILE

# Each indexing waits here, after reading the file and before writing it, for the other one.
WAIT_S = 30.0


class TogetherEmbedder(FakeEmbedder):
    """A fake embedder that holds indexings at their first ``embed_documents`` (after they read
    their files, before they write them): each until the other one is there too
    (:meth:`together`), or the first one until :attr:`release` is set (:meth:`hold_first`)."""

    def __init__(self) -> None:
        super().__init__(dim=32)
        self.barrier: threading.Barrier | None = None
        self.release: threading.Event | None = None
        #: Set when the first indexing is held.
        self.arrived = threading.Event()
        self._held: set[int] = set()

    def together(self) -> None:
        self.barrier, self.release, self._held = threading.Barrier(2), None, set()
        self.arrived.clear()

    def hold_first(self) -> threading.Event:
        self.barrier, self.release, self._held = None, threading.Event(), set()
        self.arrived.clear()
        return self.release

    def embed_documents(self, texts: Sequence[str], progress: Any = None) -> np.ndarray:
        me = threading.get_ident()
        if me not in self._held and (self.barrier is not None or not self.arrived.is_set()):
            self._held.add(me)
            first = not self.arrived.is_set()
            self.arrived.set()
            if self.barrier is not None:
                self.barrier.wait(WAIT_S)
            elif self.release is not None and first:
                assert self.release.wait(WAIT_S)
        return super().embed_documents(texts, progress)


def notebook(path: Path, cells: list[str]) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Orders")] + [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, path)


def chunk_rows(mem: Memory, path: Path) -> list[tuple[Any, ...]]:
    return mem.db.fetchall(
        "SELECT cell_index, ordinal, content_hash FROM chunks WHERE source = ? AND deleted_at IS NULL "
        "ORDER BY cell_index, ordinal",
        [str(path)],
    )


def race(mem: Memory, embedder: TogetherEmbedder, path: Path) -> list[Any]:
    """Index ``path`` from two threads at once; what each returned (a report or an exception)."""
    embedder.together()
    results: list[Any] = [None, None]

    def run(i: int) -> None:
        try:
            results[i] = mem.index(path)
        except Exception as exc:  # reported to the test, not lost in the thread
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(2 * WAIT_S)
    embedder.barrier = None
    return results


@pytest.fixture
def together() -> TogetherEmbedder:
    return TogetherEmbedder()


@pytest.fixture
def mem(tmp_path: Path, together: TogetherEmbedder) -> Any:
    with Memory(tmp_path / "m.duckdb", embedder=together) as memory:
        yield memory


@pytest.mark.parametrize("first_save", [True, False], ids=["new file", "changed file"])
def test_two_indexings_of_one_save_leave_one_set_of_chunks(
    mem: Memory, together: TogetherEmbedder, tmp_path: Path, first_save: bool
) -> None:
    path = tmp_path / "orders.ipynb"
    cells = [f"orders_{i} = load('2024-q{i}')  # partition {i}" for i in range(1, 8)]
    if not first_save:
        notebook(path, ["orders = load('2023')"])
        mem.index(path)
    notebook(path, cells)  # the save both of them heard

    results = race(mem, together, path)
    assert not [r for r in results if isinstance(r, BaseException)], results
    rows = chunk_rows(mem, path)
    assert len(rows) == len(set(rows)) == 1 + len(cells)  # the heading cell and each code cell, once
    assert sum(r.files_changed for r in results) == 1  # one of them wrote it; the other found it written
    assert sum(r.files_unchanged for r in results) == 1
    assert mem.stats()["items"] == 1 + len(cells)
    assert [c.name for c in mem.doctor().checks if not c.ok] == []
    # The next index finds nothing to do.
    assert mem.index(path).files_unchanged == 1


@pytest.mark.parametrize("order", ["at once", "older last", "older last, same mtime"])
def test_an_indexing_that_read_an_older_save_leaves_the_later_one_once(
    mem: Memory, together: TogetherEmbedder, tmp_path: Path, order: str
) -> None:
    path = tmp_path / "orders.ipynb"
    notebook(path, ["a = 1", "b = 2", "c = 3"])
    mem.index(path)
    notebook(path, ["a = 1", "b = 20", "c = 3"])
    older_mtime = path.stat().st_mtime
    release = together.hold_first() if order.startswith("older last") else None
    if release is None:
        together.together()
    first: list[Any] = []
    thread = threading.Thread(target=lambda: first.append(mem.index(path)))
    thread.start()
    assert together.arrived.wait(WAIT_S)
    # Another indexing reads a later save while the first waits to write the earlier one.
    notebook(path, ["a = 1", "b = 200", "d = 4"])
    if order.endswith("same mtime"):
        os.utime(path, (older_mtime, older_mtime))  # saved within the file system's mtime step
    second = mem.index(path)
    if release is not None:
        release.set()  # the later save is written: now the earlier one
    thread.join(2 * WAIT_S)
    assert first and not isinstance(first[0], BaseException)
    assert second.files_changed == 1
    if order == "older last, same mtime":
        assert first[0].skipped == [(str(path), CHANGED_MEANWHILE)]
    texts = [
        str(t)
        for (t,) in mem.db.fetchall(
            "SELECT text FROM chunks WHERE source = ? AND deleted_at IS NULL ORDER BY cell_index, ordinal",
            [str(path)],
        )
    ]
    assert texts[1:] == ["a = 1", "b = 200", "d = 4"]  # the later save, each chunk once
    assert [c.name for c in mem.doctor().checks if not c.ok] == []
    assert mem.index(path).files_unchanged == 1


def test_doctor_finds_duplicate_chunks_and_repair_removes_them(tmp_path: Path) -> None:
    path = tmp_path / "orders.ipynb"
    cells = [f"orders_{i} = load('2024-q{i}')  # partition {i}" for i in range(1, 8)]
    notebook(path, cells)
    with Memory(tmp_path / "d.duckdb", embedder=FakeEmbedder(dim=32)) as mem:
        mem.index(path)
        mem.remember("a fact remembered twice")
        mem.remember("a fact remembered twice")  # not a file's chunk: both are kept
        items = mem.stats()["items"]
        assert [c.name for c in mem.doctor().checks if not c.ok] == []
        # The store two racing indexings left: a copy of each code cell's chunk, with its vector.
        with mem.db.transaction():
            mem.db.execute(
                "INSERT INTO chunks BY NAME SELECT * REPLACE (id + 1000 AS id, seq + 1000 AS seq) "
                "FROM chunks WHERE source = ? AND kind = 'notebook-code'",
                [str(path)],
            )
            mem.db.execute(
                "INSERT INTO vectors SELECT chunk_id + 1000, vec FROM vectors WHERE chunk_id IN "
                "(SELECT id FROM chunks WHERE source = ? AND kind = 'notebook-code' AND id < 1000)",
                [str(path)],
            )
        mem.db.row_epoch += 1  # written behind the memory's back: its in-memory copy reads again
        assert mem.stats()["items"] == items + 7

        report = mem.doctor()
        check = next(c for c in report.checks if c.name == "duplicate chunks")
        assert not report.ok and not check.ok and check.detail.startswith("7 copies")
        assert "[ FAIL] duplicate chunks: 7 copies" in report.summary()

        repaired = mem.doctor(repair=True)
        assert repaired.ok and next(c for c in repaired.checks if c.name == "duplicate chunks").repaired
        assert mem.stats()["items"] == items
        assert len(chunk_rows(mem, path)) == len(set(chunk_rows(mem, path))) == 8
        assert min(int(r[0]) for r in mem.db.fetchall("SELECT id FROM chunks")) < 1000
        assert max(int(r[0]) for r in mem.db.fetchall("SELECT id FROM chunks")) < 1000
        assert [c.name for c in mem.doctor().checks if not c.ok] == []
        hits = mem.search("orders_3 partition 3", k=10)
        assert [h.cell_index for h in hits].count(3) == 1
