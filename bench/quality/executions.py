"""A memory of captured work: the dev notebooks' code cells stored as executed cells, searched
with judged questions.

    python -m bench.quality.executions                          # default / bm25 / vector
    python -m bench.quality.executions --configs default,default-flat,bm25,bm25-flat,vector,vector-flat,rrf
    python -m bench.quality.executions --build-only             # just build (or find) the memory
    python -m bench.quality.executions --per-query FILE.jsonl   # every question's ranks

Every code cell of the 249 notebooks in ``shared/datasets/notebooks/hf-notebooks/`` is one run
as a capturing kernel sends it (:mod:`nbmemory.eval.executions`: source, saved text output,
error, notebook, cell, a session time per notebook), stored with ``Memory.capture`` in batches of
64 (the kernel's batch) into one DuckDB memory with the bundled model; a tenth of the notebooks
run their first two cells again, and the memory must still hold one item per cell. The store is
built once under ``bench/.cache/executions/`` (document vectors from the benchmark's embedding
cache) and reused.

``--replays`` adds offline replays of two changes the search code does not make (proposals, not
the default; nothing of them is chosen here): the convex fusion's vector weight at
:data:`REPLAY_WEIGHTS`, and a second memory of the same runs where each execution's source and
what it printed (its ``# Output:`` and ``# Error:`` part) are two passages, so the vector side
reads an output that the item's own vector (its first 256 word pieces) does not reach.

The questions (``bench/data/executions-questions.jsonl``, written by reading the notebooks
before any search ran) judge cells by notebook and position, graded 1 or 2. Each is searched in
the whole memory with ``k = 10``; a hit counts when it is a judged cell (an item), as the hit
list shows it. Metrics (``pytrec_eval``): MRR@10, R@5, R@10, nDCG@10 (graded); ``notebook_mrr@10``
counts a hit from a judged cell's notebook instead (the right notebook, maybe another cell).
``flagged`` is the share the no-answer flag marks, of the answerable questions and of the
questions the memory holds no answer to. ``-flat`` configs turn the ``group`` stage off (one
result per notebook, its best cell, the others in ``Hit.more``), so every cell ranks on its own;
``rrf`` is plain RRF with every optional stage off. Reported on both halves of a split by notebook fixed
before any result was seen (nothing was tuned on either), and by question type.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bench.lib.embed_cache import CachedEmbedder
from bench.lib.paths import DATA, REPO, RESULTS, SHARED
from nbmemory.eval.executions import (
    SPLITS,
    TYPES,
    Cell,
    K,
    Question,
    evaluate,
    load_cells,
    load_questions,
    qrels_of,
)
from nbmemory.search.config import PipelineConfig

CORPUS = SHARED / "datasets" / "notebooks" / "hf-notebooks" / "corpus"
QUESTIONS = DATA / "executions-questions.jsonl"
DEFAULT_OUT = RESULTS / "executions.json"
CACHE = REPO / "bench" / ".cache" / "executions"
#: Bumped when what is stored for a run changes: a new store is built.
INGEST_FORMAT = "runs-v2"  # v2: a run's notebook is its conversation
#: Runs per ``Memory.capture`` call (the kernel's batch, :data:`nbmemory.jupyter.capture.BATCH`).
BATCH = 64

CONFIGS: dict[str, PipelineConfig] = {
    "default": PipelineConfig(),
    "default-flat": PipelineConfig(group=False),
    "bm25": PipelineConfig(retrievers=("bm25",)),
    "vector": PipelineConfig(retrievers=("vector",)),
    "bm25-flat": PipelineConfig(retrievers=("bm25",), group=False),
    "vector-flat": PipelineConfig(retrievers=("vector",), group=False),
    "rrf": PipelineConfig.plain(),
}
METRICS = ("mrr@10", "r@5", "r@10", "ndcg@10", "notebook_mrr@10")
#: The vector weights ``--replays`` tries beside the default's.
REPLAY_WEIGHTS = (0.6, 0.5, 0.4, 0.3)
_PRINTED = re.compile(r"\n# (?:Output:|Error: )")


def _store_key(cells: list[Cell], model_fingerprint: str, variant: str = "") -> str:
    digest = hashlib.sha256(f"{INGEST_FORMAT}{variant}".encode())
    digest.update(model_fingerprint.encode())
    for c in cells:
        digest.update(json.dumps(c.run, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def _capture(memory: Any, cells: list[Cell], log: Any) -> dict[tuple[str, int], int]:
    item_of: dict[tuple[str, int], int] = {}
    for start in range(0, len(cells), BATCH):
        batch = cells[start : start + BATCH]
        ids = memory.capture([c.run for c in batch])
        for cell, item in zip(batch, ids, strict=True):
            if item_of.setdefault((cell.notebook, cell.index), item) != item:
                raise RuntimeError(f"{cell.notebook} cell {cell.index} ran again as a second item")
        if start // BATCH % 10 == 0:
            log(f"captured {start + len(batch)} of {len(cells)} runs")
    return item_of


def _inline(memory_class: Any) -> dict[str, Any]:
    """Passages made by each write, where ``Memory`` can make them later: the stored memory is
    complete when it is closed."""
    import inspect

    return {"refine": "inline"} if "refine" in inspect.signature(memory_class).parameters else {}


@contextlib.contextmanager
def output_passages() -> Iterator[None]:
    """While open, an execution's passages are its source and what it printed (this process
    only: the replay of a change to :mod:`nbmemory.store.passages`, which gives executions none)."""
    from nbmemory.store import chunks, passages

    prose = passages.texts_of

    def texts_of(heading: str, text: str, kind: str) -> list[str]:
        found = _PRINTED.search(text) if kind == "execution" else None
        if found is None:
            return prose(heading, text, kind)
        return [
            chunks.embedding_text(heading, part)
            for part in (text[: found.start()], text[found.start() + 1 :])
        ]

    passages.texts_of = texts_of  # type: ignore[assignment]
    try:
        yield
    finally:
        passages.texts_of = prose  # type: ignore[assignment]


def open_memory(
    cells: list[Cell], embedder: CachedEmbedder, log: Any, variant: str = ""
) -> tuple[Any, dict[tuple[str, int], int]]:
    """The memory of every run, built once and reused, and each cell's item id (``variant``
    names a replay's store, made while its change is in place)."""
    from nbmemory import Memory

    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"{_store_key(cells, embedder.fingerprint, variant)}.duckdb"
    ids_path = path.with_suffix(".ids.json")
    if path.exists() and ids_path.exists():
        pairs = json.loads(ids_path.read_text(encoding="utf-8"))
        return Memory(path, embedder=embedder, **_inline(Memory)), {(nb, i): item for nb, i, item in pairs}
    tmp = path.with_suffix(".building.duckdb")
    for stale in (tmp, tmp.with_suffix(".duckdb.wal")):
        stale.unlink(missing_ok=True)
    log(f"capturing {len(cells)} runs into {path.name}")
    memory = Memory(tmp, embedder=embedder, **_inline(Memory))
    item_of = _capture(memory, cells, log)
    if hasattr(memory, "wait_refined"):
        memory.wait_refined()
    memory.close()
    os.replace(tmp, path)
    ids_path.write_text(
        json.dumps([[nb, i, item] for (nb, i), item in sorted(item_of.items())]), encoding="utf-8"
    )
    return Memory(path, embedder=embedder, **_inline(Memory)), item_of


def run_config(
    memory: Any, config: PipelineConfig, questions: list[Question], item_of: dict[tuple[str, int], int]
) -> tuple[dict[str, list[str]], dict[str, list[str]], dict[str, bool]]:
    """Each question's ranked items, the notebooks of its hits, and whether it was flagged."""
    ranked: dict[str, list[str]] = {}
    notebooks: dict[str, list[str]] = {}
    flagged: dict[str, bool] = {}
    for q in questions:
        result = memory.search(q.text, k=K, config=config, log=False)
        ranked[q.qid] = [str(h.id) for h in result.hits]
        notebooks[q.qid] = [h.source or "" for h in result.hits]
        flagged[q.qid] = bool(result.rejected)
    return ranked, notebooks, flagged


def notebook_scores(
    notebooks: dict[str, list[str]], questions: list[Question]
) -> dict[str, dict[str, float]]:
    """MRR@10 of the first hit from a judged cell's notebook (a notebook repeated in a flat list
    keeps its first rank)."""
    from nbmemory.eval.executions import evaluate as cell_evaluate

    qrels = {q.qid: {nb: 1 for nb, _ in q.judged} for q in questions if q.judged}
    return cell_evaluate({q: notebooks[q] for q in qrels}, qrels)


def summarise(
    name: str,
    per_query: dict[str, dict[str, float]],
    flagged: dict[str, bool],
    answerable: list[Question],
    unanswerable: list[Question],
) -> dict[str, Any]:
    ids = [q.qid for q in answerable]
    row: dict[str, Any] = {"config": name, "questions": len(ids)}
    for metric in METRICS:
        row[metric] = round(float(np.mean([per_query[q][metric] for q in ids])), 4) if ids else None
    row["answerable_flagged"] = round(float(np.mean([flagged[q] for q in ids])), 4) if ids else None
    row["unanswerable_flagged"] = (
        round(float(np.mean([flagged[q.qid] for q in unanswerable])), 4) if unanswerable else None
    )
    return row


def replay_row(
    memory_name: str,
    name: str,
    memory: Any,
    config: PipelineConfig,
    questions: list[Question],
    item_of: dict[tuple[str, int], int],
) -> dict[str, Any]:
    """One replay: MRR@10 on all answerable questions, each half and each type; nDCG@10, R@10."""
    answerable = [q for q in questions if q.judged]
    qrels = qrels_of(questions, item_of)
    ranked, _, flagged = run_config(memory, config, questions, item_of)
    per_query = evaluate({q: ranked[q] for q in qrels}, qrels)

    def mean(metric: str, mine: list[Question]) -> float | None:
        return round(float(np.mean([per_query[q.qid][metric] for q in mine])), 4) if mine else None

    row: dict[str, Any] = {"memory": memory_name, "config": name, "vector_weight": config.vector_weight}
    row["mrr@10"] = mean("mrr@10", answerable)
    for split in SPLITS:
        row[f"mrr@10_{split}"] = mean("mrr@10", [q for q in answerable if q.split == split])
    for kind in TYPES[:-1]:
        row[f"mrr@10_{kind}"] = mean("mrr@10", [q for q in answerable if q.type == kind])
    row["ndcg@10"] = mean("ndcg@10", answerable)
    row["r@10"] = mean("r@10", answerable)
    row["answerable_flagged"] = round(float(np.mean([flagged[q.qid] for q in answerable])), 4)
    row["unanswerable_flagged"] = round(
        float(np.mean([flagged[q.qid] for q in questions if not q.judged])), 4
    )
    return row


def replays(
    memory: Any,
    cells: list[Cell],
    embedder: CachedEmbedder,
    questions: list[Question],
    item_of: dict[tuple[str, int], int],
    log: Any,
) -> list[dict[str, Any]]:
    """The default, BM25 and the vector weights on the memory as stored, then on the memory whose
    executions have their output as a passage."""
    weights = {f"vector_weight={w}": PipelineConfig(vector_weight=w) for w in REPLAY_WEIGHTS}
    rows = [
        replay_row("as stored", name, memory, config, questions, item_of)
        for name, config in {"default": CONFIGS["default"], "bm25": CONFIGS["bm25"], **weights}.items()
    ]
    with output_passages():
        other, other_item_of = open_memory(cells, embedder, log, variant="output-passages")
        try:
            for name, config in {"default": CONFIGS["default"], **weights}.items():
                rows.append(replay_row("output as a passage", name, other, config, questions, other_item_of))
        finally:
            other.close()
    for row in rows:
        log(
            f"replay {row['memory']} / {row['config']}: MRR@10 {row['mrr@10']} (fit {row['mrr@10_fit']}, report {row['mrr@10_report']})"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--questions", type=Path, default=QUESTIONS)
    parser.add_argument("--configs", default="default,bm25,vector")
    parser.add_argument("--notebooks", type=int, default=0, help="only the first N notebooks (a quick check)")
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument(
        "--replays", action="store_true", help="also the offline replays of two proposed changes"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument(
        "--per-query", type=Path, default=None, help="write every question's ranks here (JSONL)"
    )
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        print(time.strftime("%H:%M:%S"), message, file=sys.stderr, flush=True)

    from nbmemory.config import Settings
    from nbmemory.embed.loader import load_model

    cells = load_cells(args.corpus)
    if args.notebooks:
        keep = sorted({c.notebook for c in cells})[: args.notebooks]
        cells = [c for c in cells if c.notebook in keep]
    embedder = CachedEmbedder(load_model(Settings().model), log=log)
    memory, item_of = open_memory(cells, embedder, log)
    items = len(set(item_of.values()))
    log(f"{len(cells)} runs, {len(item_of)} cells, {items} items")
    if args.build_only:
        memory.close()
        return 0
    questions = load_questions(args.questions)
    if args.notebooks:
        questions = [q for q in questions if not q.judged or all(k in item_of for k in q.judged)]
    qrels = qrels_of(questions, item_of)
    answerable = [q for q in questions if q.judged]
    unanswerable = [q for q in questions if not q.judged]
    vectors: dict[str, np.ndarray] = {q.text: embedder.inner.embed_query(q.text) for q in questions}
    embedder.query_vectors = vectors
    rows: list[dict[str, Any]] = []
    by_split: dict[str, list[dict[str, Any]]] = {}
    by_type: dict[str, list[dict[str, Any]]] = {}
    per_query_out: dict[str, dict[str, Any]] = {}
    load_before = os.getloadavg()
    for name in args.configs.split(","):
        ranked, hit_notebooks, flagged = run_config(memory, CONFIGS[name], questions, item_of)
        per_query = evaluate({q: ranked[q] for q in qrels}, qrels)
        for qid, scores in notebook_scores(hit_notebooks, answerable).items():
            per_query[qid]["notebook_mrr@10"] = scores["mrr@10"]
        rows.append(summarise(name, per_query, flagged, answerable, unanswerable))
        for split in SPLITS:
            mine = [q for q in answerable if q.split == split]
            none = [q for q in unanswerable if q.split == split]
            by_split.setdefault(split, []).append(summarise(name, per_query, flagged, mine, none))
        for kind in TYPES[:-1]:
            mine = [q for q in answerable if q.type == kind]
            if mine:
                by_type.setdefault(kind, []).append(summarise(name, per_query, flagged, mine, []))
        log(f"{name}: {rows[-1]}")
        for q in questions:
            entry = per_query_out.setdefault(
                q.qid,
                {"query": q.text, "type": q.type, "split": q.split, "judged": sorted(qrels.get(q.qid, {}))},
            )
            entry[name] = {"ranked": ranked[q.qid], "flagged": flagged[q.qid], **per_query.get(q.qid, {})}
    replayed = replays(memory, cells, embedder, questions, item_of, log) if args.replays else []
    memory.close()
    load_after = os.getloadavg()
    header = ["config", *METRICS, "answerable_flagged", "unanswerable_flagged"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(row.get(h)) for h in header) + " |")
    report = {
        "command": "python -m bench.quality.executions "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "load": [round(load_before[0], 2), round(load_after[0], 2)],
        "corpus": "hf-notebooks",
        "notebooks": len({c.notebook for c in cells}),
        "runs": len(cells),
        "cells": len(item_of),
        "items": items,
        "answerable": len(answerable),
        "unanswerable": len(unanswerable),
        "judged_notebooks": len({nb for q in answerable for nb, _ in q.judged}),
        "ingest_format": INGEST_FORMAT,
        "split": "by notebook: sha256 of the path of the question's first judged cell, even = fit, odd = report",
        "rows": rows,
        "by_split": by_split,
        "by_type": by_type,
    }
    if replayed:
        report["replays"] = replayed
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if args.per_query:
        with args.per_query.open("w", encoding="utf-8") as fh:
            for qid, entry in per_query_out.items():
                fh.write(json.dumps({"qid": qid, **entry}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
