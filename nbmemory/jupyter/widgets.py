"""The memory explorer: an ipywidgets panel to search as you type, filter, inspect and curate.

:class:`MemoryExplorer` keeps its state in traitlets (``query``, ``namespace``, ``kinds``,
``since``, ``tags``, ``top_k``, ``result``), linked to the input widgets, so code and tests drive it
the same way a user does. A change of query or filter starts a search after ``debounce`` seconds of
quiet, in a timer thread, so typing never waits on a search in the kernel's main thread; a search
overtaken by a newer one is dropped. With ``debounce=0`` every change searches at once in the
calling thread (what tests use), and :meth:`MemoryExplorer.search_now` searches on demand.
"""

from __future__ import annotations

import html
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets
from traitlets import Any as AnyTrait
from traitlets import CaselessStrEnum, Float, Instance, Integer, List, Unicode, observe

from nbmemory.api import SearchResult
from nbmemory.errors import NbMemoryError
from nbmemory.forget_source import forget_source
from nbmemory.items import TIER_MEANING, Hit
from nbmemory.jupyter import plots
from nbmemory.jupyter.display import location_html, more_label, parts_text, tier_html
from nbmemory.jupyter.notebook_context import Links
from nbmemory.options import CLOSEST, KINDS, WEAK_LABEL, plural, score_scale, search_arguments

if TYPE_CHECKING:
    from nbmemory.memory import Memory
    from nbmemory.remote.shared import SharedMemory

__all__ = ["MemoryExplorer", "ResultRow"]

CHARTS = ("ranks", "scores", "contribution")
IMPORTANCE_STEP = 0.1
#: How long the Undo button stays after a forget (the sidebar's Undo lasts as long).
UNDO_SECONDS = 10.0
HINT = (
    "<div style='padding:6px'><b>Type in the search box above</b> to search your memory: the notes, "
    "notebooks and code you indexed and what you remembered. Filters narrow a search; "
    "<i>Explain</i> shows how the ranking was made and <i>Chart</i> draws it.</div>"
)


class ResultRow(widgets.VBox):
    """One hit: header with score, tier and retriever ranks, expandable text, and action buttons.

    A hit from a file stands for the file (results come one per file): its Forget forgets the
    file, every chunk of it; a remembered text's forgets the item.

    Parameters
    ----------
    hit:
        The hit shown.
    position:
        Its 1-based rank in the results.
    explorer:
        The explorer whose actions the buttons call.
    """

    hit = Instance(Hit)

    def __init__(
        self, hit: Hit, position: int, explorer: MemoryExplorer, parts: Mapping[str, float] | None = None
    ) -> None:
        self.explorer = explorer
        self.position = position
        self.parts = dict(parts or {})
        self.header = widgets.HTML()
        self.body = widgets.HTML(_body_html(hit))
        self.forget_button = widgets.Button(
            description="Forget file" if hit.source else "Forget",
            tooltip=_forget_tooltip(hit),
            icon="trash",
            button_style="danger",
        )
        self.pin_button = widgets.Button(description="Pin", icon="thumb-tack")
        self.raise_button = widgets.Button(description="Importance +", icon="arrow-up")
        for button in (self.forget_button, self.pin_button, self.raise_button):
            button.layout = widgets.Layout(width="auto")
        self.forget_button.on_click(
            lambda _: explorer.forget(self.hit.id, whole_source=bool(self.hit.source))
        )
        self.pin_button.on_click(lambda _: explorer.toggle_pin(self.hit.id))
        self.raise_button.on_click(lambda _: explorer.raise_importance(self.hit.id))
        buttons = widgets.HBox([self.forget_button, self.pin_button, self.raise_button])
        super().__init__(
            [self.header, self.body, buttons],
            hit=hit,
            # flex "0 0 auto": in the scrolling results box a row keeps its height instead of shrinking.
            layout=widgets.Layout(
                border="1px solid var(--jp-border-color2, #ddd)",
                padding="4px",
                margin="2px 0",
                flex="0 0 auto",
            ),
        )

    def close(self) -> None:
        """Close the row and the widgets inside it."""
        for child in (self.header, self.body, self.forget_button, self.pin_button, self.raise_button):
            child.close()
        for child in self.children:
            child.close()
        super().close()

    @observe("hit")
    def _hit_changed(self, change: dict[str, Any]) -> None:
        if hasattr(self, "header"):
            self._render_header()

    def _render_header(self) -> None:
        hit = self.hit
        ranks = " · ".join(
            f"{name} #{hit.ranks[name]}" if name in hit.ranks else f"{name} –" for name in ("bm25", "vector")
        )
        tags = "".join(f" <code>#{html.escape(t)}</code>" for t in hit.tags)
        tip = parts_text(self.parts)
        score = f"<b title='{html.escape(tip, quote=True)}'>{hit.score:.4f}</b>" if tip else f"<b>{hit.score:.4f}</b>"
        tier = tier_html(hit)
        self.header.value = (
            f"<b>{self.position}.</b> score {score}{' ' + tier if tier else ''} <small>({ranks})</small> · "
            f"{location_html(hit, self.explorer.links, widget=True, short=True)}<br>"
            f"<small>{html.escape(hit.kind)} · {html.escape(hit.namespace)} · "
            f"importance {hit.importance:.1f} · #{int(hit.id)}"
            f"{' · ' + html.escape(more_label(hit)) if hit.more else ''}</small>{tags}"
        )


def _forget_tooltip(hit: Hit) -> str:
    if not hit.source:
        return "Forget this item: it never appears in results again (Undo brings it back)"
    also = f", the {len(hit.more)} more that matched among them" if hit.more else ""
    return f"Forget this file: all its chunks{also} (Undo brings them back)"


def _body_html(hit: Hit) -> str:
    heading = f"<div><b>{html.escape(hit.heading)}</b></div>" if hit.heading else ""
    return (
        f"{heading}<details><summary>{html.escape(hit.snippet)}</summary>"
        "<div style='white-space:pre-wrap;font-family:var(--jp-code-font-family,monospace)'>"
        f"{html.escape(hit.text)}</div></details>"
    )


class MemoryExplorer(widgets.VBox):
    """Search box, filters, ranked results with actions, the ranking trace and a diagnostics chart.

    Parameters
    ----------
    memory:
        The :class:`~nbmemory.Memory` to explore.
    query, namespace, kinds, since, tags, top_k:
        Initial search and filters (all traitlets; setting one searches again).
    debounce:
        Seconds of quiet after a change before searching, in a timer thread; 0 searches at once in
        the calling thread.
    links:
        How sources become links (see :func:`nbmemory.jupyter.notebook_context.links_for`).
    """

    # Python-side state; the child widgets carry what the browser shows, so none of it is synced.
    query = Unicode("")
    namespace = Unicode(None, allow_none=True)
    kinds = List(Unicode())
    since = Unicode("")
    tags = List(Unicode())
    top_k = Integer(10)
    debounce = Float(0.3)
    chart_kind = CaselessStrEnum(CHARTS, default_value="ranks")
    result = Instance(SearchResult, allow_none=True)
    chart = AnyTrait(None, allow_none=True)
    status = Unicode("")

    def __init__(self, memory: Memory | SharedMemory, *, links: Links | None = None, **kwargs: Any) -> None:
        self.memory = memory
        self.links = links
        self._ready = False
        self._notice = ""
        self._timer: threading.Timer | None = None
        self._undo_timer: threading.Timer | None = None
        #: What the last Forget forgot, while its Undo button shows.
        self.forgotten: list[int] = []
        self._seq = 0
        self._lock = threading.RLock()
        self.rows: list[ResultRow] = []
        self._extras: list[widgets.Widget] = []

        self.search_box = widgets.Text(
            placeholder="search your memory…", continuous_update=True, layout=widgets.Layout(flex="1")
        )
        narrow = {"description_width": "initial"}
        self.k_box = widgets.BoundedIntText(
            min=1, max=200, description="k", style=narrow, layout=widgets.Layout(width="120px")
        )
        # "" stands for every namespace: a Dropdown shows a value of None as no selection at all.
        self.ns_picker = widgets.Dropdown(
            description="namespace", style=narrow, layout=widgets.Layout(width="200px")
        )
        # A TagsInput draws no box of its own: the border shows where to type.
        boxed = {"width": "160px", "border": "1px solid var(--jp-border-color1, #bbb)", "min_height": "28px"}
        self.kind_picker = widgets.TagsInput(
            allowed_tags=list(KINDS), allow_duplicates=False, layout=widgets.Layout(**boxed)
        )
        self.since_box = widgets.Combobox(
            options=["1d", "7d", "30d", "365d"],
            placeholder="e.g. 30d",
            description="since",
            ensure_option=False,
            style=narrow,
            layout=widgets.Layout(width="180px"),
        )
        self.tag_picker = widgets.TagsInput(
            allowed_tags=[], allow_duplicates=False, layout=widgets.Layout(**boxed)
        )
        self.status_line = widgets.HTML()
        self.undo_button = widgets.Button(
            description="Undo",
            icon="undo",
            tooltip="Bring back what was just forgotten",
            layout=widgets.Layout(width="auto", display="none"),
        )
        self.undo_button.on_click(lambda _: self.undo())
        # What the results pane shows before a search: what to do, not an empty box.
        self.hint = widgets.HTML(HINT)
        self.results_box = widgets.VBox([self.hint], layout=widgets.Layout(max_height="460px", overflow="auto"))
        self.explain_html = widgets.HTML(layout=widgets.Layout(max_height="460px", overflow="auto"))
        self.chart_picker = widgets.ToggleButtons(options=list(CHARTS), style={"button_width": "auto"})
        self.chart_view = plots.chart_widget()
        self.tabs = widgets.Tab(
            [self.results_box, self.explain_html, widgets.VBox([self.chart_picker, self.chart_view])],
            titles=("Results", "Explain", "Chart"),
        )
        filters = widgets.HBox(
            [
                self.ns_picker,
                widgets.HTML("&nbsp;kind"),
                self.kind_picker,
                self.since_box,
                widgets.HTML("&nbsp;tags"),
                self.tag_picker,
            ],
            layout=widgets.Layout(flex_flow="row wrap", align_items="center"),
        )
        status = widgets.HBox(
            [self.status_line, self.undo_button], layout=widgets.Layout(align_items="center")
        )
        super().__init__([widgets.HBox([self.search_box, self.k_box]), filters, status, self.tabs])
        self._refresh_namespaces(kwargs.get("namespace"))
        # Traits first, then the links: the initial values then flow from traits to widgets.
        with self.hold_trait_notifications():
            for name, value in kwargs.items():
                setattr(self, name, value)
        self.k_box.value = self.top_k
        for source, target in (
            ((self.search_box, "value"), "query"),
            ((self.k_box, "value"), "top_k"),
            ((self.kind_picker, "value"), "kinds"),
            ((self.since_box, "value"), "since"),
            ((self.tag_picker, "value"), "tags"),
            ((self.chart_picker, "value"), "chart_kind"),
        ):
            widgets.link((self, target), source)
        widgets.link(
            (self, "namespace"), (self.ns_picker, "value"), transform=(lambda v: v or "", lambda v: v or None)
        )
        self._ready = True
        if self.query.strip():
            self.search_now()

    # -- searching --------------------------------------------------------------------------
    @observe("query", "namespace", "kinds", "since", "tags", "top_k")
    def _search_changed(self, change: dict[str, Any]) -> None:
        if getattr(self, "_ready", False):
            self.schedule()

    def schedule(self) -> None:
        """Search after ``debounce`` seconds of quiet (at once when ``debounce`` is 0)."""
        with self._lock:
            self._seq += 1
            seq = self._seq
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self.debounce > 0:
                self._timer = threading.Timer(self.debounce, self._search, args=(seq,))
                self._timer.daemon = True
                self._timer.start()
                self.status_line.value = "<small>searching…</small>"
                return
        self._search(seq)

    def search_now(self) -> SearchResult | None:
        """Search with the current query and filters in this thread; returns the result."""
        with self._lock:
            self._seq += 1
            seq = self._seq
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        return self._search(seq)

    def _search(self, seq: int) -> SearchResult | None:
        query = self.query.strip()
        if not query:
            self._apply(seq, None, "<small>type to search</small>")
            return None
        try:
            # As-you-type searches are not logged: partial queries would skew retrieval counters.
            values = {
                "k": self.top_k,
                "ns": self.namespace or None,
                "kind": list(self.kinds),
                "tag": list(self.tags),
                "since": self.since.strip() or None,
            }
            result = self.memory.search(query, **search_arguments(query, values, most=None), log=False)
        except NbMemoryError as exc:
            self._apply(seq, self.result, f"<span style='color:#b00'>{html.escape(str(exc))}</span>")
            return None
        ms = result.trace.total_ms
        self._apply(seq, result, f"<small>{plural(len(result.hits), 'hit')} in {ms:.0f} ms</small>")
        return result

    def _apply(self, seq: int, result: SearchResult | None, status: str) -> None:
        with self._lock:
            # A newer search was started while this one ran: its result wins.
            if seq != self._seq:
                return
            self.result = result
            if self._notice:
                status = f"<small>{html.escape(self._notice)} · </small>{status}"
                self._notice = ""
            # The status goes last: once it changes, the results are on show.
            self.status_line.value = status
            self.status = _strip_tags(status)

    @observe("result")
    def _render(self, change: dict[str, Any]) -> None:
        result: SearchResult | None = change["new"]
        hits = result.hits if result is not None else []
        flagged = result is not None and result.rejected
        if flagged:
            hits = hits[:CLOSEST]
        parts = result.parts() if result is not None else {}
        old, self.rows = self.rows, [ResultRow(hit, i, self, parts.get(hit.id)) for i, hit in enumerate(hits, start=1)]
        extras = self._extras
        children = self._results_children(result, flagged)
        self.results_box.children = tuple(children)
        # Lines and folds made for the last results go with them (the hint stays for reuse).
        self._extras = [c for c in children if c is not self.hint and not isinstance(c, ResultRow)]
        for row in old:
            row.close()
        for extra in extras:
            for child in getattr(extra, "children", ()):
                child.close()  # the fold's box of rows
            extra.close()
        self.explain_html.value = (
            f"<pre>{html.escape(result.explain(top=self.top_k))}</pre>" if result is not None else ""
        )
        self._render_chart()

    def _results_children(self, result: SearchResult | None, flagged: bool) -> list[widgets.Widget]:
        """The results pane: a hint before any search; a flagged search's line with its closest
        few folded under it; else what a score is, then the rows, the weak ones under one line."""
        if result is None:
            return [self.hint]
        if flagged:
            notice = widgets.HTML(f"<b>{html.escape(result.reason)}</b>", layout=widgets.Layout(flex="0 0 auto"))
            closest = widgets.Accordion([widgets.VBox(self.rows)], titles=(f"the {plural(len(self.rows), 'closest item')}",))
            closest.selected_index = None
            return [notice, closest]
        children: list[widgets.Widget] = []
        legend = [f"{score_scale(result)}; hover a score for its parts"] if score_scale(result) else []
        if any(row.hit.tier != "none" for row in self.rows):
            legend.append(TIER_MEANING)
        if legend and self.rows:
            children.append(widgets.HTML(f"<small>{html.escape('. '.join(legend))}</small>"))
        for row in self.rows:
            if row.hit.weak and not any(r.hit.weak for r in self.rows[: row.position - 1]):
                children.append(widgets.HTML(f"<i>{html.escape(WEAK_LABEL)}</i>", layout=widgets.Layout(flex="0 0 auto")))
            children.append(row)
        return children

    @observe("chart_kind")
    def _chart_kind_changed(self, change: dict[str, Any]) -> None:
        if getattr(self, "_ready", False):
            self._render_chart()

    def _render_chart(self) -> None:
        result = self.result
        self.chart = None
        if result is not None and result.hits:
            make = {
                "ranks": plots.rank_scatter,
                "scores": plots.score_distributions,
                "contribution": plots.contribution,
            }[self.chart_kind]
            self.chart = make(result)
        # A JupyterChart widget: interactive, its JavaScript bundled offline (no CDN, no Output
        # widget, which misroutes output from the search thread).
        self.chart_view.chart = self.chart

    # -- actions ----------------------------------------------------------------------------
    def forget(self, item_id: int, whole_source: bool = False) -> list[int]:
        """Forget an item, or with ``whole_source`` every chunk of its file (what Forget on a
        file's hit does: :func:`~nbmemory.forget_source.forget_source`); it leaves the results at
        once, then the search runs again. An Undo button shows for :data:`UNDO_SECONDS` and
        brings back all that was forgotten. Returns the ids forgotten."""
        ids = forget_source(self.memory, item_id) if whole_source else list(self.memory.forget(item_id))
        ids = ids or [int(item_id)]
        with self._lock:
            hits = self.result.hits if self.result is not None else []
            hit = next((h for h in hits if h.id == item_id), None)
            source = hit.source if whole_source and hit is not None else None
            if self.result is not None:
                kept = [h for h in hits if h.id not in ids and (source is None or h.source != source)]
                self.result = SearchResult(self.result.query, kept, self.result.trace)
            if source:
                self._notice = f"forgot {Path(source).name} ({plural(len(ids), 'chunk')})"
            else:
                self._notice = f"forgot #{int(item_id)}"
            self.status_line.value = f"<small>{html.escape(self._notice)}</small>"
            self.forgotten = [int(i) for i in ids]
            self._offer_undo(True)
        self.schedule()
        return ids

    def undo(self) -> list[int]:
        """Bring back what the last Forget forgot, and search again; returns the ids restored."""
        with self._lock:
            ids, self.forgotten = self.forgotten, []
            self._offer_undo(False)
        if not ids:
            return []
        restored = self.memory.restore(ids)
        with self._lock:
            self._notice = f"restored #{', #'.join(map(str, restored))}" if restored else "nothing to restore"
            self.status_line.value = f"<small>{html.escape(self._notice)}</small>"
        self.schedule()
        return restored

    def _offer_undo(self, show: bool) -> None:
        """Show the Undo button (for :data:`UNDO_SECONDS`), or hide it (caller holds the lock)."""
        if self._undo_timer is not None:
            self._undo_timer.cancel()
            self._undo_timer = None
        self.undo_button.layout.display = "" if show else "none"
        if show:
            self._undo_timer = threading.Timer(UNDO_SECONDS, self._undo_expired)
            self._undo_timer.daemon = True
            self._undo_timer.start()

    def _undo_expired(self) -> None:
        with self._lock:
            self.forgotten = []
            self._offer_undo(False)

    def toggle_pin(self, item_id: int) -> bool:
        """Pin an unpinned item or unpin a pinned one; returns the new state."""
        item = self.memory.get(item_id, touch=False)
        updated = self.memory.update(item_id, pinned=not item.pinned)
        for row in self.rows:
            if row.hit.id == item_id:
                row.pin_button.description = "Unpin" if updated.pinned else "Pin"
        self.status_line.value = (
            f"<small>{'pinned' if updated.pinned else 'unpinned'} #{int(item_id)}</small>"
        )
        return updated.pinned

    def raise_importance(self, item_id: int, step: float = IMPORTANCE_STEP) -> float:
        """Raise an item's importance by ``step`` (capped at 1); returns the new importance."""
        item = self.memory.get(item_id, touch=False)
        updated = self.memory.update(item_id, importance=round(min(1.0, item.importance + step), 3))
        for row in self.rows:
            if row.hit.id == item_id:
                row.hit = _with_importance(row.hit, updated.importance)
        self.status_line.value = f"<small>#{int(item_id)} importance {updated.importance:.1f}</small>"
        return updated.importance

    def close(self) -> None:
        """Stop a pending search and close the widget and its parts."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            if self._undo_timer is not None:
                self._undo_timer.cancel()
            for row in self.rows:
                row.close()
        super().close()

    def _refresh_namespaces(self, wanted: str | None = None) -> None:
        try:
            names = sorted(self.memory.stats()["by_namespace"])
        except NbMemoryError:
            names = []
        if wanted and wanted not in names:
            names.append(wanted)
        self.ns_picker.options = [("(all)", "")] + [(n, n) for n in names]


def _with_importance(hit: Hit, importance: float) -> Hit:
    from dataclasses import replace

    return replace(hit, importance=importance)


def _strip_tags(text: str) -> str:
    import re

    return html.unescape(re.sub(r"<[^>]+>", "", text))
