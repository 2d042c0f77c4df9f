"""Timing helpers the search benchmarks share: progress lines, latency summaries, the machine."""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from typing import Any

import numpy as np

#: When the benchmark started (this module's import): :func:`log` counts from here.
T0 = time.perf_counter()


def log(msg: str) -> None:
    """``msg`` on stderr, after the seconds since the benchmark started."""
    print(f"[{time.perf_counter() - T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def dist(values: list[float]) -> dict[str, float]:
    """p50, p95, mean, min and max of ``values`` (milliseconds), rounded."""
    arr = np.asarray(values, dtype=np.float64)
    return {
        "p50": round(float(np.percentile(arr, 50)), 3),
        "p95": round(float(np.percentile(arr, 95)), 3),
        "mean": round(float(arr.mean()), 3),
        "min": round(float(arr.min()), 3),
        "max": round(float(arr.max()), 3),
    }


def p50(values: list[float]) -> float:
    """The median of ``values``, rounded."""
    return round(float(statistics.median(values)), 3)


def forget_queries(embedder: Any) -> None:
    """Empty the embedder's query LRU so the next query runs the model."""
    cache = getattr(embedder, "_query_cache", None)
    if cache is not None:
        cache.clear()


def loadavg() -> list[float] | None:
    """1/5/15-minute load averages: other work on the machine shows up in every latency."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine_info(embedder: Any) -> dict[str, Any]:
    """What a latency depends on: CPUs, threads, library versions, the model, the load."""
    import apsw
    import duckdb
    import sqlite_vec
    import torch

    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "device": getattr(embedder, "device", "cpu"),
        "cuda_device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "duckdb": duckdb.__version__,
        "sqlite": apsw.sqlite_lib_version(),
        "sqlite_vec": sqlite_vec.__version__ if hasattr(sqlite_vec, "__version__") else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "model": embedder.name,
        "model_fingerprint": embedder.fingerprint,
        "loadavg_start": loadavg(),
    }
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            names = [ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")]
        info["cpu_model"] = names[0] if names else None
    except OSError:
        info["cpu_model"] = None
    return info
