"""Kill writers to a memory file at random points, many times, and check what survives.

Run from the repository root (the harness lives with the tests, in tests/reliability/):

    HF_HUB_OFFLINE=1 python bench/crash_harness.py --runs 50 --seed 1 -v

One line per kill on stderr with ``-v``, a summary line on stderr, the figures as JSON on stdout;
exit status 1 if any run failed (its store is kept under ``--workdir``/failures).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.reliability.crash_harness import main

if __name__ == "__main__":
    raise SystemExit(main())
