"""Live memory: roots remembered in the store, the debounced change queue, and the file watcher
(``nbmemory watch``'s loop, run in a thread against a folder in ``tmp_path``).

Real DuckDB files and the real watcher; a fake embedder (these tests are about plumbing). No
sleeps where an outcome can be awaited: :func:`eventually` polls with a deadline.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

from nbmemory import Memory
from nbmemory.embed import FakeEmbedder
from nbmemory.ingest import exclude
from nbmemory.live import ChangeQueue, Root, watch
from nbmemory.runtime import summary
from tests.conftest import CountingEmbedder

DEADLINE = 30.0


def eventually(check: Callable[[], Any], timeout: float = DEADLINE, what: str = "") -> Any:
    """``check()``'s first truthy value, polled until ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what or check}")
        time.sleep(0.02)


def sources(mem: Memory, query: str) -> set[str]:
    return {h.source for h in mem.search(query, k=10, log=False).hits if query in h.text}


def write_notebook(path: Path, text: str) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(f"# Notes\n\n{text}")]
    nbformat.write(nb, path)


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    (folder / "vpn.md").write_text("# VPN\n\nDeploys need the VPN on.\n")
    (folder / "sub" / "kafka.md").write_text("# Kafka\n\nLag pages the on-call engineer.\n")
    return folder


@pytest.fixture
def counting() -> CountingEmbedder:
    return CountingEmbedder(FakeEmbedder(dim=32))


@pytest.fixture
def memory(tmp_path: Path, counting: CountingEmbedder, notes: Path) -> Iterator[Memory]:
    with Memory(tmp_path / "m.duckdb", embedder=counting) as mem:  # type: ignore[arg-type]
        mem.index(notes)
        yield mem


@pytest.fixture
def watching(memory: Memory, notes: Path) -> Iterator[ChangeQueue]:
    """The watch loop in a thread over ``notes``, feeding a queue into ``memory``."""
    queue = ChangeQueue(memory, quiet=0.1)
    stop, ready = threading.Event(), threading.Event()
    thread = threading.Thread(target=watch, args=(queue, [notes], stop, ready), daemon=True)
    thread.start()
    assert ready.wait(DEADLINE), "the watcher did not start"
    yield queue
    stop.set()
    thread.join(DEADLINE)
    queue.close()


# -- roots -----------------------------------------------------------------------------------


def test_an_indexed_folder_is_remembered_as_a_root(tmp_path: Path, notes: Path) -> None:
    with Memory(tmp_path / "r.duckdb", embedder=FakeEmbedder(dim=32)) as mem:
        mem.index(notes / "vpn.md")  # a file is not a root
        assert mem.roots() == []
        mem.index(notes / "sub")
        mem.index(notes)  # replaces the root inside it
        mem.index(notes / "sub")  # covered by it
        mem.index(notes, namespace="work")
        assert [(r["path"], r["namespace"]) for r in mem.roots()] == [
            (str(notes), "default"),
            (str(notes), "work"),
        ]
        assert mem.stats()["roots"] == 2
        assert mem.remove_root(notes, namespace="work") == 1
        assert mem.remove_root(notes / "elsewhere") == 0
        assert [r["namespace"] for r in mem.roots()] == ["default"]
    # Kept in the file.
    with Memory(tmp_path / "r.duckdb", embedder=FakeEmbedder(dim=32)) as mem:
        assert [r["path"] for r in mem.roots()] == [str(notes)]


# -- the watch loop and the queue ------------------------------------------------------------


def test_a_file_written_renamed_and_deleted_is_found_moved_and_gone(
    memory: Memory, notes: Path, watching: ChangeQueue
) -> None:
    first = notes / "sub" / "zebra.md"
    first.write_text("# Zebra\n\nThe zebracorn migration runs on Tuesdays.\n")
    eventually(lambda: sources(memory, "zebracorn") == {str(first)}, what="the new note is found")

    moved = notes / "moved.md"
    first.rename(moved)
    eventually(lambda: sources(memory, "zebracorn") == {str(moved)}, what="the renamed note moved")

    moved.unlink()
    eventually(lambda: sources(memory, "zebracorn") == set(), what="the deleted note is gone")
    # The rest is untouched.
    assert sources(memory, "VPN") == {str(notes / "vpn.md")}


def test_a_folder_moved_away_loses_its_hits(
    memory: Memory, notes: Path, tmp_path: Path, watching: ChangeQueue
) -> None:
    assert sources(memory, "Lag") == {str(notes / "sub" / "kafka.md")}
    (notes / "sub").rename(tmp_path / "outside")
    eventually(lambda: sources(memory, "Lag") == set(), what="the moved folder's note is gone")


def test_an_unchanged_file_touched_100_times_is_embedded_zero_times(
    memory: Memory, notes: Path, counting: CountingEmbedder, watching: ChangeQueue
) -> None:
    counting.texts.clear()
    note = notes / "vpn.md"
    text = note.read_text()
    start = time.time()
    for i in range(100):
        if i % 2:
            note.write_text(text)  # rewritten with the same content
        else:
            os.utime(note, (start + i, start + i))
    eventually(lambda: watching.batches > 0 and watching.wait_idle(0), what="the touches were indexed")
    assert watching.wait_idle(DEADLINE)
    assert counting.texts == []
    assert watching.last_batch is not None and watching.last_batch.embedded == 0
    assert sources(memory, "VPN") == {str(note)}


def test_a_malformed_file_in_a_burst_is_reported_and_the_others_are_indexed(
    memory: Memory, notes: Path, watching: ChangeQueue
) -> None:
    for i in range(20):
        (notes / f"burst-{i}.md").write_text(f"# Burst {i}\n\nburstword{i} is here.\n")
    bad = notes / "broken.ipynb"
    bad.write_text('{"cells": [')  # not JSON
    eventually(
        lambda: all(sources(memory, f"burstword{i}") for i in range(20)), what="every good file is found"
    )
    failures = eventually(lambda: watching.status()["failures"], what="the bad file is reported")
    assert [f["path"] for f in failures] == [str(bad)]
    assert "JSON" in failures[0]["reason"] or "notebook" in failures[0]["reason"]
    # Visible to stats(), whichever process asks (the queue publishes a status file).
    live = eventually(lambda: summary(memory.path)["failures"], what="stats show the failure")
    assert str(bad) in live[0]
    assert memory.stats()["live"]["watchers"]


def test_exclusions_are_not_indexed(memory: Memory, notes: Path, watching: ChangeQueue) -> None:
    (notes / ".gitignore").write_text("build/\n*.log.md\n")
    for folder in (".git", ".ipynb_checkpoints", "node_modules", "build", ".hidden", "env"):
        (notes / folder).mkdir()
    (notes / "env" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    planted = {
        notes / ".git" / "HEAD.md": "excludedword in git",
        notes / ".ipynb_checkpoints" / "a-checkpoint.md": "excludedword in a checkpoint",
        notes / "node_modules" / "readme.md": "excludedword in node_modules",
        notes / "build" / "out.md": "excludedword in a gitignored folder",
        notes / "debug.log.md": "excludedword in a gitignored file",
        notes / ".hidden" / "x.md": "excludedword in a hidden folder",
        notes / "env" / "notes.md": "excludedword in a virtualenv",
        notes / "draft.md~": "excludedword in an editor backup",
        notes / ".#draft.md": "excludedword in an editor lock",
    }
    for path, text in planted.items():
        path.write_text(f"# X\n\n{text}\n")
    # A file written last is found: everything before it was seen and dropped.
    (notes / "last.md").write_text("# Last\n\nsentinelword\n")
    eventually(lambda: sources(memory, "sentinelword"), what="the sentinel is found")
    assert watching.wait_idle(DEADLINE)
    assert sources(memory, "excludedword") == set()
    # An index run of the folder leaves out the same files.
    memory.index(notes)
    assert sources(memory, "excludedword") == set()


def test_a_half_written_notebook_is_tried_again(memory: Memory, notes: Path) -> None:
    path = notes / "half.ipynb"
    write_notebook(path, "halfwrittenword finally complete")
    whole = path.read_text()
    path.write_text(whole[: len(whole) // 2])
    retried = threading.Event()
    done: list[Any] = []

    def on_batch(batch: Any) -> None:
        done.append(batch)
        if batch.failures and not retried.is_set():
            path.write_text(whole)  # the editor finishes writing, without a new event
            retried.set()

    with ChangeQueue(memory, quiet=0.05, retry_after=0.2, on_batch=on_batch) as queue:
        queue.put(path)
        eventually(lambda: sources(memory, "halfwrittenword"), what="the retry indexes the whole notebook")
        assert queue.wait_idle(DEADLINE)
        assert done[0].failures and not done[-1].failures
        assert queue.status()["failures"] == []


def test_bad_input_is_reported_by_name_and_nothing_stored_is_lost(
    memory: Memory, notes: Path, tmp_path: Path
) -> None:
    huge = notes / "huge.txt"
    with huge.open("wb") as fh:
        fh.truncate(int(memory.settings.max_file_mb * 1e6) + 1)  # sparse: no disk used
    loop = notes / "sub" / "loop"
    loop.symlink_to(notes, target_is_directory=True)
    dangling = notes / "dangling.md"
    dangling.symlink_to(tmp_path / "nowhere.md")
    before = memory.stats()["items"]
    with ChangeQueue(memory, quiet=0.05, retry_after=0.05) as queue:
        queue.put_many([(huge, False), (loop, False), (dangling, False), (notes / "gone.md", True)])
        assert queue.wait_idle(DEADLINE)
        eventually(lambda: queue.batches >= 2, what="the retry ran")  # the failures are tried once more
        assert queue.wait_idle(DEADLINE)
        reasons = {f["path"]: f["reason"] for f in queue.status()["failures"]}
    assert "MB" in reasons[str(huge)]
    assert str(dangling) in reasons
    assert memory.stats()["items"] == before
    assert sources(memory, "VPN") == {str(notes / "vpn.md")}  # not again through the loop
    assert sources(memory, "Lag") == {str(notes / "sub" / "kafka.md")}


def test_a_rule_added_later_holds_while_the_watcher_runs(
    memory: Memory, notes: Path, watching: ChangeQueue
) -> None:
    # The watcher has read the folder's (missing) .gitignore: a change under it was indexed.
    (notes / "warm.md").write_text("# Warm\n\nwarmupword\n")
    eventually(lambda: sources(memory, "warmupword"), what="the first change is indexed")
    (notes / "evalnb").mkdir()
    (notes / "evalnb" / "before.md").write_text("# Before\n\nbeforeruleword\n")
    eventually(lambda: sources(memory, "beforeruleword"), what="a file indexed before the rule")

    (notes / ".gitignore").write_text("evalnb/\n")  # echo evalnb/ > .gitignore
    # What the rule now ignores goes: the rule's change indexes its folder again.
    eventually(lambda: not sources(memory, "beforeruleword"), what="the now-ignored file is removed")
    note = notes / "evalnb" / "x.md"
    for save in range(3):  # written, then autosaved twice
        note.write_text(f"# X\n\nignoredlaterword, save {save}\n")
        (notes / "sentinel.md").write_text(f"# Sentinel\n\nsentinelword{save}\n")
        eventually(lambda s=save: sources(memory, f"sentinelword{s}"), what="the sentinel is found")
        assert watching.wait_idle(DEADLINE)
        assert sources(memory, "ignoredlaterword") == set()


def test_a_rule_written_unheard_holds_for_the_next_change(memory: Memory, notes: Path) -> None:
    # The Jupyter server hears only what is saved through it, not `echo evalnb/ > .gitignore`.
    with ChangeQueue(memory, quiet=0.05) as queue:
        (notes / "warm.md").write_text("# Warm\n\nwarmupword\n")
        queue.put(notes / "warm.md")
        assert queue.wait_idle(DEADLINE) and sources(memory, "warmupword")
        (notes / ".gitignore").write_text("evalnb/\n")
        (notes / "evalnb").mkdir()
        (notes / "evalnb" / "x.md").write_text("# X\n\nignoredlaterword\n")
        queue.put(notes / "evalnb" / "x.md")
        assert queue.wait_idle(DEADLINE) and queue.batches == 2
        assert sources(memory, "ignoredlaterword") == set()


def test_an_index_of_a_folder_removes_what_a_rule_added_later_ignores(memory: Memory, notes: Path) -> None:
    (notes / "evalnb").mkdir()
    (notes / "evalnb" / "x.md").write_text("# X\n\nignoredlaterword\n")
    (notes / "draft.tmp.md").write_text("# Draft\n\nignoredlaterword in a draft\n")
    memory.index(notes)
    assert len(sources(memory, "ignoredlaterword")) == 2
    (notes / ".gitignore").write_text("evalnb/\n*.tmp.md\n")
    report = memory.index(notes)
    assert (report.files_removed, report.files_unchanged) == (2, 2)
    assert "2 removed" in report.summary()
    assert sources(memory, "ignoredlaterword") == set()
    assert sources(memory, "VPN") == {str(notes / "vpn.md")}
    # A file named on its own is indexed as asked; its folder's index keeps to the rules.
    memory.index(notes / "evalnb" / "x.md")
    assert sources(memory, "ignoredlaterword") == {str(notes / "evalnb" / "x.md")}
    assert memory.index(notes).files_removed == 1


def test_exclude_reads_gitignore_as_git_does(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / ".gitignore").write_text("*.tmp.md\n/top.md\nbuild/\n!keep.tmp.md\n")
    (tmp_path / "a" / ".gitignore").write_text("b/\n")
    ignored = exclude.Ignored(tmp_path)
    assert ignored.matches(str(tmp_path / "x.tmp.md"))
    assert not ignored.matches(str(tmp_path / "keep.tmp.md"))
    assert ignored.matches(str(tmp_path / "top.md"))
    assert not ignored.matches(str(tmp_path / "a" / "top.md"))
    assert ignored.matches(str(tmp_path / "a" / "b"), is_dir=True)
    assert ignored.matches(str(tmp_path / "a" / "b" / "c.md"))
    assert exclude.excluded(str(tmp_path / ".git" / "x.md"), str(tmp_path)) is not None
    assert exclude.excluded(str(tmp_path / "a" / "n.md"), str(tmp_path), ignored) is None


def test_the_queue_checks_its_arguments(memory: Memory) -> None:
    with pytest.raises(ValueError, match="quiet"):
        ChangeQueue(memory, quiet=1.0, max_wait=0.5)
    with pytest.raises(ValueError, match="slice_files"):
        ChangeQueue(memory, slice_files=0)


def test_fixed_roots_and_the_status_file(memory: Memory, notes: Path) -> None:
    with ChangeQueue(memory, roots=[Root(str(notes / "sub"), "default")], quiet=0.05) as queue:
        (notes / "sub" / "new.md").write_text("# New\n\nfixedrootword\n")
        (notes / "outside-root.md").write_text("# Out\n\nfixedrootword\n")
        queue.put_many([(notes / "sub" / "new.md", False), (notes / "outside-root.md", False)])
        assert queue.wait_idle(DEADLINE)
        assert sources(memory, "fixedrootword") == {str(notes / "sub" / "new.md")}
        status = json.loads(next(iter(Path(summary_folder(memory)).glob("watch-*.json"))).read_text())
        assert status["roots"] == [str(notes / "sub")] and status["batches"] == 1
    assert summary(memory.path)["watchers"] == []  # withdrawn when closed


def summary_folder(memory: Memory) -> Path:
    from nbmemory.runtime import status_folder

    return status_folder(memory.path, "live")
