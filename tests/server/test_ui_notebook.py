"""What a notebook user sees: magics and charts run in a real kernel in JupyterLab, offline.

Uses the harness of :mod:`tests.server.test_ui` (Debian Chromium, a real ``jupyter lab`` with no
network). A notebook loads the extension, draws a chart from :mod:`nbmemory.jupyter.plots`, runs
``%memsearch``, ``%memindex`` of a missing path and the explorer; the tests check that the chart
is drawn with marks (vega loaded from the package, not a CDN), that each magic cell has exactly
one output, and that no output holds library chatter. Screenshots go to ``docs/screenshots/``.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path
from typing import Any

import nbformat
import pytest

from tests.server.test_ui import (  # noqa: F401 (the two jp_ fixtures override pytest-jupyter's)
    SCREENSHOTS,
    Lab,
    jp_asyncio_loop,
    jp_server_cleanup,
    lab_page,
    running_lab,
    write_root,
)

pytestmark = pytest.mark.ui

CELLS = [
    "%load_ext nbmemory",
    "from nbmemory.jupyter import plots\n\n"
    "mem = %memory\n"
    'result = mem.search("how did I handle token rotation", k=8)\n'
    "plots.rank_scatter(result)",
    "plots.contribution(result)",
    "%memsearch steps to deploy to staging -k 5",
    "explorer = %memexplore how did I handle token rotation\nexplorer",
    "%memindex ../notes.md --ns tour",
    # Pasted text reaches the search as typed: no {} expansion, its flags kept.
    "%memsearch HEAD@{1} git reset --hard -k 3",
    # The labels over weak hits and over a flagged search, as a notebook draws them (the flags
    # are set by hand: which real query is weak or flagged depends on the model).
    "from dataclasses import replace\n"
    "from nbmemory.jupyter.display import SearchHits\n"
    'weak = mem.search("steps to deploy to staging", k=6)\n'
    "for hit in weak.hits[2:]:\n"
    "    hit.weak = True\n"
    'SearchHits(weak, "weak tail")',
    'SearchHits(replace(weak, rejected=True, reason="no confident match: test"), "no confident match: test")',
    # Last: Run All stops at a cell that fails.
    "%memindex /nonexistent/path",
]
LOAD, CHART, BARS, SEARCH, EXPLORER, INDEX, PASTED, WEAK, FLAGGED, MISSING = range(len(CELLS))


def fill_root(root: Path) -> None:
    """The harness's notebook and note, and the sample corpus's notes (enough for a real chart)."""
    write_root(root)
    shutil.copytree(files("nbmemory") / "sample_corpus" / "notes", root / "corpus")  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with running_lab(tmp_path_factory.mktemp("labnb"), fill_root) as lab:
        # Written after indexing: the notebook that runs the magics is not in the memory.
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nb.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
        (lab.root / "work").mkdir()
        nbformat.write(nb, lab.root / "work" / "tour.ipynb")
        yield lab


@pytest.fixture(scope="module")
def notebook(lab: Lab) -> Iterator[Any]:
    """The notebook, every cell run in a real kernel, and the page it is on."""
    with lab_page(lab) as page:
        page.evaluate(
            "() => window.jupyterapp.commands.execute('docmanager:open', {path: 'work/tour.ipynb'})"
        )
        panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
        panel.locator(".jp-Cell").first.wait_for(state="visible")
        # Runs once the kernel is up.
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        # The last cell shows its error when the whole notebook has run.
        panel.locator(".jp-Cell").nth(MISSING).locator(".jp-OutputArea-child").wait_for(timeout=300_000)
        yield page, panel


def cell(panel: Any, index: int) -> Any:
    return panel.locator(".jp-Cell").nth(index)


def outputs(panel: Any, index: int) -> Any:
    return cell(panel, index).locator(".jp-OutputArea-child")


def test_the_chart_draws_offline_with_marks(notebook: Any) -> None:
    page, panel = notebook
    chart = cell(panel, CHART).locator(".vega-embed svg.marks")
    chart.wait_for(state="visible", timeout=60_000)
    # One point per candidate: the marks are drawn, not only the axes.
    points = chart.locator(".mark-symbol path")
    assert points.count() >= 3
    # Interactive: hovering a point shows its tooltip.
    points.first.hover(force=True)
    page.locator("#vg-tooltip-element.visible").wait_for(state="visible", timeout=10_000)
    assert "found_by" in page.locator("#vg-tooltip-element").inner_text()
    assert outputs(panel, CHART).count() == 1
    page.mouse.move(0, 0)
    cell(panel, CHART).scroll_into_view_if_needed()
    cell(panel, CHART).locator(".jp-OutputArea").screenshot(
        path=str(SCREENSHOTS / "rank_scatter_jupyterlab.png")
    )


def test_the_contribution_chart_draws_its_bars(notebook: Any) -> None:
    _, panel = notebook
    chart = cell(panel, BARS).locator(".vega-embed svg.marks")
    chart.wait_for(state="visible", timeout=60_000)
    # One segment per part (BM25, cosine, ...) per hit, k = 8.
    assert chart.locator(".mark-rect path").count() >= 8
    assert outputs(panel, BARS).count() == 1
    cell(panel, BARS).locator(".jp-OutputArea").screenshot(
        path=str(SCREENSHOTS / "contribution_jupyterlab.png")
    )


def test_each_magic_cell_has_one_output(notebook: Any) -> None:
    _, panel = notebook
    assert outputs(panel, LOAD).count() == 0
    search = outputs(panel, SEARCH)
    assert search.count() == 1
    table = search.locator(".nbmemory-hits table")
    assert table.count() == 1 and table.locator("tr[data-nbmemory-id]").count() >= 1
    assert "shape:" not in search.inner_text()
    assert outputs(panel, EXPLORER).count() == 1
    # %memindex: one display, the progress widget, whose label ends as the report.
    index = outputs(panel, INDEX)
    assert index.count() == 1, index.all_inner_texts()
    assert index.locator(".widget-hprogress .progress-bar-success").count() == 1
    assert "1 files seen: 1 indexed" in index.inner_text()
    cell(panel, SEARCH).locator(".jp-OutputArea").screenshot(path=str(SCREENSHOTS / "memsearch_table.png"))


def test_a_missing_path_is_one_clear_error(notebook: Any) -> None:
    _, panel = notebook
    error = outputs(panel, MISSING)
    assert error.count() == 1
    text = error.inner_text()
    assert "UsageError" in text and "no such file or folder: /nonexistent/path" in text
    # Said once, with no progress bar and no traceback.
    assert text.count("no such file or folder") == 1 and "Traceback" not in text
    assert cell(panel, MISSING).locator(".widget-hprogress").count() == 0


def test_no_output_holds_library_chatter(notebook: Any) -> None:
    _, panel = notebook
    text = panel.locator(".jp-OutputArea").all_inner_texts()
    assert text and not [t for t in text if "Loading weights" in t or "it/s]" in t]


def test_the_explorer_chart_tab_draws_offline(notebook: Any) -> None:
    _, panel = notebook
    explorer = outputs(panel, EXPLORER)
    explorer.locator(".lm-TabBar-tab", has_text="Chart").click()
    chart = explorer.locator(".vega-embed svg.marks")
    chart.wait_for(state="visible", timeout=60_000)
    assert chart.locator(".mark-symbol path").count() >= 3
    explorer.screenshot(path=str(SCREENSHOTS / "explorer_chart.png"))


def test_a_pasted_command_is_searched_as_typed(notebook: Any) -> None:
    _, panel = notebook
    cell(panel, PASTED).scroll_into_view_if_needed()
    text = outputs(panel, PASTED).text_content() or ""
    assert "for 'HEAD@{1} git reset --hard'" in text and "UsageError" not in text


def test_weak_hits_sit_under_one_line_and_a_flagged_search_is_folded(notebook: Any) -> None:
    _, panel = notebook
    # In view: Lab does not render the cells of a long notebook that are out of sight.
    cell(panel, WEAK).scroll_into_view_if_needed()
    weak = outputs(panel, WEAK)
    label = weak.locator("tr.nbmemory-weak-label")
    assert label.count() == 1
    assert label.inner_text().startswith("weaker matches: far in meaning, and holding under half")
    rows = weak.locator("tr[data-nbmemory-id]")
    assert rows.count() >= 3 and "weaker match" not in " ".join(rows.all_inner_texts())
    # Scores say what they are: the column's title, a line under the table, each score's parts.
    assert "x cosine" in (weak.locator("th", has_text="score").get_attribute("title") or "")
    assert "hover a score for its parts" in weak.inner_text()
    assert " + cosine " in (rows.first.locator("td").nth(1).get_attribute("title") or "")
    cell(panel, FLAGGED).scroll_into_view_if_needed()
    flagged = outputs(panel, FLAGGED)
    flagged.wait_for(state="visible")
    fold = flagged.locator("details.nbmemory-closest")
    assert fold.count() == 1 and fold.get_attribute("open") is None
    summary = fold.locator(":scope > summary")
    assert summary.is_visible() and not fold.locator("table").is_visible()
    assert fold.locator("tr[data-nbmemory-id]").count() == 3
    assert "show the 3 closest items" in flagged.inner_text() and "weaker" not in flagged.inner_text()
    summary.click()
    assert fold.locator("table").is_visible()
