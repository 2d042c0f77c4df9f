"""``nbmemory eval``: the BEIR harness and the memory scenario benchmark on the command line."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any


def _configs_help() -> str:
    return "comma-separated configurations: bm25, vector, rrf, default, stage toggles, or all (default: bm25,vector,rrf,default)"


def cmd_eval_beir(args: argparse.Namespace) -> int:
    from nbmemory.eval.harness import IndexOptions, evaluate_beir
    from nbmemory.eval.report import results_table, to_markdown, write_json

    log = None if args.quiet else _log
    results = []
    started = time.perf_counter()
    options = IndexOptions(title=args.title, chunking=args.chunking)
    for path in args.data:
        results.append(
            evaluate_beir(
                path,
                args.configs,
                model=args.eval_model or args.model,
                device=args.device,
                k=args.k,
                limit_queries=args.limit_queries,
                limit_docs=args.limit_docs,
                options=options,
                cache=not args.no_cache,
                torch_threads=args.torch_threads,
                log=log,
            )
        )
    table = results_table(results)
    print(
        to_markdown(
            table.select(
                "dataset",
                "config",
                "ndcg@10",
                "recall@10",
                "recall@100",
                "map@10",
                "mrr@10",
                "p50_ms",
                "p95_ms",
            )
        )
    )
    first = results[0]
    print(
        f"\nmodel {first.model} ({first.fingerprint}) on {first.device}; k={first.k}; "
        f"title={options.title}, chunking={options.chunking}; wall {time.perf_counter() - started:.1f} s"
    )
    for res in results:
        store = res.store
        how = (
            "reused"
            if store.reused
            else f"built in {store.build_s:.1f} s (embedding {store.embed_s:.1f} s, {store.embedded} texts)"
        )
        print(
            f"{res.dataset}: {store.documents} documents, {store.items} items, store {how}; run {res.wall_s:.1f} s"
        )
    if args.json:
        write_json({"results": [r.to_dict(per_query=not args.no_per_query) for r in results]}, args.json)
        print(f"wrote {args.json}")
    return 0


def cmd_eval_scenario(args: argparse.Namespace) -> int:
    from nbmemory.eval.report import to_markdown, write_json
    from nbmemory.eval.scenario import evaluate_scenario

    result = evaluate_scenario(
        args.configs,
        model=args.eval_model or args.model,
        device=args.device,
        seed=args.seed,
        torch_threads=args.torch_threads,
        log=None if args.quiet else _log,
    )
    print(result.describe())
    print(to_markdown(result.table()))
    if args.json:
        write_json(result.to_dict(), args.json)
        print(f"wrote {args.json}")
    return 0


def _log(message: str) -> None:
    print(time.strftime("%H:%M:%S"), message, file=sys.stderr, flush=True)


def add_eval_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``nbmemory eval beir`` and ``nbmemory eval scenario`` to the main parser's subcommands.

    Parameters
    ----------
    subparsers:
        What ``ArgumentParser.add_subparsers`` returned.
    """
    text = "evaluate search quality: BEIR collections (beir) or the memory scenario benchmark (scenario)"
    parser = subparsers.add_parser("eval", help=text, description=text)
    inner = parser.add_subparsers(dest="eval_command", required=True, metavar="BENCHMARK")

    def common(p: argparse.ArgumentParser, default_configs: str) -> None:
        p.add_argument("--configs", default=default_configs, help=_configs_help())
        p.add_argument(
            "--model",
            dest="eval_model",
            help="sentence-transformers model name or local folder (default: the bundled all-MiniLM-L6-v2; 'fake' for a plumbing check)",
        )
        p.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda when present, else cpu)")
        p.add_argument("--json", help="also write the full results (per query too) to this JSON file")
        p.add_argument(
            "--torch-threads",
            type=int,
            help="torch intra-op threads (default: torch's own); 1 gives stable latency on a busy machine",
        )

    text = "evaluate configurations on BEIR folders: NDCG@10, Recall@10/@100, MAP@10, MRR@10, latency"
    p = inner.add_parser("beir", help=text, description=text)
    p.add_argument(
        "--data", nargs="+", required=True, help="BEIR folders (corpus.jsonl, queries.jsonl, qrels/test.tsv)"
    )
    common(p, "bm25,vector,rrf,default")
    p.add_argument("-k", type=int, default=100, help="ranking depth scored per query (default 100)")
    p.add_argument("--limit-queries", type=int, help="evaluate only the first N judged queries")
    p.add_argument("--limit-docs", type=int, help="index at most N documents (the judged ones first)")
    p.add_argument(
        "--title",
        choices=["heading", "body"],
        default="heading",
        help="document title as the heading field (default) or at the start of the body text",
    )
    p.add_argument(
        "--chunking",
        choices=["none", "maxp"],
        default="none",
        help="none: one item per document (default); maxp: chunk long documents, score by best chunk",
    )
    p.add_argument("--no-cache", action="store_true", help="neither read nor write cached vectors and stores")
    p.add_argument("--no-per-query", action="store_true", help="leave per-query metrics out of --json")
    p.set_defaults(fn=cmd_eval_beir)

    text = "the memory scenario benchmark: Hit@1/3/5, MRR, topic coverage, Miss-Empty, with 95% intervals"
    p = inner.add_parser("scenario", help=text, description=text)
    common(p, "bm25,vector,rrf,default")
    p.add_argument("--seed", type=int, default=7, help="generator seed (default 7)")
    p.set_defaults(fn=cmd_eval_scenario)
    return parser
