"""Fixtures for the evaluation tests: an isolated cache and a tiny BEIR-layout dataset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# Ten documents, four judged queries: small enough to check by eye.
TINY_CORPUS = [
    (
        "d1",
        "Vitamin D and bone density",
        "Vitamin D supplements increase bone mineral density in older adults.",
    ),
    (
        "d2",
        "Statins and muscle pain",
        "Statin therapy is associated with muscle pain in a minority of patients.",
    ),
    (
        "d3",
        "Aspirin after heart attack",
        "Low dose aspirin reduces the risk of a second myocardial infarction.",
    ),
    ("d4", "Sleep and memory", "Deep sleep consolidates declarative memory in young adults."),
    ("d5", "Coffee and liver", "Coffee drinkers have a lower risk of liver cirrhosis."),
    ("d6", "Exercise and depression", "Aerobic exercise reduces symptoms of major depression."),
    (
        "d7",
        "Salt and blood pressure",
        "Reducing dietary salt lowers blood pressure in hypertensive patients.",
    ),
    ("d8", "Gut microbiome", "The gut microbiome shapes immune responses from infancy."),
    ("d9", "Smoking and lung cancer", "Tobacco smoking causes most cases of lung cancer."),
    ("d10", "Fish oil and heart", "Omega-3 fish oil shows no benefit for heart failure outcomes."),
]
TINY_QUERIES = {
    "q1": "does vitamin D improve bone density",
    "q2": "statins cause muscle pain",
    "q3": "aspirin second heart attack",
    "q4": "salt intake and hypertension",
    "train1": "a query that is not in the test split",
}
TINY_QRELS = [("q1", "d1", 1), ("q2", "d2", 2), ("q3", "d3", 1), ("q3", "d10", 1), ("q4", "d7", 1)]


def write_tiny_beir(folder: Path) -> Path:
    """Write the tiny collection in the BEIR layout, with CRLF qrels as in the real release."""
    (folder / "qrels").mkdir(parents=True)
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for doc_id, title, text in TINY_CORPUS:
            fh.write(json.dumps({"_id": doc_id, "title": title, "text": text, "metadata": {}}) + "\n")
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for qid, text in TINY_QUERIES.items():
            fh.write(json.dumps({"_id": qid, "text": text, "metadata": {}}) + "\n")
    lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{r}" for q, d, r in TINY_QRELS]
    (folder / "qrels" / "test.tsv").write_bytes(("\r\n".join(lines) + "\r\n").encode())
    return folder


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Evaluation caches go to the test's own folder, never to ~/.cache.
    monkeypatch.setenv("NBMEMORY_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def tiny_beir(tmp_path: Path) -> Path:
    return write_tiny_beir(tmp_path / "tiny")
