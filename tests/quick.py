"""How many examples a property test tries: all of them in ``make test``, a quarter (at least ten)
in ``make check``, which sets ``NBMEMORY_TEST_QUICK=1`` to stay a two-minute loop."""

from __future__ import annotations

import os

QUICK = os.environ.get("NBMEMORY_TEST_QUICK") == "1"


def examples(n: int) -> int:
    """``n`` examples, or a quarter of them (at least 10) in the quick loop."""
    return max(10, n // 4) if QUICK else n
