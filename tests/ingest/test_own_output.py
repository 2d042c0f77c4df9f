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
from nbmemory.embed import FakeEmbedder
from nbmemory.ingest.notebook import chunk_notebook
from nbmemory.jupyter.magics import MemoryMagics
from nbmemory.own_output import MAGICS, calls_magic, without_printed, without_setup

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
        "hits = %memsearch blorptangle frobnicator escalation",
        "_m = %memory",
        "a, b.c[0] = %memsearch -k 3 kafka",
        "if True:\n    mem = %memory",
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
        "x = '%memsearch in a string'",
        "x == %memsearch",
        "memo = %memorize",
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


def test_the_lines_loading_the_extension_go_and_the_rest_of_the_cell_stays() -> None:
    assert without_setup("%load_ext nbmemory") == ""
    assert without_setup("%reload_ext nbmemory  # again\n") == ""
    assert without_setup("get_ipython().run_line_magic('load_ext', 'nbmemory')") == ""
    assert without_setup("%load_ext nbmemory\n%config MemoryMagics.top_k = 20\nimport pandas as pd\n") == (
        "import pandas as pd\n"
    )
    assert without_setup("%load_ext autoreload\n%config InlineBackend.figure_format = 'svg'") == (
        "%load_ext autoreload\n%config InlineBackend.figure_format = 'svg'"
    )

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "%load_ext nbmemory",
            outputs=[
                nbformat.v4.new_output(
                    "stream", name="stdout", text="The nbmemory extension is already loaded."
                )
            ],
        ),
        nbformat.v4.new_code_cell("%load_ext nbmemory\nimport pandas as pd"),
    ]
    chunks = chunk_notebook("x.ipynb", nbformat.writes(nb), 4000)
    assert [(c.cell_index, c.text) for c in chunks] == [(1, "import pandas as pd")]


def test_the_printed_text_of_nbmemorys_objects_is_recognised(
    ip: InteractiveShell, fake_mem: Memory, tmp_path: Path
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "git-undo.md").write_text(NOTE)
    (notes / "vpn.md").write_text("# VPN\n\nDeploys need the VPN on.\n")
    fake_mem.index(notes)
    # What print() writes for each, from the objects themselves.
    shown = [
        ip.run_line_magic("memsearch", "undo the last commit"),
        ip.run_line_magic("memsearch", "undo the last commit --explain"),
        ip.run_line_magic("memsearch", "zzzz qqqq"),
    ]
    result = fake_mem.search("undo commit", k=3)
    printed = [repr(s) for s in shown] + [
        repr(result),
        repr(result.hits),
        repr(result[0]),
        result.explain(),
        repr(fake_mem.get(result.ids[0])),
        repr(fake_mem),
        str(fake_mem),
    ]
    for text in printed:
        assert without_printed(text) == "", text
        # Whatever the cell printed around it stays.
        assert (
            without_printed(f"loaded 3 partitions\n{text}\ndone: 12 rows")
            == "loaded 3 partitions\ndone: 12 rows"
        )
    for ordinary in (
        "  1. first step\n  2. second step",
        "Results for 'q'\n[0.5, 0.25]",
        "query: select 1",
        "(12 rows)",
    ):
        assert without_printed(ordinary) == ordinary


KERNEL = "nbmemory-test"


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A kernelspec for this venv's Python, installed in ``tmp_path`` with every Jupyter and IPython
    folder there: nothing is written to ~."""
    from ipykernel import kernelspec

    prefix = tmp_path / "jupyter"
    kernelspec.install(kernel_name=KERNEL, prefix=str(prefix))
    for name, folder in {
        "JUPYTER_PATH": prefix / "share" / "jupyter",
        "JUPYTER_DATA_DIR": tmp_path / "jupyter-data",
        "JUPYTER_RUNTIME_DIR": tmp_path / "jupyter-runtime",
        "JUPYTER_CONFIG_DIR": tmp_path / "jupyter-config",
        "IPYTHONDIR": tmp_path / "ipython",
    }.items():
        monkeypatch.setenv(name, str(folder))
    return KERNEL


@pytest.mark.integration
def test_a_notebook_run_in_a_kernel_does_not_feed_the_memory_its_own_cells(
    tmp_path: Path, kernel: str
) -> None:
    from nbclient import NotebookClient

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "escalation.md").write_text(
        "# Escalation\n\nA blorptangle frobnicator escalation goes to the on-call lead first.\n"
    )
    db = tmp_path / "m.duckdb"
    with Memory(db, embedder=FakeEmbedder(dim=32)) as mem:
        mem.index(notes)

    setup = (
        "from nbmemory import Memory\nfrom nbmemory.embed import FakeEmbedder\n"
        f"get_ipython().magics_manager.registry['MemoryMagics'].memory = Memory({str(db)!r}, "
        "embedder=FakeEmbedder(dim=32))"
    )
    ordinary = "# the blorptangle calibration\nblorptangle_ratio = 0.3\nprint('blorptangle ratio', blorptangle_ratio)"
    # The steps as a user types them, and the other ways a result reaches a cell.
    cells = ["%load_ext nbmemory", setup, "hits = %memsearch blorptangle frobnicator escalation", "hits"]
    cells += ["_m = %memory", "_m", "print(hits)", "result = _m.search(hits.result.query)", "print(result)"]
    cells += ["result[0]", "print(result.hits)", "print(result.explain())", "_m.get(result.ids[0])", ordinary]
    # Cells that are nbmemory's through and through; and cells of code that show its output.
    whole = {"%load_ext nbmemory", "hits = %memsearch blorptangle frobnicator escalation", "hits"}
    whole |= {"_m = %memory", "_m", "result[0]"}
    showing = set(cells) - whole - {setup, ordinary}
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    NotebookClient(
        nb, kernel_name=kernel, timeout=300, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    shown = {c.source: c.outputs for c in nb.cells}
    assert "blorptangle frobnicator escalation" in str(shown["hits"]), "the search found the note"
    assert "blorptangle frobnicator escalation" in str(shown["print(result)"])
    assert "nbmemory.memory.Memory" in str(shown["_m"])
    path = notes / "analysis.ipynb"
    nbformat.write(nb, path)  # Ctrl+S

    with Memory(db, embedder=FakeEmbedder(dim=32)) as mem:
        report = mem.index(notes)
        assert report.files_changed == 1 and not report.skipped
        indexed = {
            int(cell): str(text)
            for cell, text in mem.db.fetchall(
                "SELECT cell_index, text FROM chunks WHERE source = ? AND deleted_at IS NULL", [str(path)]
            )
        }
        cell_of = {c.source: i for i, c in enumerate(nb.cells)}
        # A cell that is nbmemory's own through and through is not indexed at all ...
        left_out = {cell_of[source] for source in whole}
        assert not left_out & set(indexed), {i: indexed[i] for i in left_out & set(indexed)}
        # ... and of one that showed nbmemory's output, only the code is.
        for source in showing:
            assert indexed[cell_of[source]] == source
        assert "frobnicator" not in "\n".join(indexed.values())
        hits = mem.search("blorptangle frobnicator", k=10)
        found = [(h.source, h.cell_index) for h in hits]
        assert found[0] == (str(notes / "escalation.md"), None)
        assert (str(path), cell_of[ordinary]) in found  # the ordinary cell that mentions blorptangle
        assert not {cell for source, cell in found if source == str(path)} & left_out
