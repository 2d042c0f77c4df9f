"""Every front end on one memory with the real model: two kernels, the Jupyter server's REST routes,
the MCP server and the CLI write, forget and search at once; nothing fails, nothing is lost.

A short run of ``bench/system/frontends_load.py`` (the 10-minute run's figures are in
``bench/results/frontends-load.json``); several minutes on a loaded 2-core machine, most of it
starting the processes: ``pytest tests/test_frontends_load.py -m slow -s``. No timing is asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.integration, pytest.mark.model, pytest.mark.slow]


def test_every_front_end_on_one_memory_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "bench.system.frontends_load", "--seconds", "40", "--pause", "0.5",
         "--dir", str(tmp_path / "run"), "--out", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    messages = {name: actor["error_messages"] for name, actor in result["per_actor"].items()}
    assert result["errors_total"] == 0, messages
    store = result["store"]
    assert store["lost_writes"] == 0, store["lost"]
    assert store["duplicates"] == 0, store["duplicate_examples"]
    assert store["wrong_ids"] == [] and store["unforgotten"] == []
    assert store["doctor_ok"], store["doctor"]
    # A search for another front end's acknowledged write finds it.
    assert result["read_after_write"]["misses"] == 0, [a["read_misses"] for a in result["per_actor"].values()]
    # Every front end wrote and searched, and each of its writes was checked.
    for name, actor in result["per_actor"].items():
        assert actor["ops"]["remember"] > 0 and actor["ops"]["search"] > 0, (name, actor["ops"])
    assert store["acknowledged_writes"] == sum(a["acknowledged_writes"] for a in result["per_actor"].values())
    assert {v for k, v in result["stops"].items() if k != "nbmemory stop"} == {"clean"}, result["stops"]
    assert result["setup"]["server_role"] == "owner"
    assert all(
        v == str(REPO / "nbmemory" / "__init__.py") for k, v in result["setup"].items() if "imports" in k
    )
