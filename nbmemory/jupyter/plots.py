"""Diagnostics as Altair charts. Every function returns an ``alt.Chart`` and never displays it.

Charts draw offline: importing this module (or ``%load_ext nbmemory``) switches Altair, when no
renderer was chosen, to its ``jupyter`` renderer in offline mode (:func:`use_offline_charts`): a
chart shows as an interactive ``JupyterChart`` widget (anywidget) whose vega JavaScript is bundled
by vl-convert, never fetched from a CDN. ``chart.save("x.svg")`` / ``"x.png"`` still export a
static picture (vl-convert), as does the chart's own action menu.

The search charts read a :class:`~nbmemory.SearchResult`'s trace: the ``bm25`` and ``vector``
stages hold every candidate each retriever returned (ids best first, raw scores), the fusion
stage (``convex`` by default, or ``rrf``) the fused candidates, with its weights in its notes, and
each scoring stage the parts every score is made of (:meth:`~nbmemory.SearchResult.parts`).
"""

from __future__ import annotations

from pathlib import PurePath
from typing import TYPE_CHECKING, Any

import altair as alt
import polars as pl

from nbmemory.charts import EMBED_OPTIONS, use_offline_charts
from nbmemory.errors import ConfigError

if TYPE_CHECKING:
    from nbmemory.api import SearchResult
    from nbmemory.items import Hit

__all__ = [
    "candidate_frame",
    "chart_widget",
    "contribution",
    "contribution_frame",
    "distance_relevance",
    "rank_scatter",
    "score_distributions",
    "use_offline_charts",
]

RETRIEVERS = ("bm25", "vector")
WIDTH = 360
HEIGHT = 300


def chart_widget(chart: alt.TopLevelMixin | None = None) -> alt.JupyterChart:
    """An offline ``JupyterChart`` widget showing ``chart`` (None: empty); set ``.chart`` to change it."""
    alt.JupyterChart.enable_offline()
    widget = alt.JupyterChart(chart, embed_options=EMBED_OPTIONS)  # type: ignore[arg-type]
    if chart is None:
        # The widget's spec starts as {}, which vega-embed would try to draw.
        widget.spec = None  # type: ignore[assignment]
    return widget


def _title(text: str, query: str) -> alt.TitleParams:
    shown = query if len(query) <= 60 else query[:57] + "..."
    return alt.TitleParams(text, subtitle=f"query: {shown}", anchor="start")


def _final_ids(result: SearchResult) -> list[int]:
    """The ranking after every stage: the hits, else the last stage's output (a hand-made trace).

    Not the fused stage's output: that is the candidate pool, which runs deeper than k.
    """
    if result.hits:
        return result.ids
    stages = [s for s in result.trace.stages if s.name != "hydrate"]
    return list(stages[-1].output) if stages else []


def candidate_frame(result: SearchResult) -> pl.DataFrame:
    """One row per candidate any retriever returned, with each retriever's rank and raw score.

    Parameters
    ----------
    result:
        A search result; its trace must hold the retriever stages.

    Returns
    -------
    polars.DataFrame
        ``id``, ``bm25_rank``, ``vector_rank`` (null where that retriever did not return the item),
        ``bm25_score``, ``vector_score``, ``fused_rank`` (null outside the top-k), ``in_top_k``,
        ``found_by`` (``both``, ``bm25 only``, ``vector only``) and ``snippet`` (top-k only).
    """
    stages = {name: result.trace.stage(name) for name in RETRIEVERS}
    present = {name: s for name, s in stages.items() if s is not None}
    if not present:
        raise ConfigError("the result's trace has no bm25 or vector stage: pass a result from Memory.search")
    fused_rank = {doc: r for r, doc in enumerate(_final_ids(result), start=1)}
    snippets = {h.id: h.snippet for h in result.hits}
    ids: list[int] = []
    for stage in present.values():
        ids += [i for i in stage.output if i not in ids]
    ranks = {name: {doc: r for r, doc in enumerate(s.output, start=1)} for name, s in present.items()}
    rows = []
    for doc in ids:
        by = [name for name in RETRIEVERS if doc in ranks.get(name, {})]
        rows.append(
            {
                "id": doc,
                "bm25_rank": ranks.get("bm25", {}).get(doc),
                "vector_rank": ranks.get("vector", {}).get(doc),
                "bm25_score": present["bm25"].scores.get(doc) if "bm25" in present else None,
                "vector_score": present["vector"].scores.get(doc) if "vector" in present else None,
                "fused_rank": fused_rank.get(doc),
                "in_top_k": doc in fused_rank,
                "found_by": "both" if len(by) == 2 else f"{by[0]} only",
                "snippet": snippets.get(doc, ""),
            }
        )
    schema = {
        "id": pl.Int64,
        "bm25_rank": pl.Int64,
        "vector_rank": pl.Int64,
        "bm25_score": pl.Float64,
        "vector_score": pl.Float64,
        "fused_rank": pl.Int64,
        "in_top_k": pl.Boolean,
        "found_by": pl.Utf8,
        "snippet": pl.Utf8,
    }
    return pl.DataFrame(rows, schema=schema)


def rank_scatter(result: SearchResult) -> alt.Chart:
    """BM25 rank against vector rank for every candidate of one query.

    An item one retriever did not return is drawn just past that retriever's depth, so keyword-only
    and vector-only finds line up along the edges; filled points made the fused top-k.

    Parameters
    ----------
    result:
        A search result from :meth:`Memory.search` (both retrievers).

    Returns
    -------
    altair.Chart
    """
    frame = candidate_frame(result)
    stages = [result.trace.stage(name) for name in RETRIEVERS]
    missing = max((len(s.output) for s in stages if s is not None), default=0) + 1
    plotted = frame.with_columns(
        pl.col("bm25_rank").fill_null(missing),
        pl.col("vector_rank").fill_null(missing),
        pl.col("in_top_k").replace_strict({True: "fused top-k", False: "not in top-k"}, return_dtype=pl.Utf8),
    )
    scale = alt.Scale(domain=[0, missing + 1], nice=False)
    # Click a legend entry to pick out one group; drag to pan, scroll to zoom.
    picked = alt.selection_point(fields=["found_by"], bind="legend")
    return (
        alt.Chart(plotted, title=_title(f"BM25 rank vs vector rank (missed = {missing})", result.query))
        .mark_point(filled=True, size=70)
        .encode(
            opacity=alt.when(picked).then(alt.value(0.85)).otherwise(alt.value(0.15)),
            x=alt.X("bm25_rank:Q", title="BM25 rank", scale=scale),
            y=alt.Y("vector_rank:Q", title="vector rank", scale=scale),
            color=alt.Color("found_by:N", title="found by", sort=["both", "bm25 only", "vector only"]),
            shape=alt.Shape("in_top_k:N", title="fused"),
            tooltip=["id:Q", "found_by:N", "fused_rank:Q", "bm25_rank:Q", "vector_rank:Q", "snippet:N"],
        )
        .add_params(picked)
        .properties(width=WIDTH, height=HEIGHT)
        .interactive()
    )


def score_distributions(result: SearchResult, bins: int = 15) -> alt.Chart:
    """Histogram of each retriever's raw scores over its candidates, top-k hits coloured.

    BM25 scores and cosine similarities live on different scales, so each retriever gets its own
    panel, x axis and bins (computed here: Vega-Lite's bin transform would share one set of bins
    across the panels).

    Parameters
    ----------
    result:
        A search result from :meth:`Memory.search`.
    bins:
        Equal-width bins per retriever.

    Returns
    -------
    altair.Chart
        Bars from ``bin_start`` to ``bin_end`` (x, x2), ``candidates`` on y, coloured by
        ``in_top_k``, one ``retriever`` per column.
    """
    if bins <= 0:
        raise ConfigError(f"bins must be greater than 0, got {bins}")
    frame = candidate_frame(result)
    parts = []
    for name in RETRIEVERS:
        scores = frame.filter(pl.col(f"{name}_rank").is_not_null()).select(
            pl.col(f"{name}_score").alias("score"), pl.col("in_top_k")
        )
        if scores.height == 0:
            continue
        low, high = float(scores["score"].min()), float(scores["score"].max())  # type: ignore[arg-type]
        width = (high - low) / bins or 1.0
        parts.append(
            scores.with_columns(
                ((pl.col("score") - low) / width).floor().clip(0, bins - 1).cast(pl.Int64).alias("bin")
            )
            .group_by("bin", "in_top_k")
            .agg(pl.len().alias("candidates"))
            .select(
                pl.lit(name).alias("retriever"),
                (low + pl.col("bin") * width).alias("bin_start"),
                (low + (pl.col("bin") + 1) * width).alias("bin_end"),
                pl.col("in_top_k"),
                pl.col("candidates").cast(pl.Int64),
            )
        )
    long = pl.concat(parts).sort("retriever", "bin_start", "in_top_k")
    return (
        alt.Chart(long, title=_title("Score distribution per retriever", result.query))
        .mark_bar()
        .encode(
            x=alt.X("bin_start:Q", bin="binned", title="raw score"),
            x2="bin_end:Q",
            y=alt.Y("candidates:Q", stack="zero", title="candidates"),
            color=alt.Color("in_top_k:N", title="in fused top-k"),
            column=alt.Column("retriever:N", title=None, sort=list(RETRIEVERS)),
            tooltip=[
                "retriever:N",
                alt.Tooltip("bin_start:Q", format=".3f"),
                alt.Tooltip("bin_end:Q", format=".3f"),
                "in_top_k:N",
                "candidates:Q",
            ],
        )
        .resolve_scale(x="independent")
        .properties(width=WIDTH // 2 + 40, height=HEIGHT - 80)
    )


#: The parts a score is made of (:meth:`~nbmemory.SearchResult.parts`), in the order bars stack
#: them, with what each is called in a chart.
PART_LABELS = {
    "bm25": "BM25",
    "identifier": "identifier lean (to BM25)",
    "cosine": "cosine",
    "passage": "passage (raised the cosine)",
    "vector": "vector",
    "recency": "recency",
    "importance": "importance",
    "retrievals": "retrievals",
    "pinned": "pinned",
    "fused rank": "fused rank (RRF)",
    "cross-encoder": "cross-encoder rank (RRF)",
    "below the reranked": "below the reranked",
    "mmr relevance": "MMR relevance",
    "mmr redundancy": "MMR redundancy",
    "below the MMR picks": "below the MMR picks",
    "superseded": "superseded",
    "score": "score (not broken down)",
}


def contribution_frame(result: SearchResult) -> pl.DataFrame:
    """One row per part of every ranked item's score, as the pipeline added it (from the trace).

    Parameters
    ----------
    result:
        A search result from :meth:`Memory.search`.

    Returns
    -------
    polars.DataFrame
        ``rank``, ``item`` (its label), ``id``, ``part`` (its label), ``contribution``, ``start``
        and ``end`` (where its bar segment lies: the item's parts laid end to end, those that
        lower the score last) and ``score`` (the item's score: the sum of its parts, where the
        last segment ends). A trace with no parts for an item (one made by hand) gives it one
        part, ``score (not broken down)``.
    """
    hits = {h.id: h for h in result.hits}
    rows: list[dict[str, Any]] = []
    for position, doc in enumerate(_final_ids(result), start=1):
        hit = hits.get(doc)
        parts = result.trace.parts(doc)
        if not parts:
            parts = {"score": hit.score if hit is not None else _last_score(result, doc)}
        score = sum(parts.values())
        # A part that added nothing (no lean, no passage) draws nothing: left out of the legend.
        parts = {name: value for name, value in parts.items() if value} or parts
        label = _item_label(position, doc, hit)
        end = 0.0
        # Parts that add first, those that take away after: the bar ends at the score.
        for name, value in sorted(parts.items(), key=lambda kv: kv[1] < 0):
            rows.append(
                {
                    "rank": position,
                    "item": label,
                    "id": doc,
                    "part": PART_LABELS.get(name, name),
                    "contribution": value,
                    "start": end,
                    "end": end + value,
                    "score": score,
                }
            )
            end += value
    return pl.DataFrame(
        rows,
        schema={
            "rank": pl.Int64,
            "item": pl.Utf8,
            "id": pl.Int64,
            "part": pl.Utf8,
            "contribution": pl.Float64,
            "start": pl.Float64,
            "end": pl.Float64,
            "score": pl.Float64,
        },
    )


#: A colour per known part (tableau20): the keyword side in blues, the cosine side in oranges.
_COLOURS = {
    "BM25": "#4c78a8",
    "identifier lean (to BM25)": "#9ecae9",
    "cosine": "#f58518",
    "passage (raised the cosine)": "#ffbf79",
    "vector": "#f58518",
    "recency": "#54a24b",
    "importance": "#b279a2",
    "retrievals": "#eeca3b",
    "pinned": "#ff9da6",
    "fused rank (RRF)": "#4c78a8",
    "cross-encoder rank (RRF)": "#e45756",
    "below the reranked": "#bab0ac",
    "MMR relevance": "#72b7b2",
    "MMR redundancy": "#e45756",
    "below the MMR picks": "#bab0ac",
    "superseded": "#9d755d",
    "score (not broken down)": "#bab0ac",
}


def _part_colour(label: str) -> str:
    return _COLOURS.get(label, "#79706e")


def _last_score(result: SearchResult, doc: int) -> float:
    for stage in reversed(result.trace.stages):
        if doc in stage.scores:
            return float(stage.scores[doc])
    return 0.0


def contribution(result: SearchResult) -> alt.Chart:
    """What each ranked item's score is made of: one bar per item, one segment per part.

    The parts are the ones the pipeline added, as its trace records them
    (:meth:`~nbmemory.SearchResult.parts`): with convex fusion (the default) the BM25 share of
    the query, the cosine, what the best passage raised the cosine by and what the identifier
    lean moved to BM25, then recency, importance and the like when those stages ran; with RRF
    each retriever's ``weight / (k + rank)``. Each bar ends at the item's score, so the bars
    follow the ranking; a part that lowers a score (MMR's redundancy) is drawn back over the bar.

    Parameters
    ----------
    result:
        A search result from :meth:`Memory.search`.

    Returns
    -------
    altair.Chart
    """
    fused = result.fusion
    if fused is None:
        raise ConfigError("the result's trace has no fusion stage: pass a result from Memory.search")
    frame = contribution_frame(result)
    labels = frame["item"].unique(maintain_order=True).to_list()
    present = frame["part"].unique(maintain_order=True).to_list()
    order = [p for p in PART_LABELS.values() if p in present] + [
        p for p in present if p not in PART_LABELS.values()
    ]
    weights: dict[str, float] = dict(fused.notes.get("weights", {}))
    if fused.name == "convex" and weights:
        how = f"{weights.get('bm25', 0):g} x BM25 share + {weights.get('vector', 0):g} x cosine"
    else:
        how = f"RRF k={fused.notes.get('k', 60)}: weight / (k + rank)"
    # Click a legend entry to pick out one part.
    picked = alt.selection_point(fields=["part"], bind="legend")
    return (
        alt.Chart(frame, title=_title(f"What each score is made of ({how})", result.query))
        .mark_bar()
        .encode(
            x=alt.X("start:Q", title="score"),
            x2="end:Q",
            # Room for a folder, a file name and the id; the labels say what they are.
            y=alt.Y("item:N", sort=labels, title=None, axis=alt.Axis(labelLimit=280)),
            # A part keeps its colour from chart to chart, whichever other parts are present.
            color=alt.Color(
                "part:N",
                title="part",
                sort=order,
                scale=alt.Scale(domain=order, range=[_part_colour(p) for p in order]),
            ),
            opacity=alt.when(picked).then(alt.value(1.0)).otherwise(alt.value(0.25)),
            tooltip=[
                "item:N",
                "part:N",
                alt.Tooltip("contribution:Q", format=".4f"),
                alt.Tooltip("score:Q", format=".4f"),
            ],
        )
        .add_params(picked)
        .properties(width=WIDTH, height=max(120, 18 * len(labels)))
    )


def _item_label(position: int, doc: int, hit: Hit | None) -> str:
    """``"1. ops/deploy.md:12 #42"``: rank, the file and its folder when the hit is known, and the id."""
    if hit is None:
        return f"{position}. #{doc}"
    if hit.source is None:
        where = "remembered"
    else:
        path = "/".join(PurePath(hit.source).parts[-2:])
        if hit.cell_index is not None:
            # Cells count from 1, as in the hit table and JupyterLab's status bar.
            where = f"{path}, cell {hit.cell_index + 1}"
        else:
            where = path + (f":{hit.line_start}" if hit.line_start is not None else "")
    return f"{position}. {where} #{doc}"


def distance_relevance(frame: pl.DataFrame, bins: int = 10) -> alt.Chart:
    """P(relevant) by vector-distance bin: how far a hit can be before it stops being useful.

    Parameters
    ----------
    frame:
        One row per judged (query, item) pair with a ``distance`` column (cosine distance) and a
        ``relevant`` column (bool or 0/1).
    bins:
        Number of equal-width distance bins.

    Returns
    -------
    altair.Chart
        A line with points: ``distance`` (bin centre) on x, ``p_relevant`` on y, ``n`` (pairs per
        bin) in the tooltip.
    """
    missing = [c for c in ("distance", "relevant") if c not in frame.columns]
    if missing:
        raise ConfigError(
            f"distance_relevance needs columns distance and relevant; missing: {', '.join(missing)}"
        )
    if bins <= 0:
        raise ConfigError(f"bins must be greater than 0, got {bins}")
    data = frame.select(pl.col("distance").cast(pl.Float64), pl.col("relevant").cast(pl.Float64)).drop_nulls()
    if data.height == 0:
        raise ConfigError("distance_relevance got no rows with both distance and relevant set")
    low, high = float(data["distance"].min()), float(data["distance"].max())  # type: ignore[arg-type]
    width = (high - low) / bins or 1.0
    curve = (
        data.with_columns(
            ((pl.col("distance") - low) / width).floor().clip(0, bins - 1).cast(pl.Int64).alias("bin")
        )
        .group_by("bin")
        .agg(pl.col("relevant").mean().alias("p_relevant"), pl.len().alias("n"))
        .with_columns((low + (pl.col("bin") + 0.5) * width).alias("distance"))
        .sort("bin")
    )
    return (
        alt.Chart(curve, title=alt.TitleParams("P(relevant) by vector distance", anchor="start"))
        .mark_line(point=True)
        .encode(
            x=alt.X("distance:Q", title="cosine distance (bin centre)"),
            y=alt.Y("p_relevant:Q", title="P(relevant)", scale=alt.Scale(domain=[0, 1])),
            tooltip=[
                alt.Tooltip("distance:Q", format=".3f"),
                alt.Tooltip("p_relevant:Q", format=".2f"),
                "n:Q",
            ],
        )
        .properties(width=WIDTH, height=HEIGHT - 60)
    )


use_offline_charts()
