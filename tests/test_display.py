"""How grouped and weak hits read in a notebook table and in a terminal."""

from __future__ import annotations

from nbmemory.display import HitTable
from nbmemory.items import Hit


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
    table = HitTable([_hit(1, [7, 8], False), _hit(2, [9], False, cell=3), _hit(3, [], True)])
    html = table._repr_html_()
    assert "+2 more in this file" in html and "+1 more cell in this file" in html
    assert html.index("weaker matches") < html.index("data-nbmemory-id='3'")
    assert html.count("weaker matches") == 1
    text = repr(table)
    assert "+2 more in this file" in text and text.count("more") == 2
