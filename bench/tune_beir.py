"""Tune on BEIR corpora (documents only) and print untuned vs tuned NDCG@10 as JSON and a table.

    .venv/bin/python -m bench.tune_beir --data ../shared/datasets/beir/scifact --sources title

Same as ``nbmemory eval tune-beir``; this wrapper also writes the JSON next to the results.
"""

from __future__ import annotations

import sys

from nbmemory.eval.cli import main_tune_beir

if __name__ == "__main__":
    raise SystemExit(main_tune_beir(sys.argv[1:]))
