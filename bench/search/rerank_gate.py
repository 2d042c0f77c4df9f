"""How often the reranker gate lets the cross-encoder run, and what a run costs.

No cross-encoder weights ship in any package reachable offline, so by default this trains a toy
one from a handful of pairs on the bundled all-MiniLM-L6-v2 (the size of the usual
ms-marco-MiniLM-L-6 cross-encoder): its **quality means nothing**, its cost per query and the
gate's skip rate (which depends on the first-stage rankings, not on the model) are what this
prints. Pass ``--reranker NAME_OR_FOLDER`` to measure a real one, quality included.

    python -m bench.search.rerank_gate [--reranker PATH] [--data ../shared/datasets/beir/scifact] [--out FILE]

Prints the figures as JSON lines and writes them to ``--out`` (default
``bench/results/rerank-gate.json``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.lib.paths import BEIR, RESULTS
from nbmemory.config import set_torch_threads
from nbmemory.eval.beir import load
from nbmemory.eval.cache import CachedEmbedder, cache_root
from nbmemory.eval.harness import make_embedder, prepare_store, run_config
from nbmemory.eval.report import write_json
from nbmemory.eval.scenario import apply_timeline, generate
from nbmemory.memory import Memory
from nbmemory.search.config import PipelineConfig

TOY_PAIRS = [
    ("rotate the api token", "Rotate the API token every 90 days with vault", 1.0),
    ("rotate the api token", "Our cafeteria serves lunch at noon", 0.0),
    ("restart the worker", "Restart the worker with systemctl", 1.0),
    ("restart the worker", "I prefer polars over pandas", 0.0),
] * 4


def toy_cross_encoder() -> str:
    """A cross-encoder trained from 16 pairs, cached under the eval cache (quality: none)."""
    target = cache_root() / "toy-cross-encoder"
    if (target / "config.json").exists():
        return str(target)
    from nbmemory.search.rerank import train_cross_encoder

    return train_cross_encoder(TOY_PAIRS, str(target))


def gate_stats(mem: Memory, queries: list[str], config: PipelineConfig, k: int) -> dict[str, Any]:
    ran, ms_ran, ms_skip = 0, [], []
    reasons: dict[str, int] = {}
    for q in queries:
        t0 = time.perf_counter()
        result = mem.search(q, k=k, config=config, log=False)
        ms = (time.perf_counter() - t0) * 1000
        stage = result.trace.stage("rerank")
        assert stage is not None
        if stage.notes["ran"]:
            ran += 1
            ms_ran.append(stage.ms)
        else:
            ms_skip.append(ms)
        key = str(stage.notes["why"]).split(" (")[0]
        reasons[key] = reasons.get(key, 0) + 1
    return {
        "queries": len(queries),
        "ran": ran,
        "skip_rate": round(1 - ran / max(1, len(queries)), 3),
        "rerank_stage_ms_p50_when_run": round(statistics.median(ms_ran), 1) if ms_ran else None,
        "search_ms_p50_when_skipped": round(statistics.median(ms_skip), 1) if ms_skip else None,
        "why": reasons,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reranker", help="CrossEncoder name or folder (default: a toy one trained here)")
    parser.add_argument("--data", nargs="*", default=[str(BEIR / "scifact")], help="BEIR folders")
    parser.add_argument("--depth", type=int, default=20, help="candidates the cross-encoder scores")
    parser.add_argument(
        "--out",
        type=Path,
        default=RESULTS / "rerank-gate.json",
        help="write the figures here (default %(default)s)",
    )
    args = parser.parse_args(argv)
    set_torch_threads(1)
    reranker = args.reranker or toy_cross_encoder()
    config = PipelineConfig(reranker=reranker, rerank_depth=args.depth)
    embedder = make_embedder(None)
    out: dict[str, Any] = {
        "reranker": reranker if args.reranker else "toy (quality meaningless)",
        "depth": args.depth,
    }

    scenario = generate(7)
    with (
        tempfile.TemporaryDirectory() as tmp,
        Memory(
            Path(tmp) / "s.duckdb", embedder=CachedEmbedder(embedder, "scenario-7"), namespace="scenario"
        ) as mem,
    ):
        ids = mem.remember_many([i.text for i in scenario.items], sources=[i.source for i in scenario.items])
        apply_timeline(mem, scenario, ids)
        out["scenario"] = gate_stats(mem, [q.text for q in scenario.queries], config, 10)
    print("scenario seed 7:", json.dumps(out["scenario"]), flush=True)

    for folder in args.data:
        dataset = load(folder)
        store = prepare_store(dataset, CachedEmbedder(embedder, dataset.name))
        queries = {qid: dataset.queries[qid] for qid in dataset.qrels}
        with Memory(store.path, embedder=CachedEmbedder(embedder, dataset.name)) as mem:
            out[dataset.name] = gate_stats(mem, list(queries.values()), config, 10)
            if args.reranker:
                for name, cfg in (("default", PipelineConfig()), ("default+rerank", config)):
                    run = run_config(mem, name, cfg, queries, dataset.qrels, k=100, keep_hits=False)
                    out[dataset.name][f"ndcg@10 {name}"] = round(run.overall["ndcg@10"], 4)
        print(f"{dataset.name}:", json.dumps(out[dataset.name]), flush=True)
    write_json(out, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
