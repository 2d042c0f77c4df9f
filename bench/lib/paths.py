"""Where the benchmarks read and write: the repository, ``bench/data``, ``bench/results``, and the
datasets in the ``shared/`` folder beside the repository."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "bench" / "data"
RESULTS = REPO / "bench" / "results"
SHARED = REPO.parent / "shared"
BEIR = SHARED / "datasets" / "beir"
NOTES_CORPUS = SHARED / "datasets" / "notes" / "jbranchaud-til" / "corpus"
NOTES_QUERIES = DATA / "notes-queries.jsonl"
