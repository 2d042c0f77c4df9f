"""``nbmemory eval``: the BEIR harness and the memory scenario benchmark on the command line."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any


def _configs_help() -> str:
    return (
        "comma-separated configurations: bm25, vector, rrf, default, stage toggles, or all "
        "(default: bm25,vector,rrf,default); tuned and tuned-vector need --tuned-model"
    )


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
                tuned_model=args.tuned_model,
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
    if first.tuned_model:
        print(f"tuned configurations: model {first.tuned_model} ({first.tuned_fingerprint})")
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


def cmd_eval_notes(args: argparse.Namespace) -> int:
    from nbmemory.eval.notes import evaluate_notes, printable
    from nbmemory.eval.report import to_markdown, write_json

    result = evaluate_notes(
        args.corpus,
        args.queries,
        args.configs,
        split=args.split,
        model=args.eval_model or args.model,
        device=args.device,
        k=args.k,
        fetch_k=args.fetch_k,
        limit_queries=args.limit_queries,
        limit_files=args.limit_files,
        cache=not args.no_cache,
        torch_threads=args.torch_threads,
        log=None if args.quiet else _log,
    )
    print(to_markdown(printable(result.table())))
    print(f"\n{result.describe()}")
    if args.json:
        write_json(result.to_dict(per_query=not args.no_per_query), args.json)
        print(f"wrote {args.json}")
    return 0


def add_tune_beir_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``nbmemory eval tune-beir``."""
    p.add_argument(
        "--data", nargs="+", required=True, help="BEIR folders (the corpus is mined, never the queries)"
    )
    p.add_argument(
        "--sources",
        default="title",
        help="query sources mined from the documents: title, first_sentence or title,first_sentence (default title)",
    )
    p.add_argument("--max-triples", type=int, default=2048, help="triples trained on (default 2048)")
    p.add_argument("--epochs", type=int, default=1, help="training epochs (default 1)")
    p.add_argument("--batch-size", type=int, default=32, help="triples per step (default 32)")
    p.add_argument("--lr", type=float, default=2e-5, help="peak learning rate (default 2e-5)")
    p.add_argument(
        "--max-seq-length", type=int, help="word pieces per text (default 128 on CPU, 256 on CUDA)"
    )
    p.add_argument("--seed", type=int, default=42, help="seed for sampling and training (default 42)")
    p.add_argument(
        "--no-hard-negatives",
        action="store_true",
        help="train on (query, positive) pairs with in-batch negatives only, without the mined negatives",
    )
    p.add_argument(
        "--negative-margin",
        type=float,
        help="drop mined negatives at least this similar to the query relative to the positive (e.g. 0.95)",
    )
    p.add_argument("--model", dest="eval_model", help="base model (default: the bundled all-MiniLM-L6-v2)")
    p.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda when present, else cpu)")
    p.add_argument(
        "--output", help="folder for the tuned model (one dataset only; default under the eval cache)"
    )
    p.add_argument("--json", help="also write the results to this JSON file")
    p.add_argument("--limit-queries", type=int, help="evaluate only the first N judged queries")
    p.add_argument("--limit-docs", type=int, help="index at most N documents (the judged ones first)")
    p.add_argument(
        "--torch-threads",
        type=int,
        help="torch intra-op threads (default: torch's own); 1 is faster on a busy machine",
    )


def cmd_eval_tune_beir(args: argparse.Namespace) -> int:
    from nbmemory.errors import ConfigError
    from nbmemory.eval.report import to_markdown, write_json
    from nbmemory.eval.tune_beir import tune_beir
    from nbmemory.tune.train import TrainConfig

    if args.output and len(args.data) > 1:
        raise ConfigError("--output names one model folder: give one --data folder with it")
    from nbmemory.config import set_torch_threads

    set_torch_threads(args.torch_threads)
    log = None if getattr(args, "quiet", False) else _log
    sources = tuple(s.strip() for s in args.sources.split(",") if s.strip())
    results = []
    for path in args.data:
        config = TrainConfig(
            epochs=args.epochs,
            batch_size=args.batch_size,
            learning_rate=args.lr,
            max_seq_length=args.max_seq_length,
            seed=args.seed,
            device=args.device,
            hard_negatives=not args.no_hard_negatives,
        )
        results.append(
            tune_beir(
                path,
                sources=sources,
                max_triples=args.max_triples,
                train=config,
                model=args.eval_model,
                device=args.device,
                output=args.output,
                seed=args.seed,
                limit_queries=args.limit_queries,
                limit_docs=args.limit_docs,
                negative_margin=args.negative_margin,
                log=log,
            )
        )
    import polars as pl

    print(to_markdown(pl.DataFrame([row for r in results for row in r.rows()]), float_digits=4))
    for r in results:
        m, t = r.mining, r.training
        print(
            f"{r.dataset}: sources {','.join(r.sources)}; {m.queries} queries mined, "
            f"{m.disagreement_rate:.1%} disagree, {len(m.triples)} triples; trained {t.steps} steps "
            f"({t.triples} {'triples' if t.config.get('hard_negatives', True) else 'pairs, no hard negatives'}, "
            f"seq {t.max_seq_length}) on {t.device} in {t.seconds:.0f} s; "
            f"total {r.wall_s:.0f} s; model {r.model_path}"
        )
        print(f"  gate: {r.gate.reason}")
    if args.json:
        write_json({"results": [r.to_dict() for r in results]}, args.json)
        print(f"wrote {args.json}")
    return 0


def main_tune_beir(argv: list[str]) -> int:
    """``python -m bench.tune_beir ...``: the same as ``nbmemory eval tune-beir``."""
    parser = argparse.ArgumentParser(prog="bench.tune_beir", description=__doc__)
    add_tune_beir_arguments(parser)
    args = parser.parse_args(argv)
    return cmd_eval_tune_beir(args)


def _log(message: str) -> None:
    print(time.strftime("%H:%M:%S"), message, file=sys.stderr, flush=True)


def add_eval_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``nbmemory eval beir`` and ``nbmemory eval scenario`` to the main parser's subcommands.

    Parameters
    ----------
    subparsers:
        What ``ArgumentParser.add_subparsers`` returned.
    """
    text = (
        "evaluate search quality: BEIR collections (beir), a notes folder with judged queries (notes) "
        "or the memory scenario benchmark (scenario)"
    )
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
    p.add_argument(
        "--tuned-model",
        help="model folder for the tuned and tuned-vector configurations (written by `nbmemory tune`)",
    )
    p.set_defaults(fn=cmd_eval_beir)

    text = (
        "mine triples from BEIR documents only, fine-tune, and print untuned vs tuned NDCG@10 "
        "on the judged test queries"
    )
    p = inner.add_parser("tune-beir", help=text, description=text)
    add_tune_beir_arguments(p)
    p.set_defaults(fn=cmd_eval_tune_beir)

    text = (
        "evaluate configurations on a notes folder with judged queries, file by file: Hit@1/5/10, "
        "MRR@10 per query kind, miss flags, false flags, latency"
    )
    p = inner.add_parser("notes", help=text, description=text)
    p.add_argument("--corpus", required=True, help="the notes folder (indexed with `nbmemory index`'s path)")
    p.add_argument(
        "--queries",
        required=True,
        help='JSONL, one {"qid", "query", "kind", "targets", "split"} per line; targets relative to --corpus',
    )
    common(p, "bm25,vector,rrf,default")
    p.add_argument(
        "--split", choices=["dev", "test", "all"], default="dev", help="which queries to run (default dev)"
    )
    p.add_argument("-k", type=int, default=10, help="files kept per query (default 10)")
    p.add_argument(
        "--fetch-k",
        type=int,
        help="results asked of search per query (default 3 * k; k is what %%memsearch asks: grouped "
        "results are one per file)",
    )
    p.add_argument("--limit-queries", type=int, help="run only the first N queries of the split")
    p.add_argument(
        "--limit-files", type=int, help="index at most N files of the corpus (the target files first)"
    )
    p.add_argument("--no-cache", action="store_true", help="neither read nor write cached vectors and stores")
    p.add_argument("--no-per-query", action="store_true", help="leave per-query rows out of --json")
    p.set_defaults(fn=cmd_eval_notes)

    text = "the memory scenario benchmark: Hit@1/3/5, MRR, topic coverage, Miss-Empty, with 95% intervals"
    # A help string is %-formatted by argparse: "95%" must be written "95%%" there.
    p = inner.add_parser("scenario", help=text.replace("%", "%%"), description=text)
    common(p, "bm25,vector,rrf,default")
    p.add_argument("--seed", type=int, default=7, help="generator seed (default 7)")
    p.set_defaults(fn=cmd_eval_scenario)
    return parser
