"""How sure the side-by-side's margins are: paired bootstrap intervals over the judged questions.

    python -m bench.margins bench/results/notes-compare.json bench/results/notes-compare-577.json
    python -m bench.margins RUN.json --resamples 20000 --seed 1 --out OUT.json

The intervals and the command are :mod:`nbmemory.eval.margins`; this runs it on
``notes_compare.py`` results, finds their queries files in ``bench/data`` and writes
``bench/results/margins.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from nbmemory.eval.margins import main

BENCH = Path(__file__).resolve().parent

if __name__ == "__main__":
    raise SystemExit(
        main(
            sys.argv[1:],
            prog="python -m bench.margins",
            queries_dir=BENCH / "data",
            out=BENCH / "results" / "margins.json",
        )
    )
