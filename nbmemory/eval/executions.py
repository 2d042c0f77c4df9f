"""A memory of captured work: the runs a capturing kernel would have sent for saved notebooks,
judged questions over them, and cell-level retrieval metrics from ``pytrec_eval``.

Each code cell of a notebook (its saved outputs included) is one run, as
:mod:`nbmemory.jupyter.capture` sends it (:mod:`nbmemory.executions` documents the fields):
its source; the text it printed and the ``text/plain`` form of what it displayed, in order (no
images, no widget state; the first 1,500 and last 500 characters when there is more, with the
size said); for an ``error`` output, ``"Name: value"`` and the last lines of its traceback; the
notebook's path, the cell's id (the file's, or one made from the path and position where the
file has none, as JupyterLab gives one to every cell) and its position in the file. The runs
of a notebook are one session, cells :data:`CELL_GAP` apart in file order; the sessions are
spread over :data:`SPAN` from :data:`START` in an order fixed by a hash of each path, so the
same corpus always gives the same times.

Questions judge cells by notebook path and cell position (graded 1 or 2); they are resolved to
item ids when the memory is built. ``bench/data/executions-questions.md`` describes the file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytrec_eval

from nbmemory.tune.metrics import cut, rank_run

#: Results scored per question.
K = 10
#: The first session, the span the sessions cover, and the time between two cells of one.
START = datetime(2026, 9, 7, 9, 0, tzinfo=UTC)
SPAN = timedelta(weeks=10)
CELL_GAP = timedelta(seconds=4)
#: Notebooks whose first code cells are run a second time at the end of their session (one in
#: :data:`RERUN_EVERY`): the memory must still hold one item per cell.
RERUN_EVERY = 10
RERUN_CELLS = 2
#: What a kernel keeps of a cell's output (:data:`nbmemory.jupyter.capture.HEAD` and ``TAIL``).
HEAD = 1_500
TAIL = 500
TRACEBACK_LINES = 12
SPLITS = ("fit", "report")
TYPES = ("code", "output", "error", "none")
_WIDGET = "application/vnd.jupyter.widget-view+json"


@dataclass(frozen=True)
class Cell:
    """A code cell of the corpus: where it is, and the run a kernel would have sent for it."""

    notebook: str
    index: int
    run: dict[str, Any]


@dataclass(frozen=True)
class Question:
    qid: str
    text: str
    type: str
    split: str
    #: ``(notebook, cell index) -> grade``; empty for a question the memory cannot answer.
    judged: dict[tuple[str, int], int]
    note: str = ""


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def split_of(notebook: str) -> str:
    """The half a notebook's questions belong to, fixed by a hash of its path."""
    return SPLITS[_hash(notebook) % 2]


def _joined(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value or "")


def output_text(outputs: Sequence[Mapping[str, Any]]) -> tuple[str, int]:
    """What a capturing kernel keeps of a cell's saved outputs, and their length in all."""
    parts: list[str] = []
    for out in outputs:
        kind = out.get("output_type")
        if kind == "stream":
            parts.append(_joined(out.get("text")))
        elif kind in ("execute_result", "display_data"):
            data = out.get("data", {})
            if _WIDGET in data:
                continue
            text = _joined(data.get("text/plain"))
            if text:
                parts.append(text if text.endswith("\n") else text + "\n")
    text = "".join(parts)
    total = len(text)
    if total > HEAD + TAIL:
        text = text[:HEAD] + text[total - TAIL :]
    return text, total


def _error(outputs: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    for out in outputs:
        if out.get("output_type") == "error":
            name, value = str(out.get("ename") or ""), str(out.get("evalue") or "")
            first = f"{name}: {value}" if name and value else (name or value or "error")
            trace = "\n".join(_joined(line) for line in out.get("traceback", []))
            return {"error": first, "traceback": "\n".join(trace.splitlines()[-TRACEBACK_LINES:])}
    return {}


def notebook_cells(path: Path, name: str) -> list[tuple[int, dict[str, Any]]]:
    """``(position in the file, run)`` for each non-empty code cell of one notebook."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    out: list[tuple[int, dict[str, Any]]] = []
    for index, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        source = _joined(cell.get("source"))
        if not source.strip():
            continue
        outputs = cell.get("outputs", [])
        text, total = output_text(outputs)
        cell_id = cell.get("id") or f"{hashlib.sha256(name.encode()).hexdigest()[:8]}-{index}"
        run: dict[str, Any] = {"source": source, "notebook": name, "cell_id": cell_id, "cell_index": index}
        if text.strip():
            run["output"] = text
            if total > len(text):
                run["output_chars"] = total
        run.update(_error(outputs))
        out.append((index, run))
    return out


def notebooks(corpus: Path) -> list[str]:
    """The corpus's notebooks, as paths relative to it."""
    return sorted(str(p.relative_to(corpus)) for p in corpus.rglob("*.ipynb"))


def load_cells(corpus: Path) -> list[Cell]:
    """Every run of the corpus in the order a capturing kernel sends them: session by session,
    each session's cells in file order, then its re-runs."""
    names = notebooks(corpus)
    if not names:
        raise FileNotFoundError(f"no notebooks under {corpus}")
    order = sorted(names, key=lambda n: (_hash(n), n))
    step = SPAN / len(order)
    cells: list[Cell] = []
    for number, name in enumerate(order):
        start = START + step * number
        found = notebook_cells(corpus / name, name)
        runs = [(index, run) for index, run in found]
        if number % RERUN_EVERY == 0:
            runs += [(index, dict(run)) for index, run in found[:RERUN_CELLS]]
        for n, (index, run) in enumerate(runs):
            run["at"] = (start + CELL_GAP * n).isoformat()
            cells.append(Cell(name, index, run))
    return cells


def load_questions(path: Path) -> list[Question]:
    """The judged questions of a JSON Lines file; a malformed line is refused, naming it."""
    out: list[Question] = []
    seen: set[str] = set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path.name} line {number}"
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: not JSON ({exc})") from exc
        qid = str(entry.get("qid", ""))
        if not qid or qid in seen:
            raise ValueError(f"{where}: qid {qid!r} is missing or repeated")
        seen.add(qid)
        if entry.get("type") not in TYPES:
            raise ValueError(f"{where}: type {entry.get('type')!r} is not one of {TYPES}")
        if entry.get("split") not in SPLITS:
            raise ValueError(f"{where}: split {entry.get('split')!r} is not one of {SPLITS}")
        judged: dict[tuple[str, int], int] = {}
        for j in entry.get("judged", []):
            grade = int(j.get("grade", 2))
            if grade not in (1, 2):
                raise ValueError(f"{where}: grade {grade} is not 1 or 2")
            judged[(str(j["notebook"]), int(j["cell"]))] = grade
        if (entry["type"] == "none") != (not judged):
            raise ValueError(f"{where}: a question has judged cells exactly when its type is not 'none'")
        if not str(entry.get("query", "")).strip():
            raise ValueError(f"{where}: the query is empty")
        out.append(
            Question(qid, entry["query"], entry["type"], entry["split"], judged, entry.get("note", ""))
        )
    return out


def qrels_of(
    questions: Sequence[Question], item_of: Mapping[tuple[str, int], int]
) -> dict[str, dict[str, int]]:
    """Each answerable question's judged items (the best grade where two cells are one item)."""
    qrels: dict[str, dict[str, int]] = {}
    for q in questions:
        if not q.judged:
            continue
        docs: dict[str, int] = {}
        for key, grade in q.judged.items():
            if key not in item_of:
                raise KeyError(f"question {q.qid}: {key[0]} cell {key[1]} is not a captured code cell")
            doc = str(item_of[key])
            docs[doc] = max(grade, docs.get(doc, 0))
        qrels[q.qid] = docs
    return qrels


def evaluate(
    ranked: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]
) -> dict[str, dict[str, float]]:
    """Per question: ``mrr@10`` (``recip_rank`` of the run cut to :data:`K`), ``r@5``, ``r@10``
    (``recall``) and ``ndcg@10`` (graded), every judged question scored (0 for no result)."""
    run = cut(rank_run({q: ranked.get(q, []) for q in qrels}), K)
    run = {q: docs if docs else {"__none__": 0.0} for q, docs in run.items()}
    clean = {q: dict(d) for q, d in qrels.items()}
    scores = pytrec_eval.RelevanceEvaluator(clean, {"recip_rank", "recall.5,10", "ndcg_cut.10"}).evaluate(run)
    return {
        q: {
            "mrr@10": s["recip_rank"],
            "r@5": s["recall_5"],
            "r@10": s["recall_10"],
            "ndcg@10": s["ndcg_cut_10"],
        }
        for q, s in scores.items()
    }
