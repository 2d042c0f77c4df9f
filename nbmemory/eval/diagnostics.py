"""Helpers for the built-in evaluation notebooks: polars frames in, polars frames and Altair charts out.

Nothing here displays anything: the notebooks decide what to show. Importing this module makes
the notebooks' charts draw offline, as :mod:`nbmemory.jupyter.plots` does (:func:`nbmemory.charts.use_offline_charts`).

* :func:`wins_losses` / :func:`wins_losses_chart`: per query, does the hybrid beat each single
  retriever?
* :func:`relevance_by_distance`: P(relevant) per vector cosine-distance bin (the vstash
  relevance signal), with Wilson intervals.
* :func:`relevance_by_rank`: P(relevant) per rank bucket, for any configuration's ranking.
* :func:`disagreement`: how often two runs' top-10 sets differ.
* :func:`derive_thresholds`: relevance tiers and no-answer rejection levels for the current
  model, from those curves and from the scenario benchmark's miss questions;
  :func:`proposed_thresholds` sets them beside those in use. Live search reads them only once a
  person adopts them (:func:`adopt_thresholds`, undone by :func:`undo_adopted_thresholds`).
* :func:`score_chart`, :func:`rank_chart`, :func:`flag_chart`: the memory diagnostics notebook's
  charts (its data from :mod:`nbmemory.eval.memory_diagnostics`).

Every chart has a title, named axes and a one-line reading of what it shows as its subtitle
(:func:`titled`), computed from the data it draws.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import altair as alt
import numpy as np
import polars as pl

from nbmemory import private
from nbmemory.charts import use_offline_charts
from nbmemory.eval.margins import wilson
from nbmemory.search.reject import bundled_thresholds_path, load_thresholds, thresholds_path  # noqa: F401

# The built-in notebooks draw their charts with no network (JupyterChart, JavaScript bundled locally).
use_offline_charts()

RANK_BUCKETS: tuple[tuple[int, int], ...] = (
    (1, 1),
    (2, 2),
    (3, 3),
    (4, 5),
    (6, 10),
    (11, 20),
    (21, 50),
    (51, 100),
)


# -- tables and charts for the BEIR notebook ---------------------------------------------------


def titled(title: str, reading: str) -> alt.TitleParams:
    """A chart title with its one-line reading of what the chart shows as the subtitle."""
    return alt.TitleParams(text=title, subtitle=reading, anchor="start", subtitleColor="#444")


def ndcg_chart(table: pl.DataFrame, metric: str = "ndcg@10") -> alt.FacetChart:
    """Bars of ``metric`` per configuration, one group per dataset, with a reading naming the best.

    Parameters
    ----------
    table:
        :func:`nbmemory.eval.report.results_table` output.
    """
    data = table.select("dataset", "config", metric)
    best = data.sort(metric, descending=True).unique("dataset", keep="first", maintain_order=True)
    reading = "; ".join(
        f"{r['dataset']}: {r['config']} best at {r[metric]:.3f}" for r in best.iter_rows(named=True)
    )
    base = alt.Chart(data)
    bars = base.mark_bar().encode(
        x=alt.X("config:N", title="configuration", sort=None),
        y=alt.Y(f"{metric}:Q", title=metric.upper(), scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("config:N", legend=None),
        tooltip=["dataset", "config", alt.Tooltip(f"{metric}:Q", format=".4f")],
    )
    labels = base.mark_text(dy=-6).encode(
        x=alt.X("config:N", sort=None), y=f"{metric}:Q", text=alt.Text(f"{metric}:Q", format=".3f")
    )
    return (
        (bars + labels)
        .properties(width=180, height=220)
        .facet(column=alt.Column("dataset:N", title="dataset"))
        .properties(title=titled(f"{metric.upper()} per configuration", reading))
    )


def wins_losses(
    per_query: pl.DataFrame,
    hybrid: str = "rrf",
    against: Sequence[str] = ("bm25", "vector"),
    metric: str = "ndcg@10",
    tolerance: float = 1e-9,
) -> pl.DataFrame:
    """Per dataset and single retriever: queries where ``hybrid`` wins, loses or ties on ``metric``.

    Parameters
    ----------
    per_query:
        :func:`nbmemory.eval.report.per_query_table` output.
    """
    rows = []
    wide = per_query.pivot(on="config", index=["dataset", "query_id"], values=metric)
    for dataset in wide["dataset"].unique(maintain_order=True).to_list():
        part = wide.filter(pl.col("dataset") == dataset)
        for other in against:
            if other not in part.columns or hybrid not in part.columns:
                continue
            delta = (part[hybrid] - part[other]).to_numpy()
            rows.append(
                {
                    "dataset": dataset,
                    "hybrid": hybrid,
                    "versus": other,
                    "wins": int((delta > tolerance).sum()),
                    "losses": int((delta < -tolerance).sum()),
                    "ties": int((np.abs(delta) <= tolerance).sum()),
                    "mean_delta": float(delta.mean()) if len(delta) else 0.0,
                }
            )
    return pl.DataFrame(rows)


def wins_losses_chart(frame: pl.DataFrame) -> alt.FacetChart:
    """Stacked bars of wins / ties / losses of the hybrid against each single retriever."""
    long = frame.unpivot(
        index=["dataset", "hybrid", "versus"],
        on=["wins", "ties", "losses"],
        variable_name="outcome",
        value_name="queries",
    ).with_columns(pl.concat_str([pl.col("hybrid"), pl.lit(" vs "), pl.col("versus")]).alias("pair"))
    reading = "; ".join(
        f"{r['dataset']}, {r['hybrid']} vs {r['versus']}: {r['wins']} wins, {r['losses']} losses"
        for r in frame.iter_rows(named=True)
    )
    return (
        alt.Chart(long)
        .mark_bar()
        .encode(
            y=alt.Y("pair:N", title="comparison"),
            x=alt.X("queries:Q", stack="normalize", title="share of queries"),
            color=alt.Color(
                "outcome:N",
                scale=alt.Scale(domain=["wins", "ties", "losses"], range=["#4c9a2a", "#bbbbbb", "#c0392b"]),
            ),
            order=alt.Order("outcome:N"),
            tooltip=["dataset", "pair", "outcome", "queries"],
        )
        .properties(width=360, height=60)
        .facet(row=alt.Row("dataset:N", title="dataset"))
        .properties(title=titled("Per query: does the hybrid beat each retriever alone?", reading))
    )


def delta_chart(
    per_query: pl.DataFrame, hybrid: str = "rrf", versus: str = "bm25", metric: str = "ndcg@10"
) -> alt.Chart:
    """Histogram of per-query ``metric(hybrid) - metric(versus)``."""
    wide = per_query.pivot(on="config", index=["dataset", "query_id"], values=metric)
    data = wide.select("dataset", (pl.col(hybrid) - pl.col(versus)).alias("delta"))
    deltas = data["delta"].drop_nulls()
    better, worse = int((deltas > 1e-9).sum()), int((deltas < -1e-9).sum())
    reading = f"{better} queries gain, {worse} lose, {deltas.len() - better - worse} unchanged"
    return (
        alt.Chart(data)
        .mark_bar()
        .encode(
            x=alt.X("delta:Q", bin=alt.Bin(step=0.1), title=f"{metric}: {hybrid} minus {versus}"),
            y=alt.Y("count():Q", title="queries"),
            color=alt.Color("dataset:N", title="dataset"),
        )
        .properties(width=300, height=180, title=titled(f"{hybrid} against {versus}, per query", reading))
    )


# -- relevance curves --------------------------------------------------------------------------


def _with_ci(frame: pl.DataFrame) -> pl.DataFrame:
    lows, highs = [], []
    for n, k in zip(frame["n"].to_list(), frame["relevant"].to_list(), strict=True):
        low, high = wilson(k, n)
        lows.append(low)
        highs.append(high)
    return frame.with_columns(
        (pl.col("relevant") / pl.col("n")).alias("p_relevant"),
        pl.Series("ci_low", lows, dtype=pl.Float64),
        pl.Series("ci_high", highs, dtype=pl.Float64),
    )


def relevance_by_distance(hits: pl.DataFrame, config: str = "vector", width: float = 0.05) -> pl.DataFrame:
    """P(relevant) of retrieved documents per cosine-distance bin (distance = 1 - similarity).

    Parameters
    ----------
    hits:
        :func:`nbmemory.eval.report.hits_table` output.
    config:
        Whose hits to use; the vector-only run ranks every document by distance.
    width:
        Bin width.

    Returns
    -------
    pl.DataFrame
        ``dataset, bin_low, bin_high, n, relevant, p_relevant, ci_low, ci_high``.
    """
    part = hits.filter((pl.col("config") == config) & pl.col("vector_sim").is_not_null())
    binned = part.with_columns(
        ((1.0 - pl.col("vector_sim")) / width).floor().cast(pl.Int64).alias("bin"),
        (pl.col("relevance") > 0).cast(pl.Int64).alias("rel"),
    )
    out = (
        binned.group_by("dataset", "bin")
        .agg(pl.len().alias("n"), pl.col("rel").sum().alias("relevant"))
        .sort("dataset", "bin")
        .with_columns(
            (pl.col("bin") * width).alias("bin_low"), ((pl.col("bin") + 1) * width).alias("bin_high")
        )
        .select("dataset", "bin_low", "bin_high", "n", "relevant")
    )
    return _with_ci(out)


def relevance_by_rank(
    hits: pl.DataFrame,
    configs: Sequence[str] = ("bm25", "vector", "rrf"),
    buckets: Sequence[tuple[int, int]] = RANK_BUCKETS,
) -> pl.DataFrame:
    """P(relevant) per rank bucket in each configuration's ranking (a single retriever's, or fused).

    Returns
    -------
    pl.DataFrame
        ``dataset, config, bucket, first_rank, n, relevant, p_relevant, ci_low, ci_high``.
    """
    rows = []
    part = hits.filter(pl.col("config").is_in(list(configs)))
    for (dataset, config), group in part.group_by("dataset", "config", maintain_order=True):
        ranks = group["rank"].to_numpy()
        rel = (group["relevance"].to_numpy() > 0).astype(int)
        for low, high in buckets:
            mask = (ranks >= low) & (ranks <= high)
            n = int(mask.sum())
            if n:
                rows.append(
                    {
                        "dataset": dataset,
                        "config": config,
                        "bucket": str(low) if low == high else f"{low}-{high}",
                        "first_rank": low,
                        "n": n,
                        "relevant": int(rel[mask].sum()),
                    }
                )
    return _with_ci(pl.DataFrame(rows))


def curve_reading(curve: pl.DataFrame, x: str, color: str = "dataset") -> str:
    """One line on a P(relevant) curve: for distance bins, where it peaks and from where it stays
    under 0.05; for rank buckets, P(relevant) at rank 1 per line; and how many results it rests on."""
    if curve.height == 0:
        return "no judged results to draw"
    total = int(curve["n"].sum())
    if x == "bucket":
        first = curve.filter(pl.col("first_rank") == 1).sort("p_relevant", descending=True)
        parts = [f"{r[color]} {r['p_relevant']:.2f}" for r in first.iter_rows(named=True)]
        return f"P(relevant) at rank 1: {', '.join(parts)}; {total:,} judged results (bands: 95 % Wilson intervals)"
    pooled = (
        curve.group_by(x).agg(pl.col("n").sum(), pl.col("relevant").sum()).sort(x)
        .with_columns((pl.col("relevant") / pl.col("n")).alias("p"))
    )  # fmt: skip
    peak = pooled.sort("p", descending=True).row(0, named=True)
    after = pooled.filter((pl.col(x) > peak[x]) & (pl.col("p") < 0.05))
    tail = f", under 0.05 from distance {after[x][0]:.2f}" if after.height else ""
    return (
        f"P(relevant) peaks at {peak['p']:.2f} at distance {peak[x]:.2f}{tail}; {total:,} judged results "
        "(bands: 95 % Wilson intervals)"
    )


def curve_chart(
    curve: pl.DataFrame, x: str, color: str = "dataset", title: str = "", reading: str | None = None
) -> alt.LayerChart:
    """P(relevant) with its Wilson band against ``x`` (``bin_low``: a distance bin, or ``bucket``:
    a rank bucket), titled, with a one-line reading (default :func:`curve_reading`)."""
    xenc = (
        alt.X("bucket:N", sort=[f"{a}" if a == b else f"{a}-{b}" for a, b in RANK_BUCKETS], title="rank")
        if x == "bucket"
        else alt.X(f"{x}:Q", title="cosine distance (1 - similarity), bin start")
    )
    base = alt.Chart(curve).encode(x=xenc, color=alt.Color(f"{color}:N", title=color))
    band = base.mark_area(opacity=0.2).encode(
        y=alt.Y("ci_low:Q", title="P(relevant)", scale=alt.Scale(domain=[0, 1])), y2="ci_high:Q"
    )
    line = base.mark_line(point=True).encode(
        y="p_relevant:Q", tooltip=[color, x, "n", alt.Tooltip("p_relevant:Q", format=".3f")]
    )
    text = reading if reading is not None else curve_reading(curve, x, color)
    return (band + line).properties(width=380, height=220, title=titled(title or "P(relevant)", text))


def disagreement(
    ranked_a: Mapping[str, Sequence[str]], ranked_b: Mapping[str, Sequence[str]], k: int = 10
) -> dict[str, float]:
    """How two runs differ in their top ``k``.

    Returns
    -------
    dict
        ``queries``; ``differ``: share of queries whose top-k sets are not identical;
        ``mean_overlap``: mean share of top-k documents the runs have in common;
        ``top1_differs``: share of queries with different first results.
    """
    qids = [q for q in ranked_a if q in ranked_b]
    if not qids:
        return {"queries": 0, "differ": 0.0, "mean_overlap": 0.0, "top1_differs": 0.0}
    differ = overlap = top1 = 0.0
    for q in qids:
        a, b = list(ranked_a[q])[:k], list(ranked_b[q])[:k]
        common = len(set(a) & set(b))
        size = max(len(a), len(b), 1)
        differ += set(a) != set(b)
        overlap += common / size
        top1 += a[:1] != b[:1]
    n = len(qids)
    return {"queries": n, "differ": differ / n, "mean_overlap": overlap / n, "top1_differs": top1 / n}


# -- thresholds --------------------------------------------------------------------------------


def _decreasing_fit(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Pool-adjacent-violators: the closest non-increasing sequence (weighted least squares)."""
    blocks: list[list[float]] = []  # [value, weight, count]
    for v, w in zip(values, weights, strict=True):
        blocks.append([float(v), float(w), 1])
        while len(blocks) > 1 and blocks[-2][0] < blocks[-1][0]:
            v2, w2, c2 = blocks.pop()
            v1, w1, c1 = blocks.pop()
            total = w1 + w2
            blocks.append([(v1 * w1 + v2 * w2) / total if total else (v1 + v2) / 2, total, c1 + c2])
    out: list[float] = []
    for v, _, c in blocks:
        out += [v] * int(c)
    return np.array(out)


def distance_tiers(curve: pl.DataFrame, levels: Mapping[str, float] | None = None) -> dict[str, float | None]:
    """Largest cosine distance at which P(relevant) (made non-increasing) is still >= each level.

    Parameters
    ----------
    curve:
        :func:`relevance_by_distance` output (all datasets are pooled).
    levels:
        Tier name -> minimum P(relevant); default high 0.5, medium 0.2, low 0.05.
    """
    levels = levels or {"high": 0.5, "medium": 0.2, "low": 0.05}
    pooled = (
        curve.group_by("bin_low", "bin_high").agg(pl.col("n").sum(), pl.col("relevant").sum()).sort("bin_low")
    )
    n = pooled["n"].to_numpy().astype(float)
    p = pooled["relevant"].to_numpy() / np.maximum(n, 1)
    fitted = _decreasing_fit(p, n)
    highs = pooled["bin_high"].to_numpy()
    out: dict[str, float | None] = {}
    for name, level in levels.items():
        ok = np.nonzero(fitted >= level)[0]
        out[name] = round(float(highs[ok[-1]]), 4) if len(ok) else None
    return out


def rejection_levels(
    outcomes: pl.DataFrame, config: str = "rrf", false_rejection: float = 0.05
) -> dict[str, Any]:
    """No-answer rejection levels from the scenario benchmark's answerable and miss questions.

    A question would be rejected when its best vector similarity **and** its lexical evidence
    (the share of the query's IDF mass its best BM25 match covers, see
    :mod:`nbmemory.search.adaptive`) are both below their levels (weak keyword and weak vector
    signal, MemX's R1). Each level is the ``false_rejection`` quantile of the answerable
    questions, so alone it rejects about that share of answerable questions. The evidence is a
    share, not a raw BM25 score, so its level does not depend on the size of the corpus.

    Parameters
    ----------
    outcomes:
        :meth:`nbmemory.eval.scenario.ScenarioResult.outcomes_frame` output.
    config:
        A configuration that ran both retrievers.
    """
    part = outcomes.filter(pl.col("config") == config)
    answerable = part.filter(pl.col("kind") != "miss")
    misses = part.filter(pl.col("kind") == "miss")
    vec = answerable["top_vector_sim"].drop_nulls().to_numpy()
    evidence = answerable["lexical_evidence"].fill_null(0.0).to_numpy()
    if not len(vec):
        return {"config": config, "vector_sim_below": None, "evidence_below": None}
    vec_level = float(np.quantile(vec, false_rejection))
    evidence_level = float(np.quantile(evidence, false_rejection))

    def rejected(frame: pl.DataFrame) -> float:
        if frame.height == 0:
            return 0.0
        v = frame["top_vector_sim"].fill_null(-1.0).to_numpy()
        e = frame["lexical_evidence"].fill_null(0.0).to_numpy()
        return float(((v < vec_level) & (e < evidence_level)).mean())

    return {
        "config": config,
        "false_rejection_target": false_rejection,
        "vector_sim_below": round(vec_level, 4),
        "evidence_below": round(evidence_level, 4),
        "answerable_rejected": round(rejected(answerable), 4),
        "misses_rejected": round(rejected(misses), 4),
        "answerable": answerable.height,
        "misses": misses.height,
    }


def derive_thresholds(
    model: str,
    fingerprint: str,
    distance_curve: pl.DataFrame,
    scenario_outcomes: pl.DataFrame | None = None,
    datasets: Sequence[str] = (),
) -> dict[str, Any]:
    """The thresholds the relevance tiers and the no-answer rejection should use, for one model.

    Returns
    -------
    dict
        ``model``, ``fingerprint``, ``distance_tiers`` (max cosine distance per tier),
        ``reject`` (see :func:`rejection_levels`), the curve itself and where it came from.
    """
    payload: dict[str, Any] = {
        "model": model,
        "fingerprint": fingerprint,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "datasets": list(datasets),
        "distance_tiers": distance_tiers(distance_curve),
        "tier_levels": {"high": 0.5, "medium": 0.2, "low": 0.05},
        "distance_curve": distance_curve.select(
            "dataset", "bin_low", "bin_high", "n", "relevant", "p_relevant"
        ).to_dicts(),
    }
    if scenario_outcomes is not None:
        payload["reject"] = rejection_levels(scenario_outcomes)
    return payload


def save_thresholds(payload: Mapping[str, Any], path: str | os.PathLike[str] | None = None) -> Path:
    """Write thresholds JSON (default :func:`thresholds_path` of the payload's fingerprint)."""
    target = Path(path) if path is not None else thresholds_path(str(payload["fingerprint"]))
    private.make_dir(target.parent)
    private.write_text(target, json.dumps(payload, indent=2) + "\n")
    return target


def adopted_path(fingerprint: str) -> Path:
    """Where adopted thresholds live, which live search reads before the shipped ones."""
    return thresholds_path(fingerprint)


def adopt_thresholds(payload: Mapping[str, Any]) -> Path:
    """Make live search use these distance tiers for the payload's model, from the next search.

    The rejection levels are kept from the thresholds in use (the person's adopted ones, else
    the shipped ones), since a BEIR run has no no-answer questions to derive them from. A file
    adopted before is kept beside as ``<fingerprint>.json.previous``. Undo with
    :func:`undo_adopted_thresholds`.
    """
    fingerprint = str(payload["fingerprint"])
    current = load_thresholds(fingerprint) or {}
    merged = {**current, **dict(payload)}
    if "reject" not in payload and "reject" in current:
        merged["reject"] = current["reject"]
    target = adopted_path(fingerprint)
    if target.exists():
        private.write_text(target.with_name(target.name + ".previous"), target.read_text(encoding="utf-8"))
    saved = save_thresholds(merged, target)
    _forget_cached_thresholds()
    return saved


def undo_adopted_thresholds(fingerprint: str) -> Path | None:
    """Stop using adopted thresholds for ``fingerprint``: live search goes back to the shipped
    ones (or to none for a model nbmemory ships none for). Returns the file removed, or None."""
    target = adopted_path(fingerprint)
    if not target.exists():
        return None
    target.unlink()
    _forget_cached_thresholds()
    return target


def _forget_cached_thresholds() -> None:
    # This process's searches read the thresholds once per model; other processes (the Jupyter
    # server, a background owner) read the file when they next start.
    from nbmemory.search.reject import thresholds_for

    thresholds_for.cache_clear()


def proposed_thresholds(payload: Mapping[str, Any]) -> pl.DataFrame:
    """The derived distance tiers beside those live search uses now, one row per tier."""
    fingerprint = str(payload["fingerprint"])
    current = load_thresholds(fingerprint) or {}
    adopted = adopted_path(fingerprint).exists()
    now = current.get("distance_tiers") or {}
    where = "adopted by you" if adopted else ("shipped" if current else "none")
    return pl.DataFrame(
        [
            {"tier": tier, "in use (" + where + ")": now.get(tier), "derived here": value}
            for tier, value in (payload.get("distance_tiers") or {}).items()
        ]
    )


# -- charts for the memory diagnostics notebook --------------------------------------------------


def _median(frame: pl.DataFrame, column: str) -> float | None:
    values = frame[column].drop_nulls()
    return float(values.median()) if values.len() else None  # type: ignore[arg-type]


def score_chart(hits: pl.DataFrame, column: str = "cosine", top: int | None = 1) -> alt.Chart:
    """Histogram of one score of what the memory returned (``cosine`` or ``bm25``), per origin of
    the queries, for each query's ``top`` hits (None: all of them)."""
    part = hits if top is None else hits.filter(pl.col("rank") <= top)
    part = part.filter(pl.col(column).is_not_null())
    label = {"cosine": "cosine similarity to the query", "bm25": "BM25 score"}.get(column, column)
    which = (
        "every hit" if top is None else ("each query's first hit" if top == 1 else f"each query's top {top}")
    )
    medians = [
        f"{origin} {m:.2f}"
        for origin in part["origin"].unique(maintain_order=True).to_list()
        if (m := _median(part.filter(pl.col("origin") == origin), column)) is not None
    ]
    missing = hits.filter(pl.col(column).is_null() & (pl.col("rank") <= (top or 10**9))).height
    reading = "median: " + "; ".join(medians) if medians else "no scores to draw"
    if column == "bm25" and missing:
        reading += f"; {missing} hits had no keyword match (not drawn)"
    bins = alt.Bin(maxbins=30)
    return (
        alt.Chart(part)
        .mark_bar(opacity=0.7)
        .encode(
            x=alt.X(f"{column}:Q", bin=bins, title=label),
            y=alt.Y("count():Q", stack=None, title="hits"),
            color=alt.Color("origin:N", title="queries"),
            tooltip=["origin", alt.Tooltip("count():Q", title="hits")],
        )
        .properties(width=380, height=200, title=titled(f"{label[0].upper()}{label[1:]}, {which}", reading))
    )


def rank_chart(hits: pl.DataFrame) -> alt.Chart:
    """Each retriever's rank of a hit against its fused rank; hits one retriever did not return
    sit in a 'not returned' row above the plot."""
    long = hits.unpivot(
        index=["query", "origin", "rank"], on=["bm25_rank", "vector_rank"], variable_name="retriever",
        value_name="retriever_rank",
    ).with_columns(pl.col("retriever").str.replace("_rank", ""))  # fmt: skip
    both = hits.filter(pl.col("bm25_rank").is_not_null() & pl.col("vector_rank").is_not_null()).height
    only_b = hits.filter(pl.col("bm25_rank").is_not_null() & pl.col("vector_rank").is_null()).height
    only_v = hits.filter(pl.col("bm25_rank").is_null() & pl.col("vector_rank").is_not_null()).height
    reading = f"of {hits.height} hits, {both} were found by both retrievers, {only_b} by BM25 alone, {only_v} by the vectors alone"
    returned = long.filter(pl.col("retriever_rank").is_not_null())
    points = (
        alt.Chart(returned)
        .mark_circle(size=40, opacity=0.6)
        .encode(
            x=alt.X("rank:Q", title="fused rank (what search returns)"),
            y=alt.Y("retriever_rank:Q", title="rank in that retriever alone", scale=alt.Scale(type="log")),
            color=alt.Color("retriever:N", title="retriever"),
            tooltip=["query", "retriever", "rank", "retriever_rank"],
        )
    )
    diagonal = (
        alt.Chart(pl.DataFrame({"rank": [1, max(int(r) for r in hits["rank"].to_list() or [1])]}))
        .mark_line(color="#999", strokeDash=[4, 4])
        .encode(x="rank:Q", y="rank:Q")
    )
    return (points + diagonal).properties(
        width=380, height=240, title=titled("Each retriever's rank against the fused rank", reading)
    )


def flag_chart(verdicts: pl.DataFrame) -> alt.Chart:
    """Share of queries the no-answer flag marks, per origin of the queries."""
    share = (
        verdicts.group_by("origin", maintain_order=True)
        .agg(pl.len().alias("queries"), pl.col("rejected").sum().alias("flagged"))
        .with_columns((pl.col("flagged") / pl.col("queries")).alias("share"))
    )
    reading = "; ".join(
        f"{r['origin']}: {r['flagged']} of {r['queries']} flagged" for r in share.iter_rows(named=True)
    )
    return (
        alt.Chart(share)
        .mark_bar()
        .encode(
            y=alt.Y("origin:N", title="queries"),
            x=alt.X("share:Q", title="share flagged as having no answer", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("origin:N", legend=None),
            tooltip=["origin", "queries", "flagged"],
        )
        .properties(
            width=380,
            height=30 * max(share.height, 1),
            title=titled("Which queries the no-answer flag marks", reading),
        )
    )
