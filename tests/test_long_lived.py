"""Long-lived objects are frozen out of the garbage collector's walk (nbmemory.long_lived), in a
child process: the test process keeps it off (tests/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CHILD = """
import gc, json, sys
from nbmemory import Memory
from nbmemory.embed import FakeEmbedder

with Memory(sys.argv[1], embedder=FakeEmbedder(dim=32)) as mem:
    for i in range(50):
        mem.remember(f"note {i} about topic {i % 7}")
    before = gc.get_freeze_count()
    mem.search("topic 3", k=5)  # builds the memory-resident index
    print(json.dumps({"before": before, "after": gc.get_freeze_count(), "young": len(gc.get_objects(0))}))
"""


def _child(tmp_path: Path, freeze: str) -> dict[str, int]:
    env = {**os.environ, "NBMEMORY_GC_FREEZE": freeze, "NBMEMORY_HOME": str(tmp_path / "home")}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / f"m{freeze}.duckdb")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_index_build_freezes_what_exists_and_the_switch_turns_it_off(tmp_path: Path) -> None:
    on = _child(tmp_path, "1")
    # Counts, not times: the objects a full collection would walk moved to the permanent generation.
    assert on["after"] > on["before"] + 10_000
    off = _child(tmp_path, "0")
    assert off["after"] == off["before"] == 0
