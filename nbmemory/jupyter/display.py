"""Rich views of hits, items and stats: escaped HTML for notebooks, plain text for terminals.

Every stored string goes through :func:`html.escape` before it reaches HTML, so a memory holding
``<script>`` or ``<img onerror=...>`` renders as text, and every view is marked for MathJax to
leave alone (:data:`NO_MATH`), so a snippet holding two ``$`` (a shell prompt, an f-string) is not
typeset as math. Hits from files carry
``data-nbmemory-path`` / ``data-nbmemory-cell`` / ``data-nbmemory-cell-id`` attributes (for the
JupyterLab extension) and, when the Jupyter server root is known, an ``<a href>`` JupyterLab opens.
"""

from __future__ import annotations

import html
import os
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from nbmemory.items import TIER_MEANING, Hit, Item
from nbmemory.jupyter.notebook_context import Links
from nbmemory.options import CLOSEST, WEAK_LABEL, plural, score_scale
from nbmemory.own_output import mimebundle

__all__ = [
    "NO_MATH",
    "HitTable",
    "ItemView",
    "SearchHits",
    "StatsView",
    "TextBlock",
    "location_html",
    "location_label",
    "parts_text",
]

_TD = "style='text-align:left;vertical-align:top'"
_NUM = "style='text-align:right;vertical-align:top;white-space:nowrap'"
#: Classes that tell MathJax to leave an element's text alone: ``mathjax_ignore`` for MathJax 3
#: (JupyterLab 4, Notebook 7), ``tex2jax_ignore`` for MathJax 2 (the classic notebook). Escaping
#: ``$`` as ``&#36;`` would not do: MathJax reads the text of the page, after entities are decoded.
NO_MATH = "mathjax_ignore tex2jax_ignore"
# Links look like links wherever they are shown: JupyterLab styles them in outputs, not in widgets.
_LINK = "style='color:var(--jp-content-link-color,#0b57d0);text-decoration:underline'"


def _short_path(source: str) -> str:
    """``source`` relative to the working folder when under it, else with ``~`` for home."""
    path = Path(source)
    try:
        return path.relative_to(Path.cwd()).as_posix()
    except ValueError:
        pass
    home = str(Path.home())
    return "~" + source[len(home) :] if source.startswith(home + os.sep) else source


def location_label(
    source: str | None,
    cell_index: int | None = None,
    line_start: int | None = None,
    line_end: int | None = None,
    *,
    short: bool = False,
    page: int | None = None,
    cell_id: str | None = None,
) -> str:
    """Where a hit is, for people: ``"deploy.ipynb, cell 4"``, ``"notes/ops.md:12-30"``, ``"(remembered)"``.

    A PDF chunk is named by its page: ``"papers/x.pdf, page 3"``. Cells count from 1, as
    JupyterLab's status bar does; a cell of the kernel's history notebook is named by its
    execution count (``"kernel-3.ipynb, In [5]"``).

    Paths are shown relative to the working folder, or with ``~`` for the home folder; ``short``
    keeps only the file and its folder (``…/ops/deploy.md:12``). A cell of the kernel's history
    notebook is named by the file alone: its folder is nbmemory's own.
    """
    if source is None:
        return "(remembered)"
    if cell_index is not None and cell_id == f"in-{cell_index}":
        return f"{Path(source).name}, In [{cell_index}]"
    parts = Path(source).parts
    where = "…/" + "/".join(parts[-2:]) if short and len(parts) > 2 else _short_path(source)
    if cell_index is not None:
        return f"{where}, cell {cell_index + 1}"
    if page is not None:
        return f"{where}, page {page}"
    if line_start is not None:
        where += f":{line_start}" + (f"-{line_end}" if line_end and line_end != line_start else "")
    return where


def location_html(
    hit: Hit | Item, links: Links | None = None, *, widget: bool = False, short: bool = False
) -> str:
    """The hit's location as escaped HTML: data attributes always, a link when one can be made.

    Parameters
    ----------
    hit:
        A search hit or an item.
    links:
        How sources become links (:func:`nbmemory.jupyter.notebook_context.links_for`); None: no link.
    widget:
        Make the link for a widget (absolute ``lab/tree`` URL, new tab) rather than for a
        notebook output (relative to the notebook, opened inside JupyterLab).
    short:
        Label with the file and its folder only (the full path is in the tooltip).
    """
    label = html.escape(
        location_label(
            hit.source,
            hit.cell_index,
            hit.line_start,
            hit.line_end,
            short=short,
            page=hit.page,
            cell_id=hit.cell_id,
        )
    )
    if hit.source is None:
        return f"<span class='nbmemory-loc'>{label}</span>"
    attrs = [f"data-nbmemory-path='{html.escape(hit.source, quote=True)}'"]
    if hit.cell_index is not None:
        attrs.append(f"data-nbmemory-cell='{int(hit.cell_index)}'")
    if hit.cell_id:
        attrs.append(f"data-nbmemory-cell-id='{html.escape(hit.cell_id, quote=True)}'")
    if hit.line_start is not None:
        attrs.append(f"data-nbmemory-line='{int(hit.line_start)}'")
    if hit.line_end is not None:
        attrs.append(f"data-nbmemory-line-end='{int(hit.line_end)}'")
    if hit.page is not None:
        attrs.append(f"data-nbmemory-page='{int(hit.page)}'")
    attrs.append(f"title='{html.escape(hit.source, quote=True)}'")
    href = None
    if links is not None:
        # The path JupyterLab opens: the extension's click handler opens it in this Lab at the line or cell.
        relative = links.server_path(hit.source)
        if relative is not None:
            attrs.append(f"data-nbmemory-open='{html.escape(relative, quote=True)}'")
        href = links.lab_href(hit.source) if widget else links.output_href(hit.source)
        if href is not None and hit.page is not None:
            # The URL fragment with which PDF viewers open a given page.
            href += f"#page={int(hit.page)}"
    if href is not None:
        target = " target='_blank' rel='noopener'" if widget else ""
        return (
            f"<a class='nbmemory-loc' href='{html.escape(href, quote=True)}'{target} {_LINK} "
            f"{' '.join(attrs)}>{label}</a>"
        )
    return f"<span class='nbmemory-loc' {' '.join(attrs)}>{label}</span>"


def _rank(hit: Hit, name: str) -> str:
    rank = hit.ranks.get(name)
    return str(rank) if rank is not None else "–"


def more_label(hit: Hit) -> str:
    """``+2 more in this file`` for a grouped hit (notebooks: cells), else empty."""
    if not hit.more:
        return ""
    unit = (
        "cells"
        if hit.cell_index is not None and len(hit.more) > 1
        else "cell"
        if hit.cell_index is not None
        else ""
    )
    return f"+{len(hit.more)} more {unit + ' ' if unit else ''}in this file"


def tier_html(hit: Hit) -> str:
    """The hit's tier (``high``, ``medium``, ``low``) with what it means as its tooltip; empty
    when the model has no tiers."""
    if hit.tier == "none":
        return ""
    meaning = html.escape(TIER_MEANING, quote=True)
    return f"<small class='nbmemory-tier' title='{meaning}'>{html.escape(hit.tier)}</small>"


def parts_text(parts: Mapping[str, float] | None) -> str:
    """``bm25 0.0475 + cosine 0.4594 + passage 0.0200``: a score's parts as the ranking added them."""
    if not parts:
        return ""
    return " + ".join(f"{name} {value:.4f}" for name, value in parts.items() if value).replace("+ -", "- ")


def hit_row_html(
    hit: Hit, position: int, links: Links | None = None, parts: Mapping[str, float] | None = None
) -> str:
    """One ``<tr>`` for a hit: rank, score (its parts in the tooltip) and tier, retriever ranks,
    location, expandable text. A weak hit is not marked here: the table heads the weak ones with
    one line."""
    meta = [hit.kind, hit.namespace] + [f"#{t}" for t in hit.tags]
    if hit.more:
        meta.append(more_label(hit))
    tip = parts_text(parts)
    score_attrs = f"{_NUM} title='{html.escape(tip, quote=True)}'" if tip else _NUM
    heading = f"<div><b>{html.escape(hit.heading)}</b></div>" if hit.heading else ""
    tier = tier_html(hit)
    body = (
        f"<details><summary>{html.escape(hit.snippet)}</summary>"
        f"<div style='white-space:pre-wrap;font-family:var(--jp-code-font-family,monospace)'>"
        f"{html.escape(hit.text)}</div></details>"
    )
    return (
        f"<tr data-nbmemory-id='{int(hit.id)}'>"
        f"<td {_NUM}>{position}</td><td {score_attrs}>{hit.score:.4f}{'<br>' + tier if tier else ''}</td>"
        f"<td {_NUM}>{_rank(hit, 'bm25')}</td><td {_NUM}>{_rank(hit, 'vector')}</td>"
        f"<td {_TD}>{location_html(hit, links)}<br><small>#{int(hit.id)} · "
        f"{html.escape(' · '.join(meta))}</small></td>"
        f"<td {_TD}>{heading}{body}</td></tr>"
    )


class HitTable:
    """Search hits as a table: escaped HTML in a notebook, text in a terminal.

    Parameters
    ----------
    hits:
        Hits, best first.
    title:
        A line above the table (escaped).
    links:
        How sources become links; None: data attributes only.
    flagged:
        The search found no confident match: only its :data:`~nbmemory.options.CLOSEST` closest
        items are shown, folded under the title.
    parts:
        Each hit's score parts (:meth:`~nbmemory.SearchResult.parts`), shown when a score is hovered.
    scale:
        What a score is (:func:`~nbmemory.options.score_scale`), under the table.
    """

    def __init__(
        self,
        hits: Sequence[Hit],
        title: str = "",
        links: Links | None = None,
        *,
        flagged: bool = False,
        parts: Mapping[int, Mapping[str, float]] | None = None,
        scale: str = "",
    ) -> None:
        self.hits = list(hits)
        self.title = title
        self.links = links
        self.flagged = flagged
        self.parts = dict(parts or {})
        self.scale = scale

    @property
    def shown(self) -> list[Hit]:
        """The hits on show: all of them, or a flagged search's closest few."""
        return self.hits[:CLOSEST] if self.flagged else self.hits

    def _repr_html_(self) -> str:
        head = f"<div><b>{html.escape(self.title)}</b></div>" if self.title else ""
        if not self.hits:
            return f"<div class='nbmemory-hits {NO_MATH}'>{head}<div><i>no results</i></div></div>"
        rows = ""
        shown = self.shown
        for i, h in enumerate(shown, start=1):
            if h.weak and not self.flagged and not any(x.weak for x in shown[: i - 1]):
                rows += f"<tr class='nbmemory-weak-label'><td colspan='6' {_TD}><i>{html.escape(WEAK_LABEL)}</i></td></tr>"
            rows += hit_row_html(h, i, self.links, self.parts.get(h.id))
        scale = html.escape(self.scale, quote=True)
        score_head = f"<th title='{scale}'>score</th>" if scale else "<th>score</th>"
        table = (
            f"<table><thead><tr><th>#</th>{score_head}<th>bm25</th><th>vector</th>"
            f"<th {_TD}>source</th><th {_TD}>text</th></tr></thead><tbody>{rows}</tbody></table>"
        )
        legend = [f"{self.scale}; hover a score for its parts"] if self.scale else []
        if any(h.tier != "none" for h in shown):
            legend.append(TIER_MEANING)
        if legend:
            table += f"<div class='nbmemory-scale'><small>{html.escape('. '.join(legend))}</small></div>"
        if self.flagged:
            table = (
                f"<details class='nbmemory-closest'><summary>show the {plural(len(shown), 'closest item')}"
                f"</summary>{table}</details>"
            )
        return f"<div class='nbmemory-hits {NO_MATH}'>{head}{table}</div>"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> tuple[dict[str, str], dict[str, Any]]:
        return mimebundle(self, "HitTable")

    def __repr__(self) -> str:
        lines = [self.title] if self.title else []
        if not self.hits:
            return "\n".join([*lines, "  (no results)"])
        shown = self.shown
        for rank, hit in enumerate(shown, start=1):
            if hit.weak and not self.flagged and not any(x.weak for x in shown[: rank - 1]):
                lines.append(f"  -- {WEAK_LABEL} --")
            where = location_label(
                hit.source, hit.cell_index, hit.line_start, hit.line_end, page=hit.page, cell_id=hit.cell_id
            )
            lines.append(
                f"{rank:>3}. [{hit.score:.4f}] #{hit.id} {where}  "
                f"(bm25 {_rank(hit, 'bm25')}, vector {_rank(hit, 'vector')})"
            )
            if hit.heading:
                lines.append(f"     {hit.heading}")
            lines += [f"     {line}" for line in textwrap.wrap(hit.snippet, width=96)[:3]]
            if hit.more:
                lines.append(f"     {more_label(hit)}")
        if self.scale:
            lines.append(f"({self.scale})")
        return "\n".join(lines)


class ItemView:
    """One stored item with its metadata."""

    def __init__(self, item: Item, links: Links | None = None) -> None:
        self.item = item
        self.links = links

    def _fields(self) -> list[tuple[str, str]]:
        it = self.item
        return [
            ("kind", it.kind),
            ("namespace", it.namespace),
            ("tags", ", ".join(it.tags) or "–"),
            ("importance", f"{it.importance:g}"),
            ("pinned", "yes" if it.pinned else "no"),
            ("accessed", str(it.access_count)),
            ("retrieved", str(it.retrieval_count)),
            ("updated", str(it.updated_at or "–")),
        ]

    def _repr_html_(self) -> str:
        it = self.item
        meta = " · ".join(f"{k}: {html.escape(v)}" for k, v in self._fields())
        heading = f"<div><b>{html.escape(it.heading)}</b></div>" if it.heading else ""
        return (
            f"<div class='nbmemory-item {NO_MATH}' data-nbmemory-id='{int(it.id)}'>"
            f"<div><b>#{int(it.id)}</b> {location_html(it, self.links)}</div>"
            f"<div><small>{meta}</small></div>{heading}"
            f"<pre style='white-space:pre-wrap'>{html.escape(it.text)}</pre></div>"
        )

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> tuple[dict[str, str], dict[str, Any]]:
        return mimebundle(self, "ItemView")

    def __repr__(self) -> str:
        it = self.item
        where = location_label(
            it.source, it.cell_index, it.line_start, it.line_end, page=it.page, cell_id=it.cell_id
        )
        meta = ", ".join(f"{k}={v}" for k, v in self._fields())
        return "\n".join([f"#{it.id} {where}", f"[{meta}]", *([it.heading] if it.heading else []), it.text])


class StatsView:
    """``Memory.stats()`` as a two-column table."""

    def __init__(self, stats: Mapping[str, Any]) -> None:
        self.stats = dict(stats)

    @staticmethod
    def _value(value: Any) -> str:
        if isinstance(value, Mapping):
            return ", ".join(f"{k}: {v}" for k, v in value.items()) or "–"
        return str(value)

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><th {_TD}>{html.escape(str(k))}</th><td {_TD}>{html.escape(self._value(v))}</td></tr>"
            for k, v in self.stats.items()
        )
        return f"<table class='nbmemory-stats {NO_MATH}'>{rows}</table>"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> tuple[dict[str, str], dict[str, Any]]:
        return mimebundle(self, "StatsView")

    def __repr__(self) -> str:
        width = max((len(str(k)) for k in self.stats), default=0)
        return "\n".join(f"{k:>{width}}: {self._value(v)}" for k, v in self.stats.items())


class TextBlock:
    """Preformatted text (a trace, a report), escaped in HTML."""

    def __init__(self, text: str, title: str = "") -> None:
        self.text = text
        self.title = title

    def _repr_html_(self) -> str:
        head = f"<div><b>{html.escape(self.title)}</b></div>" if self.title else ""
        return f"<div class='{NO_MATH}'>{head}<pre>{html.escape(self.text)}</pre></div>"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> tuple[dict[str, str], dict[str, Any]]:
        return mimebundle(self, "TextBlock")

    def __repr__(self) -> str:
        return f"{self.title}\n{self.text}" if self.title else self.text


class SearchHits:
    """What ``%memsearch`` and ``%memrelated`` return: one output that shows the hit table.

    Its notebook display is the :class:`HitTable` (HTML in a notebook, text in a terminal), with
    the ranking trace under it when one is given (a flagged search shows its closest few, folded;
    a score's parts show when it is hovered); the data is there on request: ``.df`` or
    ``.to_polars()`` (a polars DataFrame), iterating (the :class:`~nbmemory.Hit` objects),
    ``len``, ``[i]``, ``.ids`` and ``.result`` (the :class:`~nbmemory.SearchResult`).

    Parameters
    ----------
    result:
        The search result shown.
    title:
        The line above the table (the "no confident match" line for a rejected search).
    links:
        How sources become links; None: data attributes only.
    trace:
        The ranking trace, shown under the table; None: not shown.
    """

    def __init__(
        self, result: Any, title: str = "", links: Links | None = None, trace: str | None = None
    ) -> None:
        self.result = result
        self.table = HitTable(
            result.hits,
            title=title,
            links=links,
            flagged=bool(getattr(result, "rejected", False)),
            parts=result.parts() if hasattr(result, "parts") else None,
            scale=score_scale(result) if hasattr(result, "fusion") else "",
        )
        self.trace = trace
        self._frame: Any = None

    @property
    def hits(self) -> list[Hit]:
        return list(self.result.hits)

    @property
    def ids(self) -> list[int]:
        return [h.id for h in self.result.hits]

    @property
    def df(self) -> Any:
        """The hits as a polars DataFrame (rank, id, score, bm25_rank, vector_rank, source, ...)."""
        if self._frame is None:
            self._frame = self.result.to_polars()
        return self._frame

    def to_polars(self) -> Any:
        """The hits as a polars DataFrame (the same frame as :attr:`df`)."""
        return self.df

    def explain(self, top: int = 10) -> str:
        """The ranking trace, stage by stage."""
        return str(self.result.explain(top))

    def __iter__(self) -> Iterator[Hit]:
        return iter(self.result.hits)

    def __len__(self) -> int:
        return len(self.result.hits)

    def __getitem__(self, i: int) -> Hit:
        return self.result.hits[i]  # type: ignore[no-any-return]

    def _repr_html_(self) -> str:
        trace = TextBlock(self.trace, title="ranking trace")._repr_html_() if self.trace else ""
        return self.table._repr_html_() + trace

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> tuple[dict[str, str], dict[str, Any]]:
        return mimebundle(self, "SearchHits")

    def __repr__(self) -> str:
        text = repr(self.table)
        return f"{text}\n\nranking trace\n{self.trace}" if self.trace else text
