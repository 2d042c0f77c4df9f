"""Wall time of `nbmemory search` as a user runs it, with the real model: prints JSON and writes it
to ``--out`` (default ``bench/results/cli-latency.json``).

    python -m bench.system.cli_latency [--runs 30] [--out FILE]

Measured on a fresh memory holding the bundled sample corpus, each figure from separate
processes of the installed `nbmemory` command:

- ``cold``: the first search, no owner running: it starts the background owner (imports, DuckDB,
  model load) and is its client;
- ``warm``: later searches, served by that owner (distinct queries: the owner's query cache
  does not help);
- ``held``: searches while another process (a kernel) owns the memory and no background owner
  runs;
- ``in_process``: ``NBMEMORY_IDLE_SECONDS=0``, each run opening the memory itself (the behaviour
  before the warm owner).

Wall times depend on what else runs: the JSON has the load average before, during and after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from bench.lib.paths import REPO, RESULTS
from nbmemory.eval.report import write_json

SAMPLE = REPO / "nbmemory" / "sample_corpus"
QUERIES = [
    "how do I rotate the api token",
    "staging database host",
    "kafka consumer lag alert",
    "vpn for deploys",
    "polars lazy frame join",
    "flaky test retry",
    "backup restore procedure",
    "grafana dashboard panel",
    "python packaging wheel",
    "incident postmortem timeline",
    "duckdb extension load",
    "jupyter kernel restart",
    "secret redaction regex",
    "docker compose volumes",
    "numpy broadcasting rules",
    "on-call handover checklist",
    "terraform state lock",
    "embedding model fine-tune",
    "csv encoding error",
    "git rebase conflict",
]
# A kernel that owns the memory: the process `held` measures against.
KERNEL = textwrap.dedent(
    """
    import sys, time
    from nbmemory.remote import connect
    mem = connect(sys.argv[1])
    mem.search("warm up", log=False)
    print("ready", flush=True)
    sys.stdin.read()
    mem.close()
    """
)


def command() -> list[str]:
    """The installed console script beside this interpreter, else ``python -m nbmemory.cli``."""
    script = Path(sys.executable).with_name("nbmemory")
    return [str(script)] if script.exists() else [sys.executable, "-m", "nbmemory.cli"]


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    run = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    elapsed = time.perf_counter() - start
    if run.returncode != 0:
        raise SystemExit(f"{argv} failed: {run.stderr}")
    return elapsed, run


def summary(seconds: list[float]) -> dict[str, Any]:
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "runs": len(ordered),
        "p50_s": round(statistics.median(ordered), 3),
        "p95_s": round(p95, 3),
        "min_s": round(ordered[0], 3),
        "max_s": round(ordered[-1], 3),
    }


def searches(env: dict[str, str], runs: int, start: int = 0) -> list[float]:
    out = []
    for i in range(runs):
        query = QUERIES[(start + i) % len(QUERIES)] + ("" if start + i < len(QUERIES) else f" {start + i}")
        elapsed, _ = timed([*command(), "-q", "search", query], env)
        out.append(elapsed)
    return out


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=30, help="warm and held searches (default 30)")
    parser.add_argument("--in-process-runs", type=int, default=3, help="runs without an owner (default 3)")
    parser.add_argument(
        "--out",
        type=Path,
        default=RESULTS / "cli-latency.json",
        help="write the JSON here (default %(default)s)",
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="nbm-bench-"))
    env = {
        **os.environ,
        "NBMEMORY_HOME": str(tmp / "home"),
        "NBMEMORY_RUNTIME_DIR": str(tmp / "run"),
        "NBMEMORY_IDLE_SECONDS": "600",
        "HF_HUB_OFFLINE": "1",
    }
    result: dict[str, Any] = {
        "command": " ".join(Path(a).name if i == 0 else a for i, a in enumerate(command()))
        + " -q search QUERY",
        "cpus": os.cpu_count(),
        "load_before": load(),
    }
    try:
        # The memory: the sample corpus, indexed by a first run (which starts an owner), then
        # that owner is stopped so the cold search starts from nothing.
        elapsed, run = timed([*command(), "-q", "index", str(SAMPLE)], env)
        result["corpus"] = {"index_s": round(elapsed, 2), "report": run.stdout.strip().splitlines()}
        timed([*command(), "stop"], env)

        elapsed, run = timed([*command(), "-q", "search", "where are the deploy notes"], env)
        result["cold"] = {"s": round(elapsed, 3), "load": load()}
        searches(env, 3, start=len(QUERIES))  # the owner's first searches warm DuckDB's caches
        result["warm"] = {**summary(searches(env, args.runs)), "load": load()}
        timed([*command(), "stop"], env)

        kernel = subprocess.Popen(
            [sys.executable, "-c", KERNEL, str(tmp / "home" / "memory.duckdb")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            assert kernel.stdout is not None and kernel.stdout.readline().strip() == "ready"
            _, run = timed([*command(), "stats", "--json"], env)
            assert json.loads(run.stdout)["owner_pid"] == kernel.pid
            searches(env, 3, start=len(QUERIES) + 3)
            result["held"] = {**summary(searches(env, args.runs, start=5)), "load": load()}
        finally:
            assert kernel.stdin is not None
            kernel.stdin.close()
            kernel.wait(timeout=60)

        if args.in_process_runs:
            own = {**env, "NBMEMORY_IDLE_SECONDS": "0"}
            result["in_process"] = {**summary(searches(own, args.in_process_runs)), "load": load()}
    finally:
        subprocess.run([*command(), "stop"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)
    result["load_after"] = load()
    print(json.dumps(result, indent=2))
    write_json(result, args.out)


if __name__ == "__main__":
    main()
