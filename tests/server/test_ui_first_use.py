"""What a new user trips on, in a real JupyterLab driven in Debian's Chromium (the harness of
:mod:`tests.server.test_ui`): a ``%memsearch`` table of shell prompts is not typeset as math,
Forget on a file's hit in the sidebar forgets the file and its Undo brings all of it back, the
explorer's links look like links, and the sidebar's search as you type finds a word from its
first letters. Screenshots go to ``/tmp/shots/`` (looked at, not compared)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

from tests.server.test_ui import (  # noqa: F401 (the two jp_ fixtures override pytest-jupyter's)
    Lab,
    jp_asyncio_loop,
    jp_server_cleanup,
    lab_page,
    running_lab,
    search,
    sync_api,
)
from tests.server.test_ui_lab import run_all, visible_notebook, wait_in_output

pytestmark = pytest.mark.ui

TIL = Path(__file__).resolve().parents[1] / "data" / "til"
STASH = "grab-a-single-file-from-a-stash.md"
MEDIAN = "compute-median-instead-of-average.md"
SHOTS = Path("/tmp/shots")
RUNBOOK = "# Runbook\n\n## Pelican failover\n\nWhen the pelican cluster fails over, drain the queue.\n"
# A cell of math: it shows that MathJax typesets this page, so no math in the table is a fix.
MATH = "Euler: $e^{i\\pi} + 1 = 0$"
SEARCH = "%load_ext nbmemory\n%memsearch stash@{1} README.md"
EXPLORE = "%load_ext nbmemory\n%memexplore compute the median"


def fill_root(root: Path) -> None:
    shutil.copy(TIL / "git" / STASH, root / STASH)
    shutil.copy(TIL / "postgres" / MEDIAN, root / MEDIAN)
    (root / "runbook.md").write_text(RUNBOOK)


def write_notebook(path: Path, *cells: Any) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = list(cells)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with running_lab(tmp_path_factory.mktemp("firstuse"), fill_root) as lab:
        # Written after indexing: the notebooks that search are not in the memory.
        write_notebook(
            lab.root / "work" / "search.ipynb",
            nbformat.v4.new_code_cell(SEARCH),
            nbformat.v4.new_markdown_cell(MATH),
        )
        write_notebook(lab.root / "work" / "explore.ipynb", nbformat.v4.new_code_cell(EXPLORE))
        yield lab


@pytest.fixture(scope="module")
def page(lab: Lab) -> Iterator[Any]:
    SHOTS.mkdir(parents=True, exist_ok=True)
    with lab_page(lab) as page:
        yield page


def open_and_run(page: Any, lab: Lab, path: str, wait_for: str) -> Any:
    """Open the notebook at ``path``, run its cells in a real kernel; the notebook panel once
    ``wait_for`` (a selector) shows in its outputs."""
    page.evaluate(
        f"async () => {{ await window.jupyterapp.commands.execute('docmanager:open', {{path: '{path}'}}); }}"
    )
    notebook = visible_notebook(page)
    notebook.locator(".jp-Cell").first.wait_for(state="visible")
    run_all(page, path)
    wait_in_output(page, lab, notebook.locator(f".jp-OutputArea {wait_for}").first)
    return notebook


def test_shell_prompts_in_the_memsearch_table_are_not_typeset_as_math(page: Any, lab: Lab) -> None:
    notebook = open_and_run(page, lab, "work/search.ipynb", ".nbmemory-hits tr[data-nbmemory-id]")
    # MathJax runs on this page: the markdown cell's formula is typeset.
    notebook.locator(".jp-MarkdownOutput mjx-container").first.wait_for(timeout=60_000)
    table = notebook.locator(".jp-OutputArea .nbmemory-hits").first
    first = table.locator("tr[data-nbmemory-id]").first
    assert STASH in first.locator("a.nbmemory-loc, span.nbmemory-loc").first.get_attribute("title")
    # The typesetter runs after the output is attached: give it the time it took for the formula.
    page.wait_for_timeout(2_000)
    assert table.locator("mjx-container").count() == 0
    summary = first.locator("summary").inner_text()
    assert "$ git checkout stash@{1} -- README.md" in summary, summary
    # The table fits the notebook: no line of math made it wider than the page.
    widths = table.evaluate("e => [e.scrollWidth, e.closest('.jp-OutputArea').clientWidth]")
    assert widths[0] <= widths[1], widths
    notebook.locator(".jp-Cell").first.scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    page.screenshot(path=str(SHOTS / "memsearch-shell-prompts.png"))


def test_forget_on_a_files_hit_in_the_sidebar_forgets_the_file_and_undo_restores_it(
    page: Any, lab: Lab
) -> None:
    query = "compute the median instead of the average"

    def files() -> list[str]:
        return [
            h["path"] for h in lab.api("GET", f"search?q={query.replace(' ', '+')}&chunks=1&k=50")["hits"]
        ]

    hits = search(page, query)
    first = hits.first
    assert first.get_attribute("data-path") == MEDIAN
    before = lab.api("GET", f"search?q={query.replace(' ', '+')}")["hits"][0]
    chunks = sorted([before["id"], *before["more"]])
    assert before["path"] == MEDIAN and len(chunks) > 1
    forget = first.locator(".jp-nbmemory-forget")
    assert forget.inner_text() == "Forget file"
    forget.click()
    undo_row = page.locator(".jp-nbmemory-undo-row")
    sync_api.expect(undo_row).to_contain_text(f"Forgot {MEDIAN} ({len(chunks)} chunks)")
    # The whole file is gone, not only the chunk that stood for it.
    assert MEDIAN not in files()
    page.wait_for_timeout(300)
    page.screenshot(path=str(SHOTS / "sidebar-forget-file.png"))

    undo_row.locator(".jp-nbmemory-undo").click()
    status = page.locator(".jp-nbmemory-status")
    sync_api.expect(status).to_contain_text(f"Restored {MEDIAN} ({len(chunks)} chunks)")
    back = page.locator(".jp-nbmemory-hit").first
    sync_api.expect(back).to_have_attribute("data-path", MEDIAN)
    after = lab.api("GET", f"search?q={query.replace(' ', '+')}")["hits"][0]
    assert sorted([after["id"], *after["more"]]) == chunks
    page.wait_for_timeout(300)
    page.screenshot(path=str(SHOTS / "sidebar-forget-file-undone.png"))

    # Forgotten again, the same search in the sidebar no longer shows the file.
    search(page, query).first.locator(".jp-nbmemory-forget").click()
    sync_api.expect(page.locator(".jp-nbmemory-undo-row")).to_be_visible()
    paths = [h.get_attribute("data-path") for h in search(page, query).all()]
    assert MEDIAN not in paths
    lab.api("POST", "restore", {"ids": chunks})


def test_explorer_links_look_like_links(page: Any, lab: Lab) -> None:
    notebook = open_and_run(page, lab, "work/explore.ipynb", f"a.nbmemory-loc[data-nbmemory-open='{MEDIAN}']")
    link = notebook.locator(f".jp-OutputArea a.nbmemory-loc[data-nbmemory-open='{MEDIAN}']").first
    style = link.evaluate(
        "e => { const s = getComputedStyle(e); const probe = document.createElement('span');"
        " probe.style.color = 'var(--jp-content-link-color)'; e.parentElement.appendChild(probe);"
        " const link = getComputedStyle(probe).color; probe.remove();"
        " return {color: s.color, line: s.textDecorationLine, link,"
        " text: getComputedStyle(e.parentElement).color}; }"
    )
    assert style["color"] == style["link"] and style["color"] != style["text"], style
    assert "underline" in style["line"], style
    link.scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    page.screenshot(path=str(SHOTS / "explorer-links.png"))


def test_sidebar_search_as_you_type_finds_a_word_from_its_first_letters(page: Any) -> None:
    hits = search(page, "pelic")
    first = hits.first
    assert first.get_attribute("data-path") == "runbook.md"
    # Found by its keyword, not only by what the model makes of "pelic".
    assert re.search(r"bm25 #1", first.locator(".jp-nbmemory-ranks").inner_text())
    assert page.locator(".jp-nbmemory-status").get_attribute("title") == "Searched for: pelican"
    # Nothing to search for: said, and nothing asked of the server.
    box = page.locator(".jp-nbmemory-query")
    box.fill("?!")
    box.press("Enter")
    sync_api.expect(page.locator(".jp-nbmemory-status")).to_have_text(
        "Type a word to search for (a letter or a digit)"
    )
    assert page.locator(".jp-nbmemory-hit").count() == 0
