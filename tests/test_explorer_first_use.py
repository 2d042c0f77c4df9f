"""The explorer and the notebook views as a new user meets them (widgets built and driven through
their buttons, no browser; the browser checks are in tests/server/test_ui_first_use.py): Forget on
a file's hit forgets the file and Undo brings all of it back, links look like links, and a tier
says what it means."""

from __future__ import annotations

import html
from dataclasses import replace
from pathlib import Path

import pytest

from nbmemory import Memory
from nbmemory.items import TIER_MEANING
from nbmemory.jupyter.display import HitTable, SearchHits
from nbmemory.jupyter.notebook_context import Links
from nbmemory.jupyter.widgets import MemoryExplorer

RUNBOOK = "# Runbook\n\n" + "".join(
    f"## Median step {i}\n\nCompute the median instead of the average, step {i}.\n\n" for i in range(5)
)


@pytest.fixture
def notes(fake_mem: Memory, tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "median.md").write_text(RUNBOOK)
    (folder / "other.md").write_text("# Other\n\nThe average of the lunch orders.\n")
    fake_mem.index(folder)
    fake_mem.remember("compute the median of the pelican counts")
    return folder


def test_forget_on_a_files_hit_forgets_the_file_and_undo_brings_it_all_back(
    fake_mem: Memory, notes: Path
) -> None:
    explorer = MemoryExplorer(fake_mem, debounce=0, query="compute the median instead of the average")
    try:
        row = next(r for r in explorer.rows if r.hit.source == str(notes / "median.md"))
        chunks = sorted([row.hit.id, *row.hit.more])
        assert len(chunks) == 5
        assert (
            row.forget_button.description == "Forget file" and "all its chunks" in row.forget_button.tooltip
        )
        remembered = next(r for r in explorer.rows if r.hit.source is None)
        assert remembered.forget_button.description == "Forget"

        row.forget_button.click()
        # The file is gone, not just the chunk that stood for it.
        assert str(notes / "median.md") not in [r.hit.source for r in explorer.rows]
        assert "forgot median.md (5 chunks)" in explorer.status_line.value
        assert sorted(explorer.forgotten) == chunks
        assert not set(chunks) & set(fake_mem.search("compute the median", k=50).ids)

        explorer.undo_button.click()
        back = next(r for r in explorer.rows if r.hit.source == str(notes / "median.md"))
        assert sorted([back.hit.id, *back.hit.more]) == chunks
        assert "restored #" in explorer.status_line.value
    finally:
        explorer.close()


def test_explorer_links_look_like_links(fake_mem: Memory, notes: Path) -> None:
    links = Links(root=notes.parent, notebook_dir=notes.parent)
    explorer = MemoryExplorer(fake_mem, debounce=0, links=links, query="median")
    try:
        header = explorer.rows[0].header.value
        assert "<a class='nbmemory-loc'" in header
        # JupyterLab styles no link inside a widget: the link carries its own colour and underline.
        assert "color:var(--jp-content-link-color" in header and "text-decoration:underline" in header
    finally:
        explorer.close()


def test_a_tier_says_what_it_means(fake_mem: Memory, notes: Path) -> None:
    result = fake_mem.search("compute the median instead of the average")
    result.hits = [replace(h, tier="low" if i == 0 else "none") for i, h in enumerate(result.hits)]
    table = HitTable(result.hits, scale="score = ...")._repr_html_()
    assert "<small class='nbmemory-tier' title='tier (high, medium, low): how close in meaning" in table
    meaning = html.escape(TIER_MEANING)  # under the table, with the scale
    assert ">low</small>" in table and meaning in table
    assert meaning in SearchHits(result)._repr_html_()

    explorer = MemoryExplorer(fake_mem, debounce=0)
    try:
        explorer.result = result
        assert ">low</small>" in explorer.rows[0].header.value
        legend = [c.value for c in explorer.results_box.children if hasattr(c, "value")]
        assert any(meaning in text for text in legend)
    finally:
        explorer.close()


def test_no_view_is_typeset_as_math(fake_mem: Memory) -> None:
    # Two `$` in a snippet (a shell prompt) are text: every view asks MathJax to leave it alone.
    fake_mem.remember("$ git checkout stash@{1} -- README.md\n$ git stash list")
    result = fake_mem.search("git checkout stash")
    html = SearchHits(result)._repr_html_()
    assert html.startswith("<div class='nbmemory-hits mathjax_ignore tex2jax_ignore'>")
    assert "$ git checkout stash@{1} -- README.md" in html
