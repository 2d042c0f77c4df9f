"""How grouped and weak hits read in a notebook table and in a terminal."""

from __future__ import annotations

from nbmemory.items import Hit
from nbmemory.jupyter.display import HitTable


def _hit(i: int, more: list[int], weak: bool, cell: int | None = None) -> Hit:
    return Hit(
        id=i,
        score=1.0 / i,
        text=f"text {i}",
        snippet=f"snippet {i}",
        source=f"/notes/n{i}.ipynb" if cell is not None else f"/notes/n{i}.md",
        kind="notebook" if cell is not None else "markdown",
        namespace="default",
        cell_index=cell,
        more=more,
        weak=weak,
    )


def test_grouped_hits_count_their_other_chunks_and_weak_ones_sit_under_a_line() -> None:
    table = HitTable([_hit(1, [7, 8], False), _hit(2, [9], False, cell=3), _hit(3, [], True), _hit(4, [], True)])
    html = table._repr_html_()
    assert "+2 more in this file" in html and "+1 more cell in this file" in html
    assert html.index("weaker matches") < html.index("data-nbmemory-id='3'")
    # One line heads them, saying what they lack; the rows do not repeat it.
    assert html.count("weaker match") == 1
    assert "weaker matches: far in meaning, and holding under half of the query&#x27;s keywords" in html
    assert "no retriever supports" not in html
    text = repr(table)
    assert "+2 more in this file" in text and text.count("more") == 2
    assert text.count("weaker match") == 1 and text.index("weaker") < text.index("#3 ")


def test_a_flagged_search_folds_its_three_closest_items() -> None:
    hits = [_hit(i, [], i > 5) for i in range(1, 11)]
    table = HitTable(hits, title="no confident match: x for 'q'", flagged=True)
    html = table._repr_html_()
    assert html.index("no confident match") < html.index("<details class='nbmemory-closest'>")
    assert "<summary>show the 3 closest items</summary>" in html
    assert html.count("<tr data-nbmemory-id") == 3 and "weaker" not in html
    assert repr(table).count("snippet") == 3


def test_scores_say_what_they_are_made_of() -> None:
    hits = [_hit(1, [], False), _hit(2, [], False)]
    parts = {1: {"bm25": 0.25, "identifier": 0.0, "cosine": 0.5, "passage": 0.25}}
    html = HitTable(hits, parts=parts, scale="score = 0.8 x cosine + 0.2 x keyword share")._repr_html_()
    assert "title='bm25 0.2500 + cosine 0.5000 + passage 0.2500'>1.0000<" in html
    assert "<th title='score = 0.8 x cosine + 0.2 x keyword share'>score</th>" in html
    assert "hover a score for its parts" in html


def test_cells_count_from_one_and_links_carry_the_place_to_open() -> None:
    from pathlib import Path

    from nbmemory.jupyter.notebook_context import Links

    notebook = _hit(1, [], False, cell=3)
    note = Hit(
        id=2, score=0.5, text="t", snippet="s", source="/root/notes/n.md", kind="markdown",
        namespace="default", line_start=12, line_end=30,
    )  # fmt: skip
    links = Links(Path("/root"), Path("/root"))
    html = HitTable([notebook, note], links=links)._repr_html_()
    # A notebook is named with its folder, as every other file.
    assert "/notes/n1.ipynb, cell 4<" in html and "data-nbmemory-cell='3'" in html
    assert "data-nbmemory-open='notes/n.md'" in html
    assert "data-nbmemory-line='12'" in html and "data-nbmemory-line-end='30'" in html
    history = _hit(3, [], False, cell=5)
    history.cell_id = "in-5"
    assert "n3.ipynb, In [5]" in repr(HitTable([history]))
