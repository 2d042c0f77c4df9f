"""Evaluation: BEIR harness, metrics via pytrec_eval, the memory scenario benchmark, diagnostics."""

from nbmemory.eval.beir import BeirDataset, Document, download, load
from nbmemory.eval.harness import (
    BeirResult,
    ConfigRun,
    IndexOptions,
    evaluate_beir,
    evaluate_many,
    resolve_configs,
    stage_toggles,
)
from nbmemory.eval.metrics import METRICS, evaluate, rank_run

__all__ = [
    "METRICS",
    "BeirDataset",
    "BeirResult",
    "ConfigRun",
    "Document",
    "IndexOptions",
    "download",
    "evaluate",
    "evaluate_beir",
    "evaluate_many",
    "load",
    "rank_run",
    "resolve_configs",
    "stage_toggles",
]
