"""Evaluation results as polars tables, markdown and JSON."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from nbmemory.tune.metrics import METRICS

if TYPE_CHECKING:
    from nbmemory.eval.harness import BeirResult


def results_table(results: Sequence[BeirResult]) -> pl.DataFrame:
    """One row per (dataset, configuration): metrics, latency p50/p95 (and of the query embedding), sizes.

    Parameters
    ----------
    results:
        Results of :func:`nbmemory.eval.harness.evaluate_beir`.
    """
    rows = []
    for res in results:
        for name, run in res.runs.items():
            rows.append(
                {
                    "dataset": res.dataset,
                    "config": name,
                    **{m: round(run.overall[m], 4) for m in METRICS},
                    **{key: round(value, 1) for key, value in run.latency().items()},
                    "queries": res.queries,
                    "documents": res.store.documents,
                    "items": res.store.items,
                }
            )
    return pl.DataFrame(rows)


def per_query_table(results: Sequence[BeirResult]) -> pl.DataFrame:
    """One row per (dataset, configuration, query) with every metric and the latency."""
    rows = []
    for res in results:
        for name, run in res.runs.items():
            for qid, values in run.per_query.items():
                rows.append(
                    {
                        "dataset": res.dataset,
                        "config": name,
                        "query_id": qid,
                        **values,
                        "latency_ms": run.latency_ms.get(qid),
                    }
                )
    return pl.DataFrame(rows, schema_overrides={"latency_ms": pl.Float64})


def hits_table(results: Sequence[BeirResult]) -> pl.DataFrame:
    """One row per returned document: dataset, config, query, doc, rank, scores, relevance."""
    schema = {
        "dataset": pl.Utf8,
        "config": pl.Utf8,
        "query_id": pl.Utf8,
        "doc_id": pl.Utf8,
        "rank": pl.Int64,
        "score": pl.Float64,
        "bm25_rank": pl.Int64,
        "vector_rank": pl.Int64,
        "bm25_score": pl.Float64,
        "vector_sim": pl.Float64,
        "relevance": pl.Int64,
    }
    rows = [
        {"dataset": res.dataset, "config": name, **record}
        for res in results
        for name, run in res.runs.items()
        for record in run.hits
    ]
    return pl.DataFrame(rows, schema=schema)


def to_markdown(df: pl.DataFrame, float_digits: int = 3) -> str:
    """A GitHub markdown table of a small frame."""
    header = "| " + " | ".join(df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    lines = [header, rule]
    for row in df.iter_rows():
        cells = []
        for value in row:
            if isinstance(value, float):
                cells.append(f"{value:.{float_digits}f}")
            else:
                cells.append(str(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def result_to_dict(result: BeirResult, per_query: bool = True) -> dict[str, Any]:
    """A JSON-ready dict of one :class:`~nbmemory.eval.harness.BeirResult`."""
    configs: dict[str, Any] = {}
    for name, run in result.runs.items():
        entry: dict[str, Any] = {
            "pipeline": {
                key: (list(value) if isinstance(value, tuple) else value)
                for key, value in dataclasses.asdict(run.config).items()
            },
            "metrics": {m: run.overall[m] for m in METRICS},
            "latency": run.latency(),
        }
        if per_query:
            entry["per_query"] = run.per_query
        configs[name] = entry
    store = dataclasses.asdict(result.store)
    store["path"] = str(store["path"])
    return {
        "dataset": result.dataset,
        "model": result.model,
        "fingerprint": result.fingerprint,
        "device": result.device,
        "k": result.k,
        "queries": result.queries,
        "limits": result.limits,
        "options": dataclasses.asdict(result.options),
        "store": store,
        "wall_s": round(result.wall_s, 2),
        "configs": configs,
    }


def write_json(payload: Any, path: str | os.PathLike[str]) -> Path:
    """Write ``payload`` as indented JSON (creating folders); returns the path."""
    target = Path(path).expanduser()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(payload, indent=2, default=str, ensure_ascii=False) + "\n", encoding="utf-8")
    return target
