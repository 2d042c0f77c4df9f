"""Sustained mixed load on one shared memory from several processes; prints JSON (``--out`` also
writes it).

One process owns the DuckDB file (``nbmemory.remote.connect``, as a kernel or the Jupyter server
would); ``--workers`` other processes are its clients and run searches, remembers, gets and
forgets in a fixed mix for ``--seconds``. Every ``--interval`` seconds the figures are cut: count,
p50 and p99 latency per kind. The owner's RSS, the store's file size and its table sizes are
sampled throughout, and the verdict says whether memory or disk grow faster than the data does.

    python -m bench.system.load_bench --seconds 180 --workers 4      # fake embedder (default)
    python -m bench.system.load_bench --seconds 180 --embedder real  # the bundled MiniLM model

The fake embedder (``nbmemory.embed.FakeEmbedder``, 384 dims) keeps the run about the store and
the sharing layer: on 2 cores the real model makes every remember and search CPU-bound on the
encoder, which is measured by ``bench.search.bench_search``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

_WORD_TEXT = (
    "kafka consumer lag broker partition offset replica deploy vpn subnet staging token rotation "
    "garden tomato basil compost harvest invoice budget tax receipt notebook kernel widget search "
    "vector index cache latency throughput memory retention backup restore schema migration"
)
WORDS = _WORD_TEXT.split()
NAMESPACES = ["default", "work", "home", "research"]
KINDS = ("search", "remember", "get", "forget")
DEFAULT_MIX = "search=50,remember=25,get=15,forget=10"


def _embedder(kind: str) -> Any:
    if kind == "real":
        from nbmemory.embed import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(device="cpu")
    from nbmemory.embed import FakeEmbedder

    return FakeEmbedder(dim=384)


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(WORDS, k=n))


# -- the owner process -------------------------------------------------------------------------


def run_owner(args: argparse.Namespace) -> None:
    from nbmemory.remote import connect
    from nbmemory.store import search_log

    if args.search_log_keep is not None:
        search_log.SEARCH_LOG_KEEP = args.search_log_keep  # to see the cap work in a short run
    mem = connect(args.db, embedder=_embedder(args.embedder))
    if mem.role != "owner":
        raise SystemExit("another process owns this file already")
    rng = random.Random(1)
    for start in range(0, args.preload, 500):
        count = min(500, args.preload - start)
        mem.remember_many([_text(rng, 12) for _ in range(count)], namespace=rng.choice(NAMESPACES))
    print(json.dumps({"ready": True, "pid": os.getpid(), "items": args.preload}), flush=True)
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    db = mem.memory.db
    tables = ("chunks", "vectors", "search_log", "request_keys", "fts_delta", "fts_delta_docs")
    while not stop.wait(args.sample):
        with mem._lock:  # the same lock the owner's request threads take
            counts = {t: int(db.scalar(f"SELECT count(*) FROM {t}")) for t in tables}
            counts["live_items"] = int(db.scalar("SELECT count(*) FROM chunks WHERE deleted_at IS NULL"))
        print(json.dumps({"t": time.time(), "counts": counts}), flush=True)
    mem.close()


# -- a worker process --------------------------------------------------------------------------


def run_worker(args: argparse.Namespace) -> None:
    from nbmemory.errors import NotFoundError
    from nbmemory.remote import connect

    mem = connect(args.db, allow_owner=False)
    rng = random.Random(args.seed)
    mix = _mix(args.mix)
    kinds, weights = list(mix), list(mix.values())
    mine: list[int] = []
    # interval -> kind -> latencies in ms
    lat: dict[int, dict[str, list[float]]] = {}
    errors: dict[str, int] = dict.fromkeys(KINDS, 0)
    not_found = 0
    messages: list[str] = []
    while time.time() < args.t0:
        time.sleep(0.01)
    end = args.t0 + args.seconds
    while True:
        now = time.time()
        if now >= end:
            break
        kind = rng.choices(kinds, weights)[0]
        if kind == "forget" and not mine:
            kind = "remember"
        started = time.perf_counter()
        try:
            if kind == "search":
                ns = rng.choice([None, *NAMESPACES])
                mem.search(_text(rng, rng.randrange(1, 4)), k=rng.randrange(5, 21), namespace=ns)
            elif kind == "remember":
                item = mem.remember(_text(rng, rng.randrange(6, 30)), namespace=rng.choice(NAMESPACES),
                                    tags=rng.sample(["ops", "ml", "home"], rng.randrange(0, 2)))  # fmt: skip
                mine.append(int(item.id))
            elif kind == "get":
                pool = mine if mine and rng.random() < 0.5 else None
                item_id = rng.choice(pool) if pool else rng.randrange(1, args.preload + 1)
                mem.get(item_id)
            else:
                mem.forget(mine.pop(rng.randrange(len(mine))))
        except NotFoundError:
            not_found += 1  # another worker forgot it, or it was forgotten before: expected
        except Exception as exc:  # counted and reported, never hidden
            errors[kind] += 1
            if len(messages) < 5:
                messages.append(f"{kind}: {type(exc).__name__}: {exc}"[:300])
        ms = (time.perf_counter() - started) * 1000
        bucket = int((now - args.t0) // args.interval)
        lat.setdefault(bucket, {}).setdefault(kind, []).append(round(ms, 3))
    mem.close()
    print(json.dumps({"latencies": lat, "errors": errors, "not_found": not_found, "messages": messages}))


def _mix(spec: str) -> dict[str, float]:
    mix = {}
    for part in spec.split(","):
        name, _, weight = part.partition("=")
        if name.strip() not in KINDS:
            raise SystemExit(f"unknown operation {name!r} in --mix: use {', '.join(KINDS)}")
        mix[name.strip()] = float(weight)
    return mix


# -- the driver ----------------------------------------------------------------------------------


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _file_mb(db: Path) -> float:
    total = 0
    for path in (db, db.with_name(db.name + ".wal")):
        if path.exists():
            total += path.stat().st_size
    return total / 1e6


def _slope_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per minute."""
    if len(points) < 3:
        return 0.0
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return 60 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def drive(args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(args.dir or tempfile.mkdtemp(prefix="nbm-load-"))
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "memory.duckdb"
    env = {**os.environ, "NBMEMORY_RUNTIME_DIR": str(folder / "run"), "HF_HUB_OFFLINE": "1"}
    me = [sys.executable, str(Path(__file__).resolve())]
    common = ["--db", str(db), "--embedder", args.embedder, "--preload", str(args.preload)]
    owner = subprocess.Popen(
        [*me, "--role", "owner", *common, "--sample", str(args.sample)]
        + ([] if args.search_log_keep is None else ["--search-log-keep", str(args.search_log_keep)]),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert owner.stdout is not None and owner.stdin is not None
    ready = json.loads(owner.stdout.readline())
    counts: list[tuple[float, dict[str, int]]] = []
    threading.Thread(
        target=lambda: [
            counts.append((json.loads(line)["t"], json.loads(line)["counts"])) for line in owner.stdout
        ],  # type: ignore[union-attr]
        daemon=True,
    ).start()
    t0 = time.time() + 2.0
    workers = [
        subprocess.Popen(
            [
                *me,
                "--role",
                "worker",
                *common,
                "--seed",
                str(i),
                "--t0",
                str(t0),
                "--seconds",
                str(args.seconds),
                "--interval",
                str(args.interval),
                "--mix",
                args.mix,
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(args.workers)
    ]
    samples: list[dict[str, float | None]] = []
    while any(w.poll() is None for w in workers):
        now = time.time()
        if now >= t0:
            samples.append(
                {
                    "t": round(now - t0, 1),
                    "owner_rss_mb": _rss_mb(owner.pid),
                    "file_mb": round(_file_mb(db), 2),
                }
            )
        time.sleep(args.sample)
    results = [json.loads(w.communicate()[0].strip().splitlines()[-1]) for w in workers]
    owner.stdin.close()
    owner.wait(timeout=120)
    return _report(args, ready, results, samples, [(t - t0, c) for t, c in counts if t >= t0])


def _report(
    args: argparse.Namespace,
    ready: dict[str, Any],
    results: list[dict[str, Any]],
    samples: list[dict[str, Any]],
    counts: list[tuple[float, dict[str, int]]],
) -> dict[str, Any]:
    merged: dict[int, dict[str, list[float]]] = {}
    for result in results:
        for bucket, kinds in result["latencies"].items():
            for kind, values in kinds.items():
                merged.setdefault(int(bucket), {}).setdefault(kind, []).extend(values)
    intervals = []
    totals: dict[str, list[float]] = {}
    for bucket in sorted(merged):
        row: dict[str, Any] = {"t": f"{bucket * args.interval}-{(bucket + 1) * args.interval}s"}
        for kind in KINDS:
            values = merged[bucket].get(kind, [])
            totals.setdefault(kind, []).extend(values)
            if values:
                row[kind] = {"n": len(values), "p50_ms": _pct(values, 0.5), "p99_ms": _pct(values, 0.99)}
        intervals.append(row)
    errors = {k: sum(r["errors"][k] for r in results) for k in KINDS}
    half = args.seconds / 2
    rss = [(s["t"], s["owner_rss_mb"]) for s in samples if s["owner_rss_mb"] is not None]
    size = [(s["t"], s["file_mb"]) for s in samples]
    second_rss = [p for p in rss if p[0] >= half]
    rows = [(t, float(c["chunks"])) for t, c in counts]
    rss_slope = _slope_per_min(second_rss)
    last = counts[-1][1] if counts else {}
    first = counts[0][1] if counts else {}
    grown_rows = {k: last.get(k, 0) - first.get(k, 0) for k in last}
    file_growth = (size[-1][1] - size[0][1]) if len(size) > 1 else 0.0
    data_rows = max(
        1, grown_rows.get("chunks", 0) + grown_rows.get("search_log", 0) + grown_rows.get("request_keys", 0)
    )
    first_rss = [p for p in rss if p[0] < half]
    first_slope = _slope_per_min(first_rss)
    live_added = max(1, grown_rows.get("live_items", 0))
    rss_added = (rss[-1][1] - rss[0][1]) if len(rss) > 1 else 0.0
    if abs(rss_slope) < max(2.0, 0.01 * (rss[-1][1] if rss else 0)):
        rss_growth = "flat"
    elif rss_slope < 0.5 * first_slope:
        rss_growth = "decelerating: tracks the data added, no sign of a leak"
    else:
        rss_growth = "growing at a steady rate: a leak, or data growing as fast"
    verdict = {
        "owner_rss_mb_start_end": [round(rss[0][1], 1), round(rss[-1][1], 1)] if rss else None,
        "owner_rss_slope_mb_per_min_first_half": round(first_slope, 2),
        "owner_rss_slope_mb_per_min_second_half": round(rss_slope, 2),
        "owner_rss_mb_per_1000_live_items_added": round(1000 * rss_added / live_added, 1),
        "owner_rss_growth": rss_growth,
        "file_mb_start_end": [size[0][1], size[-1][1]] if size else None,
        "file_slope_mb_per_min_second_half": round(_slope_per_min([p for p in size if p[0] >= half]), 2),
        "rows_added_during_run": grown_rows,
        "file_bytes_per_row_added": round(file_growth * 1e6 / data_rows, 1),
        "chunk_rows_slope_per_min": round(_slope_per_min(rows), 1),
        # Soft-deleted chunks stay (by design); search_log and request_keys are capped by
        # SEARCH_LOG_KEEP and REQUEST_KEY_TTL (store/search_log.py), fts_delta by its rebuild threshold.
        "search_log_rows_end": last.get("search_log"),
        "request_keys_rows_end": last.get("request_keys"),
    }
    return {
        "seconds": args.seconds,
        "search_log_keep": args.search_log_keep,
        "workers": args.workers,
        "embedder": args.embedder,
        "mix": args.mix,
        "preloaded_items": ready["items"],
        "ops": {k: len(v) for k, v in totals.items()},
        "ops_per_s": round(sum(len(v) for v in totals.values()) / args.seconds, 1),
        "errors": errors,
        "not_found": sum(r["not_found"] for r in results),
        "error_messages": [m for r in results for m in r["messages"]][:10],
        "latency_ms": {k: {"p50": _pct(v, 0.5), "p99": _pct(v, 0.99)} for k, v in totals.items() if v},
        "intervals": intervals,
        "samples": samples[:: max(1, len(samples) // 40)],
        "table_rows": [{"t": round(t, 1), **c} for t, c in counts][:: max(1, len(counts) // 20)],
        "verdict": verdict,
        "load_average": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=180, help="load duration (default 180)")
    parser.add_argument("--workers", type=int, default=4, help="client processes (default 4)")
    parser.add_argument(
        "--interval", type=float, default=20, help="seconds per reported interval (default 20)"
    )
    parser.add_argument(
        "--sample", type=float, default=2, help="seconds between RSS / file samples (default 2)"
    )
    parser.add_argument(
        "--embedder", choices=["fake", "real"], default="fake", help="fake (default) or the real model"
    )
    parser.add_argument(
        "--preload", type=int, default=2000, help="items stored before the run (default 2000)"
    )
    parser.add_argument("--mix", default=DEFAULT_MIX, help=f"operation weights (default {DEFAULT_MIX})")
    parser.add_argument("--dir", help="folder for the memory file (default: a new temporary folder)")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    parser.add_argument(
        "--search-log-keep",
        type=int,
        help="search_log rows the owner keeps (default: nbmemory's SEARCH_LOG_KEEP)",
    )
    # Internal: the same script runs the owner and the workers.
    parser.add_argument(
        "--role", choices=["driver", "owner", "worker"], default="driver", help=argparse.SUPPRESS
    )
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--t0", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "owner":
        run_owner(args)
    elif args.role == "worker":
        run_worker(args)
    else:
        text = json.dumps(drive(args), indent=1)
        print(text)
        if args.out:
            args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
