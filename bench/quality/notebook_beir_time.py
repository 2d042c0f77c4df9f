"""How long the built-in BEIR notebook takes a person, per collection: a copy made by
``nbmemory notebooks`` run unedited top to bottom (``tools/run_notebooks.py``, a real kernel) on
one full collection at a time, first with an empty vector cache (everything embedded, as on a
first run), then again with the cache it filled. Reported per run: the whole notebook, the subset
cell and the full-collection cell (nbclient's timings), the embedding time the notebook printed,
and the device line it printed (CUDA when torch sees a GPU).

    python -m bench.quality.notebook_beir_time [--data DIR] [--datasets scifact,nfcorpus] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import nbformat

ROOT = Path(__file__).resolve().parents[2]
SUBSET_CELL, FULL_CELL = "beir-04", "beir-07"


def _seconds(cell: Any) -> float | None:
    timing = cell.get("metadata", {}).get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not (start and end):
        return None
    parse = datetime.fromisoformat
    return round((parse(end.replace("Z", "+00:00")) - parse(start.replace("Z", "+00:00"))).total_seconds(), 1)


def run_once(data: Path, name: str, cache: Path, work: Path) -> dict[str, Any]:
    """Copy the notebook into ``work`` and run it on collection ``name`` with vector cache ``cache``."""
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "nbmemory.cli", "notebooks", str(work)], check=True, capture_output=True
    )
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "NBMEMORY_BEIR_DIR": str(data),
        "NBMEMORY_BEIR_DATASETS": name,
        "NBMEMORY_BEIR_FETCH": "0",
        "NBMEMORY_CACHE": str(cache),
        "NBMEMORY_HOME": str(work / "home"),
        "NBMEMORY_IDLE_SECONDS": "0",
    }
    load_before = os.getloadavg()
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "run_notebooks.py"), str(work), "beir_evaluation.ipynb"],
        env=env, capture_output=True, text=True, timeout=4 * 3600,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the notebook failed on {name}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    nb = nbformat.read(work / "beir_evaluation.executed.ipynb", as_version=4)
    cells = {c.get("id"): c for c in nb.cells}
    printed = "\n".join(
        str(o.get("text", "")) for c in nb.cells for o in c.get("outputs", []) if o.get("name") == "stdout"
    )
    embedded = re.search(r"embedded in (\d+) s", printed)
    device = re.search(r"^embedding on [^\n;]*", printed, re.M)
    timed = [s for c in nb.cells if (s := _seconds(c)) is not None]
    return {
        "notebook_s": round(sum(timed), 1),
        "subset_cell_s": _seconds(cells[SUBSET_CELL]),
        "full_cell_s": _seconds(cells[FULL_CELL]),
        "full_embedding_s": int(embedded.group(1)) if embedded else None,
        "device": device.group(0) if device else None,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.quality.notebook_beir_time", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "datasets" / "beir")
    parser.add_argument("--datasets", default="scifact,nfcorpus")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "notebook-beir-time.json")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"cpus": os.cpu_count(), "collections": {}}
    with tempfile.TemporaryDirectory(prefix="nbmemory-notebook-time-") as tmp:
        for name in args.datasets.split(","):
            cache = Path(tmp) / f"cache-{name}"
            runs = {
                "first run (empty cache)": run_once(args.data, name, cache, Path(tmp) / f"{name}-cold"),
                "second run (cached)": run_once(args.data, name, cache, Path(tmp) / f"{name}-cached"),
            }
            results["collections"][name] = runs
            for label, figures in runs.items():
                print(f"{name}, {label}: {json.dumps(figures)}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
