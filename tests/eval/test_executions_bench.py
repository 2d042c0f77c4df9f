"""The judged questions of the captured-work benchmark (bench/quality/executions.py) and the runs
it builds from the dev notebooks: the file parses, every judged cell is a captured code cell,
the fit and report halves are fixed by notebook and disjoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nbmemory.eval.executions import (
    Cell,
    load_cells,
    load_questions,
    notebook_cells,
    output_text,
    qrels_of,
    split_of,
)
from nbmemory.executions import run_rows

REPO = Path(__file__).resolve().parents[2]
QUESTIONS = REPO / "bench" / "data" / "executions-questions.jsonl"
CORPUS = REPO.parent / "shared" / "datasets" / "notebooks" / "hf-notebooks" / "corpus"


@pytest.fixture(scope="module")
def cells() -> list[Cell]:
    if not CORPUS.exists():
        pytest.skip(f"{CORPUS} not found (the dev notebooks live in shared/)")
    return load_cells(CORPUS)


def test_the_question_file_parses_and_meets_its_size() -> None:
    questions = load_questions(QUESTIONS)
    answerable = [q for q in questions if q.judged]
    assert len(answerable) >= 150
    assert len(questions) - len(answerable) >= 20
    assert len({nb for q in answerable for nb, _ in q.judged}) >= 60
    assert {q.type for q in answerable} == {"code", "output", "error"}


def test_the_halves_are_fixed_by_notebook_and_disjoint() -> None:
    questions = load_questions(QUESTIONS)
    fit = {q.qid for q in questions if q.split == "fit"}
    report = {q.qid for q in questions if q.split == "report"}
    assert fit and report and not fit & report and len(fit | report) == len(questions)
    for q in questions:
        # The first judged notebook (or, with no answer, the qid) decides; a notebook leads
        # questions of one half only.
        assert q.split == split_of(next(iter(q.judged))[0] if q.judged else q.qid), q.qid
    lead: dict[str, set[str]] = {}
    for q in questions:
        if q.judged:
            lead.setdefault(next(iter(q.judged))[0], set()).add(q.split)
    assert all(len(halves) == 1 for halves in lead.values())


def test_every_judged_cell_is_a_captured_code_cell(cells: list[Cell]) -> None:
    item_of = {(c.notebook, c.index): n for n, c in enumerate(cells)}
    questions = load_questions(QUESTIONS)
    qrels = qrels_of(questions, item_of)
    assert len(qrels) == sum(1 for q in questions if q.judged)
    assert all(grades and set(grades.values()) <= {1, 2} for grades in qrels.values())


def test_a_wrong_cell_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    entry = {
        "qid": "x1",
        "query": "q",
        "type": "code",
        "split": "fit",
        "judged": [{"notebook": "a.ipynb", "cell": 3}],
    }
    path.write_text(json.dumps(entry) + "\n", encoding="utf-8")
    with pytest.raises(KeyError, match=r"a\.ipynb cell 3"):
        qrels_of(load_questions(path), {})
    path.write_text(json.dumps({**entry, "type": "none"}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 1"):
        load_questions(path)


def test_runs_are_what_capture_stores(cells: list[Cell]) -> None:
    # Every run is one Memory.capture accepts, and its times are the same on every build.
    rows = run_rows([c.run for c in cells], "default")
    assert len(rows) == len(cells)
    assert [c.run["at"] for c in cells] == [c.run["at"] for c in load_cells(CORPUS)]
    errors = [c for c in cells if "error" in c.run]
    assert errors and all(
        row.heading.startswith("failed: ")
        for (row, _), c in zip(rows, cells, strict=True)
        if "error" in c.run
    )
    # Re-runs repeat a cell of their notebook; every other cell is run once.
    keys = [(c.notebook, c.index) for c in cells]
    assert len(set(keys)) < len(keys)


def test_output_keeps_text_and_leaves_widgets_and_images(tmp_path: Path) -> None:
    outputs = [
        {"output_type": "stream", "name": "stdout", "text": ["loss 0.5\n"]},
        {
            "output_type": "display_data",
            "data": {"application/vnd.jupyter.widget-view+json": {}, "text/plain": "HBox()"},
        },
        {
            "output_type": "display_data",
            "data": {"image/png": "iVBOR", "text/plain": "<Figure size 640x480>"},
        },
        {"output_type": "execute_result", "data": {"text/plain": ["{'accuracy': 0.9}"]}},
    ]
    text, total = output_text(outputs)
    assert text == "loss 0.5\n<Figure size 640x480>\n{'accuracy': 0.9}\n" and total == len(text)
    long_text, long_total = output_text([{"output_type": "stream", "text": "x" * 5000}])
    assert long_total == 5000 and len(long_text) == 2000
    nb = tmp_path / "n.ipynb"
    nb.write_text(
        json.dumps(
            {
                "cells": [
                    {"cell_type": "markdown", "source": "# t"},
                    {
                        "cell_type": "code",
                        "source": "1/0",
                        "outputs": [
                            {
                                "output_type": "error",
                                "ename": "ZeroDivisionError",
                                "evalue": "division by zero",
                                "traceback": ["\x1b[0;31mZeroDivisionError\x1b[0m: division by zero"],
                            }
                        ],
                    },
                    {"cell_type": "code", "source": "  ", "outputs": []},
                ]
            }
        ),
        encoding="utf-8",
    )
    [(index, run)] = notebook_cells(nb, "n.ipynb")
    assert index == 1 and run["error"] == "ZeroDivisionError: division by zero" and run["cell_id"]
