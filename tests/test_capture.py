"""Executed cells as items: ``Memory.capture``, forgetting them by notebook and time, and the
kernel side (``%memcapture``) driven through a real IPython shell. The kernel itself, through
nbclient and another process, is tests/test_capture_kernel.py."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import nbformat
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from traitlets.config import Config

from nbmemory import Memory
from nbmemory.embed import FakeEmbedder
from nbmemory.errors import ConfigError
from nbmemory.executions import plain_text
from nbmemory.jupyter.capture import HEAD, TAIL, _Kept
from nbmemory.jupyter.magics import MemoryMagics
from nbmemory.runtime import published, status_folder
from tests.conftest import CountingEmbedder

NOTEBOOK = "/work/analysis.ipynb"
FAILED = {
    "source": 'raise ValueError("zorblax-quux failed")',
    "notebook": NOTEBOOK,
    "cell_id": "c-1",
    "cell_index": 2,
    "error": "ValueError: zorblax-quux failed",
    "traceback": 'Traceback (most recent call last):\n  File "<cell>", line 1, in <module>\n'
    '    raise ValueError("zorblax-quux failed")\nValueError: zorblax-quux failed',
}


def live_runs(mem: Memory) -> list[tuple[int, str, datetime]]:
    return [
        (int(i), str(t), e)
        for i, t, e in mem.db.fetchall(
            "SELECT id, text, event_at FROM chunks WHERE kind = 'execution' AND deleted_at IS NULL ORDER BY id"
        )
    ]


# -- the owner's side --------------------------------------------------------------------------
def test_a_run_is_an_item_with_its_error_notebook_cell_and_time(fake_mem: Memory) -> None:
    [item_id] = fake_mem.capture([{**FAILED, "at": "2026-03-02T10:00"}])
    item = fake_mem.get(item_id)
    assert (item.kind, item.source, item.cell_id, item.cell_index) == ("execution", NOTEBOOK, "c-1", 2)
    assert item.event_at == datetime(2026, 3, 2, 10, 0) and item.location == f"{NOTEBOOK}#cell 3"
    # The notebook is the session its cells belong to: search reads them as a conversation's turns.
    assert item.conversation == NOTEBOOK
    assert item.heading == "failed: ValueError: zorblax-quux failed"
    assert item.text.splitlines() == [
        'raise ValueError("zorblax-quux failed")',
        "# Error: ValueError: zorblax-quux failed",
        "Traceback (most recent call last):",
        '  File "<cell>", line 1, in <module>',
        '    raise ValueError("zorblax-quux failed")',
    ]
    hits = fake_mem.search("zorblax-quux failed", kind="execution", since="2026-03-01", until="2026-03-03")
    assert hits.ids == [item_id]
    assert fake_mem.search("zorblax-quux failed", kind="execution", since="2026-03-03").ids == []


def test_running_an_unchanged_cell_again_moves_its_time_instead_of_adding_a_copy(fake_mem: Memory) -> None:
    first = fake_mem.capture([{**FAILED, "at": "2026-03-02T10:00"}])
    again = [fake_mem.capture([{**FAILED, "at": f"2026-03-02T10:{m:02d}"}])[0] for m in range(1, 21)]
    assert set(again) == set(first)
    assert [(i, e) for i, _, e in live_runs(fake_mem)] == [(first[0], datetime(2026, 3, 2, 10, 20))]
    # Its output and error are those of the last run; the search index follows.
    fake_mem.capture([{**FAILED, "error": None, "traceback": None, "output": "worked: blimpcount 42"}])
    [(item_id, text, _)] = live_runs(fake_mem)
    assert item_id == first[0] and "blimpcount 42" in text and "# Error" not in text
    assert fake_mem.get(item_id).heading == ""
    assert fake_mem.search("blimpcount", kind="execution").ids == [item_id]
    assert fake_mem.search("zorblax-quux failed", kind="execution").ids == [
        item_id
    ]  # the source still says it
    # One batch holding a cell twice, and the same cell in another notebook or another cell id.
    ids = fake_mem.capture(
        [FAILED, FAILED, {**FAILED, "notebook": "/work/other.ipynb"}, {**FAILED, "cell_id": "c-2"}]
    )
    assert ids[0] == ids[1] == item_id and len({*ids}) == 3


def test_a_run_again_with_the_same_output_embeds_nothing(tmp_path: Path) -> None:
    embedder = CountingEmbedder(FakeEmbedder(dim=32))
    with Memory(tmp_path / "m.duckdb", embedder=embedder) as mem:  # type: ignore[arg-type]
        mem.capture([FAILED])
        embedded = len(embedder.texts)
        mem.capture([{**FAILED, "at": "2026-03-02T11:00"}] * 3)
        assert len(embedder.texts) == embedded
        mem.capture([{**FAILED, "output": "now it printed"}])
        assert len(embedder.texts) == embedded + 1


def test_an_edited_cell_is_a_new_item_beside_the_run_that_failed(fake_mem: Memory) -> None:
    failed = fake_mem.capture([FAILED])[0]
    fixed = fake_mem.capture([{**FAILED, "source": FAILED["source"] + "\nprint('ok')", "error": None}])[0]
    assert fixed != failed and len(live_runs(fake_mem)) == 2
    # A source that starts with another's is not that other's run again.
    longer = fake_mem.capture([{"source": "x = 1\ny = 2"}, {"source": "x = 1"}])
    assert longer[0] != longer[1]


def test_output_is_cut_with_its_size_said_and_made_plain_text(fake_mem: Memory) -> None:
    big = "bigoutputword\n" + "A" * 5_000_000
    [cut, bad, binary, ansi] = fake_mem.capture(
        [
            {"source": "print(big)", "output": big},
            {"source": "print(raw)", "output": "raw \udcff\udcfe bytes"},
            {"source": "print(blob)", "output": "\x00\x01\x02\x03" * 64},
            {"source": "progress()", "output": "\x1b[31mred\x1b[0m\n 10%\r 50%\r100% done"},
        ]
    )
    text = fake_mem.get(cut).text
    assert len(text) < 2_200 and text.startswith("print(big)\n# Output:\nbigoutputword\nAAA")
    assert text.endswith("AAAA\n[output truncated: 5,000,014 characters in all, 2,000 kept]")
    assert fake_mem.get(bad).text == (
        "print(raw)\n# Output:\nraw \ufffd\ufffd bytes\n[2 characters of invalid UTF-8 replaced with \ufffd]"
    )
    assert fake_mem.get(binary).text == "print(blob)\n# Output:\n[binary output: 256 characters, not stored]"
    assert fake_mem.get(ansi).text == "progress()\n# Output:\nred\n100% done"


def test_secrets_are_redacted_before_a_run_is_stored(fake_mem: Memory) -> None:
    secret = "ghp_" + "Zq7Xw2Lp9Kd4Mv8Nb3Hc6Jf1Rt5Ys0Ua2Ie7"
    [item_id] = fake_mem.capture(
        [{"source": f'token = "{secret}"\nprint(token)', "output": secret, "error": f"KeyError: {secret}"}]
    )
    stored = " ".join(
        str(v) for v in fake_mem.db.fetchone("SELECT heading, text FROM chunks WHERE id = ?", [item_id])
    )
    assert secret not in stored and stored.count("[REDACTED:github-token]") >= 3
    # Redacted the same way each time: the run again is the same item.
    assert fake_mem.capture([{"source": f'token = "{secret}"\nprint(token)'}]) == [item_id]


@pytest.mark.parametrize(
    ("runs", "message"),
    [
        ({"source": "x"}, "list of runs"),
        (["x = 1"], "must be a mapping"),
        ([{"source": " \n"}], "source is empty"),
        ([{"source": "x", "outptu": "typo"}], "unknown field"),
        ([{"source": "x", "at": "yesterday"}], "not an ISO 8601 time"),
        ([{"source": "x", "cell_index": -1}], "cell_index"),
        ([{"source": "x", "notebook": "bad \udcff"}], "not valid Unicode"),
    ],
)
def test_a_bad_run_is_refused_and_nothing_of_its_batch_stored(
    fake_mem: Memory, runs: Any, message: str
) -> None:
    batch = [{"source": "fine = 1"}, *runs] if isinstance(runs, list) else runs
    with pytest.raises(ConfigError, match=message):
        fake_mem.capture(batch)
    assert live_runs(fake_mem) == []


def test_captured_runs_are_forgotten_by_notebook_and_by_time_and_come_back(
    fake_mem: Memory, tmp_path: Path
) -> None:
    notebook = tmp_path / "analysis.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("blorptangle_ratio = 0.3")]
    nbformat.write(nb, notebook)
    fake_mem.index(notebook)
    indexed = fake_mem.search("blorptangle_ratio", kind="notebook").ids
    runs = [
        {
            "source": f"blorptangle_ratio = 0.{i}",
            "notebook": str(notebook),
            "cell_id": nb.cells[0].id,
            "at": at,
        }
        for i, at in ((1, "2026-03-01T09:00"), (2, "2026-03-02T09:00"))
    ]
    elsewhere = fake_mem.capture(
        [{"source": "blorptangle_ratio = 0.9", "notebook": "/w/x.ipynb", "at": "2026-03-02T09:30"}]
    )
    early, late = fake_mem.capture(runs)
    assert fake_mem.forget(kind="execution", path=str(notebook), since="2026-03-02") == [late]
    assert fake_mem.forget(kind="execution", path=str(notebook)) == [early]
    # The notebook's indexed cells stay, and it is indexed again when it changes.
    assert fake_mem.search("blorptangle_ratio", kind="notebook").ids == indexed
    assert fake_mem.forget(kind="execution", until="2026-03-02T10:00") == elsewhere
    assert fake_mem.restore([early, late]) == [early, late]
    assert {i for i, _, _ in live_runs(fake_mem)} == {early, late}
    with pytest.raises(ConfigError, match="exactly one of"):
        fake_mem.forget(early, kind="execution")
    with pytest.raises(ConfigError, match="kind 'executions' is not one of"):
        fake_mem.forget(kind="executions")


def test_the_kept_output_is_its_start_and_its_end_with_its_length() -> None:
    kept = _Kept()
    for i in range(100_000):
        kept.add(f"line {i}\n")
    text, total = kept.text()
    assert total == sum(len(f"line {i}\n") for i in range(100_000))
    head, tail = text.split("\n…\n")
    assert len(head) == HEAD and head.startswith("line 0\nline 1\n") and len(tail) == TAIL
    assert tail.endswith("line 99999\n")
    assert plain_text("a\x00b\x07c")[0] == "abc"


# -- the kernel's side, in a real IPython shell -----------------------------------------------
@pytest.fixture(scope="module")
def shell(tmp_path_factory: pytest.TempPathFactory) -> InteractiveShell:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IPYTHONDIR", str(tmp_path_factory.mktemp("ipython")))
        config = Config()
        config.HistoryManager.hist_file = ":memory:"
        return InteractiveShell.instance(config=config)


@pytest.fixture
def ip(
    shell: InteractiveShell, fake_mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[InteractiveShell]:
    monkeypatch.setenv("NBMEMORY_CAPTURE", "1")
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    if "nbmemory" in shell.extension_manager.loaded:
        # The shell is the process's one instance: another test module may have loaded it.
        shell.run_line_magic("unload_ext", "nbmemory")
    with capture_output() as cap:
        shell.run_line_magic("load_ext", "nbmemory")
    notice = str([o.data for o in cap.outputs])
    assert "remembered in" in notice and "%memcapture off" in notice
    magics = shell.magics_manager.registry["MemoryMagics"]
    magics.memory = fake_mem
    yield shell
    shell.run_line_magic("unload_ext", "nbmemory")
    magics.memory = None


def run(ip: InteractiveShell, *cells: str) -> None:
    with capture_output():
        for source in cells:
            ip.run_cell(source, store_history=True)
    assert ip.magics_manager.registry["MemoryMagics"].cell_capture.flush(30)


def test_a_shell_captures_its_cells_but_never_nbmemorys_own(ip: InteractiveShell, fake_mem: Memory) -> None:
    run(
        ip,
        "print('hello capture world')",
        "raise KeyError('snorkwidget')",
        "hits = %memsearch hello capture",
        "hits",
        "%memstats",
        "%config MemoryMagics.top_k = 10\nsetup_value = 7",
        "",
    )
    texts = [t for _, t, _ in live_runs(fake_mem)]
    assert texts[0] == "print('hello capture world')\n# Output:\nhello capture world"
    assert texts[1].startswith("raise KeyError('snorkwidget')\n# Error: KeyError: 'snorkwidget'\nTraceback")
    assert "Traceback" not in texts[1].split("# Error:")[0], "the shown traceback is not kept as output"
    assert texts[2:] == ["setup_value = 7"]
    capture = ip.magics_manager.registry["MemoryMagics"].cell_capture
    assert capture.counts == {"captured": 3, "skipped": 3, "dropped": 0, "failed": 0}
    with capture_output() as cap:
        ip.run_line_magic("memstats", "--json")
    assert '"capture": "on in this kernel' in cap.stdout
    # The kernel says beside the memory that it captures into it (the Lab sidebar lists it).
    [status] = [k for k in published(fake_mem.path, "capture") if k["pid"] == os.getpid()]
    assert status["runs"] == 3 and status["since"]
    # Another kernel capturing into this memory is named by %memstats (here: a live process).
    other = status_folder(fake_mem.path, "capture") / "kernel-other.json"
    other.write_text(json.dumps({"pid": os.getppid(), "notebook": "/w/train.ipynb", "runs": 2}))
    with capture_output() as cap:
        ip.run_line_magic("memstats", "--json")
    other.unlink()
    assert "1 other kernel(s) capture into this memory: train.ipynb" in cap.stdout
    ip.run_line_magic("memcapture", "off")
    assert [k for k in published(fake_mem.path, "capture") if k["pid"] == os.getpid()] == []


def test_memcapture_turns_it_off_and_on_and_forgets_what_it_took(
    ip: InteractiveShell, fake_mem: Memory
) -> None:
    run(ip, "%memcapture off", "offword = 'zyxwvut'", "%memcapture on", "onword = 'qqqxyz'")
    assert [t for _, t, _ in live_runs(fake_mem)] == ["onword = 'qqqxyz'"]
    with capture_output() as cap:
        ip.run_line_magic("memcapture", "status")
    assert cap.stdout.startswith("capture on in this kernel") and "1 cells captured" in cap.stdout
    with pytest.raises(UsageError, match="say which runs to forget"):
        ip.run_line_magic("memcapture", "forget")
    with pytest.raises(UsageError, match="go with forget"):
        ip.run_line_magic("memcapture", "off --all")
    with pytest.raises(UsageError, match="notebook is unknown"):
        ip.run_line_magic("memcapture", "forget --this")
    with capture_output() as cap:
        ip.run_line_magic("memcapture", "forget --since 1h")
    assert "forgot 1 captured run" in cap.stdout and live_runs(fake_mem) == []
    with capture_output() as cap:
        ip.run_line_magic("memforget", "--undo")
    assert "restored 1 item" in cap.stdout and len(live_runs(fake_mem)) == 1


def test_capture_off_by_setting_and_unloading_leaves_the_shell_as_it_was(
    shell: InteractiveShell, fake_mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NBMEMORY_CAPTURE", "0")
    writes = sys.stdout.write, shell.showtraceback, shell.displayhook.write_format_data
    with capture_output() as cap:
        shell.run_line_magic("load_ext", "nbmemory")
    assert not cap.outputs
    magics: MemoryMagics = shell.magics_manager.registry["MemoryMagics"]
    magics.memory = fake_mem
    run(shell, "quietword = 1")
    assert live_runs(fake_mem) == [] and not magics.cell_capture.enabled
    magics.capture = True  # %config MemoryMagics.capture = True
    run(shell, "loudword = 2")
    assert [t for _, t, _ in live_runs(fake_mem)] == ["loudword = 2"]
    shell.run_line_magic("unload_ext", "nbmemory")
    magics.memory = None
    assert not magics.cell_capture.enabled
    assert (sys.stdout.write, shell.showtraceback, shell.displayhook.write_format_data) == writes


def test_a_cell_is_found_by_the_words_of_the_cell_run_before_it(fake_mem: Memory) -> None:
    # The cells of one notebook are turns of its session: a cell that only printed a number is
    # found by what the cell before it set up, and a cell of another notebook is not lifted.
    runs = [
        {"source": "len(rows)", "output": "8231", "notebook": "/work/other.ipynb", "at": "2026-03-02T09:00"},
        {"source": "rows = load_quarterly_ledger()", "notebook": NOTEBOOK, "at": "2026-03-02T10:00"},
        {"source": "len(rows)", "output": "8231", "notebook": NOTEBOOK, "at": "2026-03-02T10:01"},
    ]
    other, ledger, count = fake_mem.capture(runs)
    from nbmemory.api import PipelineConfig

    ranked = fake_mem.search(
        "quarterly ledger", kind="execution", k=5, config=PipelineConfig(group=False)
    ).ids
    assert ranked[0] == ledger and ranked[1] == count  # the two cells are the same but for their neighbour
    assert other not in ranked[:2]
