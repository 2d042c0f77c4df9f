"""How sure the side-by-side's margins are: paired bootstrap intervals over the judged questions.

    python -m bench.quality.margins bench/results/notes-compare.json bench/results/notes-compare-577.json
    python -m bench.quality.margins RUN.json --resamples 20000 --seed 1 --out OUT.json

The intervals and the command are :mod:`nbmemory.eval.margins`; this runs it on
``bench.quality.notes_compare`` results, finds their queries files in ``bench/data`` and writes
``--out`` (default ``bench/results/margins.json``).
"""

from __future__ import annotations

import sys

from bench.lib.paths import DATA, RESULTS
from nbmemory.eval.margins import main

if __name__ == "__main__":
    raise SystemExit(
        main(
            sys.argv[1:],
            prog="python -m bench.quality.margins",
            queries_dir=DATA,
            out=RESULTS / "margins.json",
        )
    )
