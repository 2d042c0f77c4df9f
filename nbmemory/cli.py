"""The ``nbmemory`` command line: the same verbs as the :class:`~nbmemory.Memory` facade."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

from nbmemory.errors import NbMemoryError

DESCRIPTION = "nbmemory: a local-first personal memory with hybrid (BM25 + vector) search."


def _memory(args: argparse.Namespace, **kwargs: Any) -> Any:
    # connect(): when a Jupyter server or a kernel already owns the file, this CLI run becomes
    # its client instead of failing on DuckDB's lock.
    from nbmemory.remote import connect

    return connect(args.db, home=args.home, model=args.model, progress=not args.quiet, **kwargs)


def _ranks(hit: Any) -> str:
    parts = []
    for name in ("bm25", "vector"):
        rank = hit.ranks.get(name)
        parts.append(f"{name} #{rank}" if rank else f"{name} -")
    return ", ".join(parts)


def print_hits(result: Any, out: Any = None) -> None:
    """Human-readable ranked hits with which retriever found each."""
    out = out or sys.stdout
    if not result.hits:
        print(f"  (no results: {result.reason})" if result.rejected else "  (no results)", file=out)
        return
    for rank, hit in enumerate(result.hits, start=1):
        tier = f" {hit.tier}" if hit.tier != "none" else ""
        print(f"{rank:>3}. [{hit.score:.4f}{tier}] #{hit.id} {hit.location}  ({_ranks(hit)})", file=out)
        if hit.heading:
            print(f"     {hit.heading}", file=out)
        for line in textwrap.wrap(hit.snippet, width=96)[:3]:
            print(f"     {line}", file=out)


def cmd_index(args: argparse.Namespace) -> int:
    with _memory(args) as mem:
        report = mem.index(*args.paths, namespace=args.ns)
    for path, reason in report.skipped:
        print(f"skipped {path}: {reason}", file=sys.stderr)
    print(report.summary())
    return 0


def _filters(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "namespace": args.ns,
        "kind": args.kind or None,
        "path": args.path,
        "tags": args.tag or (),
        "since": args.since,
        "until": args.until,
    }


def cmd_search(args: argparse.Namespace) -> int:
    from nbmemory.search.pipeline import PipelineConfig

    config = None
    if args.retrievers:
        config = PipelineConfig(retrievers=tuple(args.retrievers.split(",")))
    with _memory(args) as mem:
        result = mem.search(args.query, k=args.k, config=config, **_filters(args))
    if args.json:
        payload: dict[str, Any] = {
            "query": result.query,
            "hits": [h.to_dict() for h in result.hits],
            "rejected": result.rejected,
            "reason": result.reason,
        }
        if args.explain:
            payload["trace"] = result.trace.to_dict()
        print(json.dumps(payload, indent=2, default=str, ensure_ascii=False))
        return 0
    print_hits(result)
    if args.explain:
        print()
        print(result.explain(top=args.k))
    return 0


def cmd_remember(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.text == "-" else args.text
    with _memory(args) as mem:
        item = mem.remember(text, tags=args.tag or (), importance=args.importance, namespace=args.ns)
    print(
        f"remembered #{item.id} in namespace {item.namespace!r}" + (f" tags={item.tags}" if item.tags else "")
    )
    if item.text != text.strip():
        print("note: secrets were redacted before storing", file=sys.stderr)
    return 0


def cmd_forget(args: argparse.Namespace) -> int:
    given = sum(bool(x) for x in (args.ids, args.query, args.path))
    if given != 1:
        raise NbMemoryError("forget needs ids, or --query TEXT, or --path PATH (exactly one)")
    with _memory(args) as mem:
        if args.query and not args.yes:
            result = mem.search(args.query, k=args.k, namespace=args.ns, log=False)
            print(f"would forget {len(result.hits)} item(s); run again with --yes to forget them:")
            print_hits(result)
            return 0
        ids = mem.forget(args.ids or None, query=args.query, k=args.k, path=args.path, namespace=args.ns)
    print(f"forgot {len(ids)} item(s)" + (f": {', '.join(map(str, ids[:20]))}" if ids else ""))
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    with _memory(args) as mem:
        item = mem.get(args.id)
    if args.json:
        from dataclasses import asdict

        print(json.dumps(asdict(item), indent=2, default=str, ensure_ascii=False))
    else:
        print(f"#{item.id} {item.location} [{item.kind}, ns={item.namespace}, importance={item.importance}]")
        if item.heading:
            print(item.heading)
        print(item.text)
    return 0


def cmd_update(args: argparse.Namespace) -> int:
    with _memory(args) as mem:
        item = mem.update(args.id, text=args.text, tags=args.tag, importance=args.importance, pinned=args.pin)
    print(f"updated #{item.id}")
    return 0


def cmd_related(args: argparse.Namespace) -> int:
    from nbmemory.search.pipeline import SearchResult
    from nbmemory.search.trace import Trace

    with _memory(args) as mem:
        hits = mem.related(args.id, k=args.k, namespace=args.ns)
    print_hits(SearchResult(f"related to #{args.id}", hits, Trace("")))
    return 0


def cmd_link(args: argparse.Namespace) -> int:
    with _memory(args) as mem:
        mem.link(args.src, args.dst, args.type, note=args.note)
    print(f"linked #{args.src} -[{args.type}]-> #{args.dst}")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    with _memory(args) as mem:
        stats = mem.stats()
    if args.json:
        print(json.dumps(stats, indent=2, default=str))
    else:
        for key, value in stats.items():
            print(f"{key:>18}: {value}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    with _memory(args, on_model_change="defer") as mem:
        report = mem.doctor(repair=args.repair)
    print(report.summary())
    if not report.ok:
        print("problems found: run `nbmemory doctor --repair` to fix them", file=sys.stderr)
    return 0 if report.ok else 1


def cmd_export(args: argparse.Namespace) -> int:
    with _memory(args) as mem:
        count = mem.export(args.out, include_forgotten=args.include_forgotten)
    print(f"exported {count} items to {args.out}")
    return 0


def cmd_reembed(args: argparse.Namespace) -> int:
    with _memory(args, on_model_change="defer") as mem:
        count = mem.reembed()
    print(f"re-embedded {count} items")
    return 0


def _owned(shared: Any, what: str) -> Any:
    """The local Memory behind a connection; a long job never runs inside another process's owner."""
    if shared.memory is None:
        raise NbMemoryError(
            f"{shared.path} is open in another process (a Jupyter kernel or server, or another "
            f"CLI run): {what} runs for minutes, so run it there (%memtune in a notebook) or "
            "close that process and run this again"
        )
    return shared.memory


def _text_progress(quiet: bool) -> Any:
    shown: dict[str, int] = {}

    def progress(phase: str, fraction: float) -> None:
        step = int(fraction * 10)
        if quiet or shown.get(phase) == step:
            return
        shown[phase] = step
        print(f"{phase}: {fraction:.0%}", file=sys.stderr, flush=True)

    return progress


def cmd_tune(args: argparse.Namespace) -> int:
    from nbmemory.tune.run import DEFAULT_SOURCES, TuneOptions
    from nbmemory.tune.train import TrainConfig

    sources = tuple(
        s.strip()
        for part in (args.query_source or [",".join(DEFAULT_SOURCES)])
        for s in part.split(",")
        if s.strip()
    )
    options = TuneOptions(
        sources=sources,
        max_queries=args.max_queries,
        max_triples=args.max_triples,
        train=TrainConfig(
            epochs=args.epochs,
            batch_size=args.batch_size,
            learning_rate=args.lr,
            max_steps=args.max_steps,
            max_seq_length=args.max_seq_length,
            seed=args.seed,
            device=args.device,
            hard_negatives=not args.no_hard_negatives,
        ),
        min_delta=args.min_gain,
        namespace=args.ns,
    )
    if args.torch_threads is not None:
        from nbmemory.eval.harness import set_torch_threads

        set_torch_threads(args.torch_threads)
    with _memory(args) as shared:
        report = _owned(shared, "tuning").tune(options, progress=_text_progress(args.quiet))
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        print(report.summary())
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    if args.action == "use":
        if not args.version:
            raise NbMemoryError("which version? `nbmemory models use VERSION` (see `nbmemory models`)")
        with _memory(args) as shared:
            count = _owned(shared, "switching models").use_model(args.version)
        print(f"now using model version {args.version}: re-embedded {count} items")
        return 0
    if args.version:
        raise NbMemoryError(
            f"unexpected {args.version!r}: `nbmemory models` or `nbmemory models use VERSION`"
        )
    with _memory(args) as shared:
        rows = shared.models()
    if args.json:
        from dataclasses import asdict

        print(json.dumps([asdict(r) for r in rows], indent=2, default=str))
        return 0
    if not rows:
        print("no model versions yet: `nbmemory tune` makes one")
        return 0
    for r in rows:
        held = r.scores.get("held_out_ndcg@10", {})
        score = ""
        if held:
            score = (
                f" held-out ndcg@10 {held['current']['default']:.4f} -> {held['candidate']['default']:.4f}"
            )
        flags = ("active " if r.active else "") + ("in use" if r.in_use else "")
        print(f"{'*' if r.active else ' '} {r.version:<6} {r.status:<8} {flags:<14} {r.model}{score}")
        if r.note:
            print(f"         {r.note}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from nbmemory.demo import run_demo

    return run_demo(home=args.home, db=args.db, model=args.model, quiet=args.quiet)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nbmemory", description=DESCRIPTION)
    parser.add_argument("--home", help="folder of the memory file (default $NBMEMORY_HOME or ~/.nbmemory)")
    parser.add_argument("--db", help="the memory file itself (overrides --home)")
    parser.add_argument(
        "--model", help="sentence-transformers model name or local folder (default: bundled all-MiniLM-L6-v2)"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, fn: Any, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(fn=fn)
        return p

    def filters(p: argparse.ArgumentParser) -> None:
        p.add_argument("--ns", help="only this namespace (default: all)")
        p.add_argument(
            "--kind",
            action="append",
            choices=["markdown", "notebook", "code", "text", "memory"],
            help="only this kind (repeatable)",
        )
        p.add_argument("--path", help="only sources matching this glob, e.g. '*/ops/*.md'")
        p.add_argument("--tag", action="append", help="only items with this tag (repeatable: all must match)")
        p.add_argument("--since", help="updated since: ISO date or an age like 30d, 12h")
        p.add_argument("--until", help="updated until: ISO date or an age")

    p = add("index", cmd_index, "index files and folders (markdown, notebooks, code, text), incrementally")
    p.add_argument("paths", nargs="+", help="files or folders")
    p.add_argument("--ns", help="namespace to index into (default: 'default')")

    p = add("search", cmd_search, "hybrid search; prints ranked hits and which retriever found each")
    p.add_argument("query")
    p.add_argument("-k", type=int, default=10, help="number of hits (default 10)")
    filters(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--explain", action="store_true", help="show the ranking trace, stage by stage")
    p.add_argument("--retrievers", help="bm25, vector or bm25,vector (default both)")

    p = add("remember", cmd_remember, "remember a piece of text ('-' reads standard input)")
    p.add_argument("text")
    p.add_argument("--tag", action="append", help="tag (repeatable)")
    p.add_argument("--importance", type=float, default=0.5, help="0..1 (default 0.5)")
    p.add_argument("--ns", help="namespace (default: 'default')")

    p = add("forget", cmd_forget, "forget items by id, by --query or by --path (soft delete)")
    p.add_argument("ids", nargs="*", type=int, help="item ids")
    p.add_argument("--query", help="forget the top -k hits of this query (asks for --yes)")
    p.add_argument("-k", type=int, default=1, help="with --query: how many hits (default 1)")
    p.add_argument("--path", help="forget everything from this file (or glob)")
    p.add_argument("--ns", help="only in this namespace")
    p.add_argument("--yes", action="store_true", help="with --query: really forget")

    p = add("get", cmd_get, "show one item")
    p.add_argument("id", type=int)
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = add("update", cmd_update, "change an item's text, tags, importance or pin")
    p.add_argument("id", type=int)
    p.add_argument("--text", help="new text")
    p.add_argument("--tag", action="append", help="replace tags (repeatable)")
    p.add_argument("--importance", type=float, help="0..1")
    p.add_argument("--pin", action=argparse.BooleanOptionalAction, default=None, help="pin or --no-pin")

    p = add("related", cmd_related, "items most similar to an item, and those linked to it")
    p.add_argument("id", type=int)
    p.add_argument("-k", type=int, default=5, help="number of hits (default 5)")
    p.add_argument("--ns", help="only this namespace (default: all)")

    p = add(
        "link",
        cmd_link,
        "link two items (similar, related, contradicts, extends, supersedes, caused_by, temporal)",
    )
    p.add_argument("src", type=int)
    p.add_argument("dst", type=int)
    p.add_argument("--type", default="related", help="link type (default related)")
    p.add_argument("--note", help="free text")

    p = add("stats", cmd_stats, "counts, sizes, model and index state")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = add(
        "doctor", cmd_doctor, "check integrity (orphans, missing vectors, indexes, model); --repair fixes"
    )
    p.add_argument("--repair", action="store_true", help="fix what can be fixed")

    p = add("export", cmd_export, "export items to .parquet, .csv or .jsonl")
    p.add_argument("out")
    p.add_argument("--include-forgotten", action="store_true", help="also forgotten items")

    add("reembed", cmd_reembed, "re-embed every item with the current model")

    add("demo", cmd_demo, "index the bundled sample corpus into a fresh demo store and run example searches")

    p = add(
        "tune",
        cmd_tune,
        "fine-tune the embedding model on this memory (keyword-vs-vector disagreement); adopt it only if better",
    )
    p.add_argument(
        "--query-source",
        action="append",
        help="where queries come from: title, first_sentence, log (repeatable or comma-separated; default title,log)",
    )
    p.add_argument("--epochs", type=int, default=1, help="training epochs (default 1)")
    p.add_argument("--max-triples", type=int, default=2048, help="most triples trained on (default 2048)")
    p.add_argument("--max-queries", type=int, default=3000, help="most queries mined (default 3000)")
    p.add_argument(
        "--max-steps", type=int, help="cap on training steps (default 150 on CPU, none on CUDA; 0: none)"
    )
    p.add_argument("--batch-size", type=int, default=32, help="triples per step (default 32)")
    p.add_argument("--lr", type=float, default=2e-5, help="peak learning rate (default 2e-5)")
    p.add_argument(
        "--max-seq-length", type=int, help="word pieces per text (default 128 on CPU, 256 on CUDA)"
    )
    p.add_argument(
        "--seed", type=int, default=42, help="seed: mining sample, held-out split, training (default 42)"
    )
    p.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda when present, else cpu)")
    p.add_argument(
        "--min-gain", type=float, default=0.005, help="held-out NDCG@10 gain needed to adopt (default 0.005)"
    )
    p.add_argument("--ns", help="mine only this namespace (default: all)")
    p.add_argument(
        "--no-hard-negatives",
        action="store_true",
        help="train on (query, positive) pairs only (in-batch negatives), without the mined negatives",
    )
    p.add_argument(
        "--torch-threads",
        type=int,
        help="torch intra-op threads (default: torch's own); 1 is faster when other jobs share the cores",
    )
    p.add_argument("--json", action="store_true", help="machine-readable report")

    p = add(
        "models",
        cmd_models,
        "list model versions and their scores; `models use VERSION` switches (re-embeds)",
    )
    p.add_argument("action", nargs="?", choices=["list", "use"], default="list", help="list (default) or use")
    p.add_argument("version", nargs="?", help="with use: the version to switch to (v1, base, ...)")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    from nbmemory.eval.cli import add_eval_parser

    add_eval_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.fn(args))
    except NbMemoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: everything committed so far is kept", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
