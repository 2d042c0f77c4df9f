"""The memory never feeds on itself: a notebook's ``%mem...`` cells and the outputs nbmemory
rendered are left out when the notebook is indexed; the rest of it is indexed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from traitlets.config import Config

from nbmemory import Memory
from nbmemory.ingest.notebook import chunk_notebook
from nbmemory.jupyter.magics import MemoryMagics
from nbmemory.own_output import MAGICS, calls_magic

NOTE = "# Undo the last commit\n\n`git reset --soft HEAD~1` undoes the last commit and keeps its changes staged.\n"


@pytest.fixture(scope="module")
def shell(tmp_path_factory: pytest.TempPathFactory) -> InteractiveShell:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IPYTHONDIR", str(tmp_path_factory.mktemp("ipython")))
        config = Config()
        config.HistoryManager.hist_file = ":memory:"
        return InteractiveShell.instance(config=config)


@pytest.fixture
def ip(
    shell: InteractiveShell, fake_mem: Memory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[InteractiveShell]:
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    shell.run_line_magic("load_ext", "nbmemory")
    magics: MemoryMagics = shell.magics_manager.registry["MemoryMagics"]  # type: ignore[assignment]
    magics.memory = fake_mem
    magics.progress = "none"
    yield shell
    magics.memory = None


def test_the_list_of_magics_is_the_magics_registered() -> None:
    registered = set(MemoryMagics.magics["line"]) | set(MemoryMagics.magics["cell"])
    assert set(MAGICS) == registered


@pytest.mark.parametrize(
    "source",
    [
        "%memsearch how do I undo the last git commit",
        "  %memsearch --k 3 kafka lag",
        "%%remember --tag ops\nstaging is db-stg-12",
        "%remember deploys need the VPN",
        "x = 1\n%memstats",
        "get_ipython().run_line_magic('memsearch', 'kafka lag')",
        'get_ipython().run_cell_magic("remember", "", "a fact")',
        "%memory",
    ],
)
def test_a_cell_calling_a_magic_is_recognised(source: str) -> None:
    assert calls_magic(source)


@pytest.mark.parametrize(
    "source",
    [
        "import pandas as pd",
        "%timeit sum(range(10))",
        "%memsearching_is_not_ours",
        "print('%memsearch in a string')",
        "# remember to rerun this\nx = 2",
        "%load_ext nbmemory",
    ],
)
def test_other_cells_are_not(source: str) -> None:
    assert not calls_magic(source)


def test_a_saved_notebook_adds_none_of_its_memsearch_cells_or_their_outputs(
    ip: InteractiveShell, fake_mem: Memory, tmp_path: Path
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "git-undo.md").write_text(NOTE)
    fake_mem.index(notes)

    # What the notebook shows, as a kernel produced it: the magic's display, and the repr of a
    # search result and of a stored item returned by Python calls.
    query = "how do I undo the last git commit"
    with capture_output() as cap:
        shown = ip.run_line_magic("memsearch", query)
        ip.display_pub.publish(*ip.display_formatter.format(shown))
    result = fake_mem.search("undo commit", k=3)
    result_data, result_md = ip.display_formatter.format(result)
    item_data, item_md = ip.display_formatter.format(fake_mem.get(result.ids[0]))
    assert cap.outputs and all("nbmemory" in o.metadata for o in cap.outputs)

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Cleaning the orders table"),
        nbformat.v4.new_code_cell(
            "orders = load_orders('2024-q3')",
            outputs=[nbformat.v4.new_output("stream", name="stdout", text="loaded 3 partitions of orders\n")],
        ),
        nbformat.v4.new_code_cell(
            f"%memsearch {query}",
            outputs=[
                nbformat.v4.new_output("display_data", data=o.data, metadata=o.metadata) for o in cap.outputs
            ],
        ),
        nbformat.v4.new_code_cell(
            "result = mem.search('undo commit', k=3)\nresult",
            outputs=[
                nbformat.v4.new_output(
                    "execute_result", data=result_data, metadata=result_md, execution_count=4
                )
            ],
        ),
        nbformat.v4.new_code_cell(
            "mem.get(result.ids[0])",
            outputs=[
                nbformat.v4.new_output("execute_result", data=item_data, metadata=item_md, execution_count=5)
            ],
        ),
        nbformat.v4.new_code_cell("%%remember --tag ops\nthe staging database is db-stg-12"),
    ]
    path = notes / "analysis.ipynb"
    nbformat.write(nb, path)

    report = fake_mem.index(notes)
    assert report.files_changed == 1 and not report.skipped
    texts = [
        str(t)
        for (t,) in fake_mem.db.fetchall(
            "SELECT text FROM chunks WHERE source = ? AND deleted_at IS NULL", [str(path.resolve())]
        )
    ]
    joined = "\n".join(texts)
    # The rest of the notebook is indexed ...
    assert "Cleaning the orders table" in joined
    assert "load_orders" in joined and "loaded 3 partitions" in joined
    assert "mem.search('undo commit'" in joined  # the code of a plain cell stays, its output does not
    # ... nbmemory's own cells and outputs are not.
    assert "memsearch" not in joined and query not in joined
    assert "git reset --soft" not in joined and "undoes the last commit" not in joined
    assert "db-stg-12" not in joined and "remember" not in joined
    # So the note is what a search for the question finds first.
    hits = fake_mem.search(query, k=3)
    assert hits[0].source is not None and hits[0].source.endswith("git-undo.md")


def test_chunking_leaves_out_marked_outputs_of_any_cell() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "show(hits)",
            outputs=[
                nbformat.v4.new_output(
                    "display_data",
                    data={"text/plain": "1. kafka lag note"},
                    metadata={"nbmemory": {"rendered": "HitTable"}},
                ),
                nbformat.v4.new_output("display_data", data={"text/plain": "an ordinary table"}),
            ],
        )
    ]
    chunks = chunk_notebook("x.ipynb", nbformat.writes(nb), 4000)
    assert len(chunks) == 1
    assert "an ordinary table" in chunks[0].text and "kafka lag" not in chunks[0].text
