"""The explorer widget, built and driven through its traits and buttons (no browser)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import altair as alt
import ipywidgets as widgets
import pytest

from nbmemory import Memory
from nbmemory.jupyter.notebook_context import Links
from nbmemory.jupyter.widgets import MemoryExplorer

NOTES = [
    ("Deploys need the VPN on; staging uses the 10.2 subnet.", "work", ["ops"]),
    ("The VPN client config lives in the ops repository.", "work", ["ops", "vpn"]),
    ("Buy oat milk and coffee beans.", "home", []),
    ("Kafka consumer lag alerts fire above 5000 messages.", "work", ["kafka"]),
]


@pytest.fixture
def filled(fake_mem: Memory) -> Memory:
    for text, ns, tags in NOTES:
        fake_mem.remember(text, namespace=ns, tags=tags)
    return fake_mem


@pytest.fixture
def explorer(filled: Memory) -> Iterator[MemoryExplorer]:
    widget = MemoryExplorer(filled, debounce=0)
    yield widget
    widget.close()


def texts(explorer: MemoryExplorer) -> list[str]:
    return [row.hit.text for row in explorer.rows]


def wait_for(condition: Any, limit: float = 30.0) -> None:
    """Wait until a background search has landed (a bound, not a timing assertion)."""
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the background search never finished")
        time.sleep(0.01)


def test_typing_a_query_updates_the_results(explorer: MemoryExplorer) -> None:
    assert explorer.rows == [] and "type to search" not in explorer.status
    # Before any search the pane says what to do.
    assert explorer.results_box.children == (explorer.hint,) and "Type in the search box" in explorer.hint.value
    explorer.query = "vpn"
    assert texts(explorer)[:2] and all("VPN" in t for t in texts(explorer)[:2])
    assert explorer.search_box.value == "vpn"
    explorer.search_box.value = "kafka lag"
    assert explorer.query == "kafka lag"
    assert texts(explorer)[0].startswith("Kafka consumer lag")
    assert explorer.status.split(" in ")[0].endswith(" hits")
    explorer.query = ""
    assert explorer.rows == [] and explorer.result is None and explorer.status == "type to search"
    assert explorer.results_box.children == (explorer.hint,)


def test_rows_show_score_and_each_retrievers_rank(explorer: MemoryExplorer) -> None:
    explorer.query = "kafka lag"
    row = explorer.rows[0]
    hit = row.hit
    assert f"{hit.score:.4f}" in row.header.value
    assert f"bm25 #{hit.ranks['bm25']}" in row.header.value
    assert f"vector #{hit.ranks['vector']}" in row.header.value
    assert "<details>" in row.body.value and hit.snippet in row.body.value


def test_a_score_says_what_it_is_made_of(explorer: MemoryExplorer) -> None:
    explorer.query = "kafka lag"
    row = explorer.rows[0]
    parts = explorer.result.parts()[row.hit.id]  # type: ignore[union-attr]
    assert parts and f"title='bm25 {parts['bm25']:.4f} + cosine" in row.header.value
    scale = explorer.results_box.children[0]
    assert isinstance(scale, widgets.HTML) and "x cosine" in scale.value and "keyword share" in scale.value


def test_weak_hits_sit_under_one_line_and_a_flagged_search_folds_its_closest_three(
    explorer: MemoryExplorer, monkeypatch: pytest.MonkeyPatch
) -> None:
    explorer.query = "vpn coffee kafka"
    result = explorer.result
    assert result is not None and len(result.hits) == 4
    for hit in result.hits[2:]:
        hit.weak = True
    explorer.result = None
    explorer.result = result
    children = explorer.results_box.children
    labels = [c for c in children if isinstance(c, widgets.HTML) and "weaker matches" in c.value]
    assert len(labels) == 1 and children.index(labels[0]) == children.index(explorer.rows[2]) - 1
    assert not any("weaker match" in row.header.value for row in explorer.rows)
    explorer.result = replace(result, rejected=True, reason="no confident match: nothing is close")
    notice, fold = explorer.results_box.children
    assert "no confident match" in notice.value and isinstance(fold, widgets.Accordion)
    assert fold.selected_index is None and fold.titles == ("the 3 closest items",)
    assert len(explorer.rows) == 3 and fold.children[0].children == tuple(explorer.rows)


def test_filters_restrict_the_results(explorer: MemoryExplorer) -> None:
    explorer.query = "vpn coffee kafka"
    assert len(explorer.rows) == 4
    explorer.ns_picker.value = "home"
    assert explorer.namespace == "home" and texts(explorer) == ["Buy oat milk and coffee beans."]
    explorer.namespace = None
    explorer.tag_picker.value = ["ops"]
    assert explorer.tags == ["ops"] and len(explorer.rows) == 2
    explorer.tags = ["ops", "vpn"]
    assert texts(explorer) == ["The VPN client config lives in the ops repository."]
    explorer.tags = []
    explorer.kind_picker.value = ["markdown"]
    assert explorer.kinds == ["markdown"] and explorer.rows == []
    explorer.kinds = ["memory"]
    assert len(explorer.rows) == 4
    explorer.k_box.value = 2
    assert explorer.top_k == 2 and len(explorer.rows) == 2
    explorer.since = "1d"
    assert len(explorer.rows) == 2
    explorer.since_box.value = "2999-01-01"
    assert explorer.rows == []


def test_a_bad_filter_shows_a_message_instead_of_raising(explorer: MemoryExplorer) -> None:
    explorer.query = "vpn"
    before = explorer.result
    explorer.since = "yesterday"
    assert "ISO date" in explorer.status and explorer.result is before


def test_namespace_picker_lists_the_memorys_namespaces(explorer: MemoryExplorer) -> None:
    assert [value for _, value in explorer.ns_picker.options] == ["", "home", "work"]
    assert explorer.ns_picker.label == "(all)" and explorer.namespace is None
    explorer.ns_picker.value = "work"
    assert explorer.namespace == "work"
    explorer.namespace = None
    assert explorer.ns_picker.value == ""


def test_forget_button_removes_the_item_from_results_and_memory(
    explorer: MemoryExplorer, filled: Memory
) -> None:
    explorer.query = "vpn"
    gone = explorer.rows[0].hit.id
    explorer.rows[0].forget_button.click()
    assert gone not in [row.hit.id for row in explorer.rows]
    assert gone not in filled.search("vpn").ids
    assert "forgot" in explorer.status_line.value


def test_undo_after_forget_brings_the_item_back_and_then_goes_away(
    explorer: MemoryExplorer, filled: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    explorer.query = "vpn"
    gone = explorer.rows[0].hit.id
    assert explorer.undo_button.layout.display == "none"
    explorer.rows[0].forget_button.click()
    assert explorer.undo_button.layout.display != "none" and explorer.forgotten == [gone]
    explorer.undo_button.click()
    assert gone in [row.hit.id for row in explorer.rows]
    assert "restored #" in explorer.status_line.value and explorer.undo_button.layout.display == "none"
    assert gone in filled.search("vpn").ids
    # The offer lasts UNDO_SECONDS; then the button goes.
    monkeypatch.setattr("nbmemory.jupyter.widgets.UNDO_SECONDS", 0.05)
    explorer.rows[0].forget_button.click()
    wait_for(lambda: explorer.undo_button.layout.display == "none")
    assert explorer.forgotten == [] and explorer.undo() == []


def test_pin_and_raise_importance_buttons(explorer: MemoryExplorer, filled: Memory) -> None:
    explorer.query = "kafka lag"
    row = explorer.rows[0]
    item_id = row.hit.id
    row.pin_button.click()
    assert filled.get(item_id).pinned and row.pin_button.description == "Unpin"
    row.pin_button.click()
    assert not filled.get(item_id).pinned and row.pin_button.description == "Pin"
    row.raise_button.click()
    assert filled.get(item_id).importance == pytest.approx(0.6)
    assert "importance 0.6" in row.header.value
    for _ in range(6):
        row.raise_button.click()
    assert filled.get(item_id).importance == 1.0


def test_explain_panel_and_chart(explorer: MemoryExplorer) -> None:
    explorer.query = "vpn"
    assert "[bm25]" in explorer.explain_html.value and "[convex]" in explorer.explain_html.value
    assert isinstance(explorer.chart, alt.Chart)
    assert explorer.chart.to_dict()["encoding"]["x"]["field"] == "bm25_rank"
    # The Chart tab holds an offline JupyterChart showing the same chart.
    assert isinstance(explorer.chart_view, alt.JupyterChart)
    assert explorer.chart_view.spec["mark"]["type"] == "point"
    explorer.chart_picker.value = "contribution"
    assert explorer.chart_kind == "contribution"
    assert explorer.chart.to_dict()["encoding"]["x2"]["field"] == "end"
    explorer.chart_kind = "scores"
    assert explorer.chart.to_dict()["encoding"]["column"]["field"] == "retriever"
    explorer.query = ""
    assert explorer.chart is None and explorer.chart_view.spec is None


def test_stored_html_is_escaped_in_the_widget(fake_mem: Memory) -> None:
    fake_mem.remember("vpn <script>alert(1)</script> <img src=x onerror=alert(2)>", tags=["<i>t</i>"])
    explorer = MemoryExplorer(fake_mem, debounce=0, query="vpn")
    try:
        row = explorer.rows[0]
        shown = row.header.value + row.body.value + explorer.explain_html.value
        assert "<script>" not in shown and "<img" not in shown and "<i>" not in shown
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in row.body.value
    finally:
        explorer.close()


def test_widget_links_open_in_jupyterlab(fake_mem: Memory, tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "ops.md").write_text(
        "# Ops\n\n## VPN\n\nThe VPN gateway is vpn.example.org.\n", encoding="utf-8"
    )
    fake_mem.index(notes)
    links = Links(tmp_path, tmp_path, "/")
    explorer = MemoryExplorer(fake_mem, debounce=0, query="vpn gateway", links=links)
    try:
        header = explorer.rows[0].header.value
        assert "href='/lab/tree/notes/ops.md'" in header and "target='_blank'" in header
        assert f"data-nbmemory-path='{notes / 'ops.md'}'" in header
    finally:
        explorer.close()


def test_debounced_search_runs_once_off_the_main_thread(filled: Memory) -> None:
    calls: list[tuple[str, str]] = []
    search = filled.search

    def recording(query: str, **kwargs: Any) -> Any:
        calls.append((query, threading.current_thread().name))
        return search(query, **kwargs)

    filled.search = recording  # type: ignore[method-assign]
    explorer = MemoryExplorer(filled, debounce=0.2)
    try:
        for partial in ("k", "ka", "kaf", "kafka"):
            explorer.query = partial
        wait_for(lambda: " hits in " in explorer.status or " hit in " in explorer.status)
        assert [q for q, _ in calls] == ["kafka"]
        assert calls[0][1] != threading.main_thread().name
        assert texts(explorer)[0].startswith("Kafka")
    finally:
        explorer.close()


def test_a_search_overtaken_by_a_newer_one_is_dropped(explorer: MemoryExplorer) -> None:
    explorer.query = "kafka"
    newest = explorer.result
    stale_seq = explorer._seq - 1
    explorer._search(stale_seq)
    assert explorer.result is newest


def test_search_now_and_initial_query(filled: Memory) -> None:
    explorer = MemoryExplorer(filled, debounce=10, query="coffee", namespace="home", top_k=3)
    try:
        assert texts(explorer) == ["Buy oat milk and coffee beans."]
        assert explorer.k_box.value == 3 and explorer.ns_picker.value == "home"
        result = explorer.search_now()
        assert result is not None and result.ids == explorer.result.ids  # type: ignore[union-attr]
    finally:
        explorer.close()


def test_chart_tab_draws_offline(explorer: MemoryExplorer) -> None:
    explorer.query = "vpn"
    state = explorer.chart_view.get_state()
    assert "esm.sh" not in state["_esm"] and not re.search(
        r"""(?:from|import)\s*\(?\s*["']https?:""", state["_esm"]
    )
    assert state["spec"]["mark"]["type"] == "point"
