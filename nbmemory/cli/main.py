"""The ``nbmemory`` command line: the same verbs as the :class:`~nbmemory.Memory` facade.

Each command is a ``cmd_*`` function registered with :func:`command`, its options declared next to
it; :func:`build_parser` turns the registry into the argparse parser.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nbmemory.errors import NbMemoryError
from nbmemory.items import TIER_MEANING
from nbmemory.options import (
    CHUNKS,
    KINDS,
    RETRIEVERS,
    TUNE_OPTIONS,
    Option,
    filter_options,
    owned_memory,
    print_hits,
    said_line,
    search_arguments,
    search_payload,
    tune_options,
)
from nbmemory.search.prefix import require_words

DESCRIPTION = "nbmemory: a local-first personal memory with hybrid (BM25 + vector) search."

Handler = Callable[[argparse.Namespace], int]

# Options of `nbmemory` itself, before the command.
GLOBAL_OPTIONS = (
    Option("--home", help="folder of the memory file (default $NBMEMORY_HOME or ~/.nbmemory)"),
    Option("--db", help="the memory file itself (overrides --home)"),
    Option(
        "--model", help="sentence-transformers model name or local folder (default: bundled all-MiniLM-L6-v2)"
    ),
    Option("-q", "--quiet", action="store_true", help="no progress bars"),
    Option(
        "--team",
        help="a team memory to attach beside this one: '<catalog>|<data path>' (default $NBMEMORY_TEAM); "
        "namespaces team:<name> live in it",
    ),
)
JSON = Option("--json", action="store_true", help="machine-readable output")
# What makes a remembered text a conversation turn.
TURN_OPTIONS = (
    Option("--at", help="when it was said or happened: an ISO 8601 time, e.g. 2023-05-08T13:56"),
    Option("--speaker", help="who said it, e.g. user, assistant or Caroline"),
    Option("--conversation", help="the conversation or session it belongs to"),
)


@dataclass(frozen=True)
class Command:
    """One ``nbmemory COMMAND``: its name, help text, handler and options (in help order), and
    what its ``--help`` says after the options (``epilog``)."""

    name: str
    help: str
    run: Handler
    options: tuple[Option, ...]
    epilog: str | None = None


COMMANDS: list[Command] = []


def command(
    name: str, help: str, *options: Option, epilog: str | None = None
) -> Callable[[Handler], Handler]:
    """Register the decorated function as ``nbmemory <name>``, taking ``options``."""

    def register(fn: Handler) -> Handler:
        COMMANDS.append(Command(name, help, fn, options, epilog))
        return fn

    return register


def _existing(paths: Sequence[str]) -> None:
    """Refuse, before the memory opens (and the model loads), a path that is not there."""
    from pathlib import Path

    for raw in paths:
        path = Path(raw).expanduser()
        try:
            if path.exists():
                continue
            why = "a broken symlink" if path.is_symlink() else "no such file or folder"
        except OSError as exc:  # a name longer than the system allows
            why = f"cannot be read: {exc.strerror}"
        raise NbMemoryError(f"{raw}: {why}; nothing was indexed")


def _memory(args: argparse.Namespace, background: bool = True, **kwargs: Any) -> Any:
    # connect(): this run is the client of whoever owns the file (a kernel, the Jupyter server,
    # `nbmemory serve`, an earlier run's background owner), or starts a background owner and
    # is its client: no run pays for the model load but the first (NBMEMORY_IDLE_SECONDS).
    from nbmemory.remote import connect

    if args.team is not None:
        kwargs["team"] = args.team  # this run opens the memory itself: a background owner has no team
    return connect(
        args.db, home=args.home, model=args.model, progress=not args.quiet, background=background, **kwargs
    )


def _settings(args: argparse.Namespace) -> Any:
    from pathlib import Path

    from nbmemory.config import Settings

    return (Settings(home=Path(args.home)) if args.home else Settings()).override(args.db, args.model)


@command(
    "index",
    "index files and folders (markdown, notebooks, code, text, PDF, DOCX, HTML), incrementally",
    Option("paths", nargs="+", help="files or folders"),
    Option("--ns", help="namespace to index into (default: 'default')"),
)
def cmd_index(args: argparse.Namespace) -> int:
    from nbmemory.progress import index_bar

    _existing(args.paths)
    # The bar is drawn here even when the owner indexes: it sends its progress back (phase,
    # files, chunks and passages embedded, rate, time left).
    with _memory(args) as mem, index_bar(not args.quiet) as bar:
        report = mem.index(*args.paths, namespace=args.ns, progress=bar)
    for path, reason in report.skipped:
        print(f"skipped {path}: {reason}", file=sys.stderr)
    print(report.summary())
    return 0


@command(
    "search",
    "hybrid search; prints ranked hits and which retriever found each",
    Option("query"),
    Option("-k", type=int, default=10, help="number of hits (default 10)"),
    *filter_options(),
    JSON,
    Option("--explain", action="store_true", help="show the ranking trace, stage by stage"),
    RETRIEVERS,
    CHUNKS,
    epilog=(
        "Each hit reads [score tier] #id location (bm25 #rank, vector #rank). "
        + TIER_MEANING[0].upper()
        + TIER_MEANING[1:]
        + ". A query without a letter or digit is refused (exit 1)."
    ),
)
def cmd_search(args: argparse.Namespace) -> int:
    # Checked before the memory opens (and the model loads); the stages, which take the memory's
    # settings, after. The CLI, which scripts, takes any k.
    search_arguments(args.query, {**vars(args), "retrievers": None, "chunks": False}, most=None)
    with _memory(args) as mem:
        arguments = search_arguments(args.query, vars(args), most=None, rrf_k=mem.settings.rrf_k)
        # plain: the owner's SearchResult as its fields, so this process never imports the search
        # package (DuckDB, numpy): a client of a warm owner answers in a fraction of a second.
        result = mem.call("search", args.query, plain={"SearchResult"}, **arguments)
    if args.json:
        payload = search_payload(result, trace=args.explain)
        print(json.dumps(payload, indent=2, default=str, ensure_ascii=False))
        return 0
    print_hits(result)
    if any(h.tier != "none" for h in result.hits):
        print(f"({TIER_MEANING})")
    if args.explain:
        print()
        print(result.trace.explain(top=args.k))
    return 0


@command(
    "remember",
    "remember a piece of text ('-' reads standard input)",
    Option("text"),
    Option("--tag", action="append", help="tag (repeatable)"),
    Option("--importance", type=float, default=0.5, help="0..1 (default 0.5)"),
    Option("--ns", help="namespace (default: 'default')"),
    *TURN_OPTIONS,
)
def cmd_remember(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.text == "-" else args.text
    with _memory(args) as mem:
        item = mem.remember(
            text,
            tags=args.tag or (),
            importance=args.importance,
            namespace=args.ns,
            at=args.at,
            speaker=args.speaker,
            conversation=args.conversation,
        )
    said = said_line(item)
    print(
        f"remembered #{item.id} in namespace {item.namespace!r}"
        + (f" tags={item.tags}" if item.tags else "")
        + (f" ({said})" if said else "")
    )
    if item.text != text.strip():
        print("note: secrets were redacted before storing", file=sys.stderr)
    return 0


@command(
    "forget",
    "forget items by id, by --query, or by --path / --kind / --since / --until (soft delete)",
    Option("ids", nargs="*", type=int, help="item ids"),
    Option("--query", help="forget the top -k hits of this query (asks for --yes)"),
    Option("-k", type=int, default=1, help="with --query: how many hits (default 1)"),
    Option("--path", help="forget everything from this file (or glob)"),
    Option(
        "--kind",
        action="append",
        choices=KINDS,
        help="forget the items of this kind, e.g. execution for captured cells (repeatable; asks for --yes)",
    ),
    Option(
        "--since", help="forget what happened since then: an ISO date or an age (2h, 30d; asks for --yes)"
    ),
    Option("--until", help="forget what happened until then: an ISO date or an age (asks for --yes)"),
    Option("--ns", help="only in this namespace"),
    Option("--yes", action="store_true", help="with --query, --kind, --since or --until: really forget"),
    Option("--undo", action="store_true", help="bring the forgotten items with these ids back"),
)
def cmd_forget(args: argparse.Namespace) -> int:
    if args.undo:
        if not args.ids or args.query or args.path:
            raise NbMemoryError(
                "forget --undo needs the ids to bring back (e.g. nbmemory forget --undo 42 43)"
            )
        with _memory(args) as mem:
            restored = mem.restore(args.ids)
        print(
            f"restored {len(restored)} item(s)" + (f": {', '.join(map(str, restored))}" if restored else "")
        )
        return 0
    # --kind, --since and --until select like --path (and narrow it): one way to choose, not two.
    ranged = bool(args.kind or args.since or args.until)
    given = sum(bool(x) for x in (args.ids, args.query, args.path or ranged))
    if given != 1:
        raise NbMemoryError(
            "forget needs ids, or --query TEXT, or --path PATH and/or --kind/--since/--until (exactly one)"
        )
    if args.query:
        require_words(args.query)
    selection = {"path": args.path, "kind": args.kind or None, "since": args.since, "until": args.until}
    with _memory(args) as mem:
        if args.query and not args.yes:
            result = mem.search(args.query, k=args.k, namespace=args.ns, log=False)
            print(f"would forget {len(result.hits)} item(s); run again with --yes to forget them:")
            print_hits(result)
            return 0
        if ranged and not args.yes:
            ids = mem.forget(**selection, namespace=args.ns, dry_run=True)
            print(f"would forget {len(ids)} item(s); run again with --yes to forget them")
            for item_id in ids[:10]:
                item = mem.get(item_id, touch=False)
                print(f"  #{item.id} {item.location}")
            if len(ids) > 10:
                print(f"  ... and {len(ids) - 10} more")
            return 0
        if ranged:
            ids = mem.forget(**selection, namespace=args.ns)
        else:
            ids = mem.forget(args.ids or None, query=args.query, k=args.k, path=args.path, namespace=args.ns)
    print(f"forgot {len(ids)} item(s)" + (f": {', '.join(map(str, ids[:20]))}" if ids else ""))
    if ids:
        shown = " ".join(map(str, ids)) if len(ids) <= 20 else "ID..."
        print(f"undo: nbmemory forget --undo {shown}")
    return 0


@command("get", "show one item", Option("id", type=int), JSON)
def cmd_get(args: argparse.Namespace) -> int:
    with _memory(args) as mem:
        item = mem.get(args.id)
    if args.json:
        print(json.dumps(item.to_dict(), indent=2, default=str, ensure_ascii=False))
    else:
        print(f"#{item.id} {item.location} [{item.kind}, ns={item.namespace}, importance={item.importance}]")
        turn = [said_line(item), f"conversation {item.conversation}" if item.conversation else ""]
        if any(turn):
            print(" · ".join(x for x in turn if x))
        if item.heading:
            print(item.heading)
        print(item.text)
    return 0


@command(
    "update",
    "change an item's text, tags, importance, pin, event time, speaker or conversation",
    Option("id", type=int),
    Option("--text", help="new text"),
    Option("--tag", action="append", help="replace tags (repeatable)"),
    Option("--importance", type=float, help="0..1"),
    Option("--pin", action=argparse.BooleanOptionalAction, default=None, help="pin or --no-pin"),
    *(Option(*o.flags, **{**o.settings, "help": f"{o.help}; '' clears it"}) for o in TURN_OPTIONS),
)
def cmd_update(args: argparse.Namespace) -> int:
    with _memory(args) as mem:
        item = mem.update(
            args.id,
            text=args.text,
            tags=args.tag,
            importance=args.importance,
            pinned=args.pin,
            at=args.at,
            speaker=args.speaker,
            conversation=args.conversation,
        )
    print(f"updated #{item.id}")
    return 0


@command(
    "related",
    "items most similar to an item, and those linked to it",
    Option("id", type=int),
    Option("-k", type=int, default=5, help="number of hits (default 5)"),
    Option("--ns", help="only this namespace (default: all)"),
)
def cmd_related(args: argparse.Namespace) -> int:
    from nbmemory.api import SearchResult, Trace

    with _memory(args) as mem:
        hits = mem.related(args.id, k=args.k, namespace=args.ns)
    print_hits(SearchResult(f"related to #{args.id}", hits, Trace("")))
    return 0


@command(
    "link",
    "link two items (similar, related, contradicts, extends, supersedes, caused_by, temporal)",
    Option("src", type=int),
    Option("dst", type=int),
    Option("--type", default="related", help="link type (default related)"),
    Option("--note", help="free text"),
)
def cmd_link(args: argparse.Namespace) -> int:
    with _memory(args) as mem:
        mem.link(args.src, args.dst, args.type, note=args.note)
    print(f"linked #{args.src} -[{args.type}]-> #{args.dst}")
    return 0


@command("stats", "counts, sizes, model and index state", JSON)
def cmd_stats(args: argparse.Namespace) -> int:
    with _memory(args) as mem:
        stats = mem.stats()
    if args.json:
        print(json.dumps(stats, indent=2, default=str))
    else:
        for key, value in stats.items():
            print(f"{key:>18}: {value}")
    return 0


@command(
    "doctor",
    "check integrity (orphans, missing vectors, indexes, model); --repair fixes",
    Option("--repair", action="store_true", help="fix what can be fixed"),
)
def cmd_doctor(args: argparse.Namespace) -> int:
    with _memory(args, on_model_change="defer") as mem:
        report = mem.doctor(repair=args.repair)
    print(report.summary())
    if not report.ok:
        print("problems found: run `nbmemory doctor --repair` to fix them", file=sys.stderr)
    return 0 if report.ok else 1


@command(
    "export",
    "export items to .parquet, .csv or .jsonl",
    Option("out"),
    Option("--include-forgotten", action="store_true", help="also forgotten items"),
)
def cmd_export(args: argparse.Namespace) -> int:
    with _memory(args) as mem:
        count = mem.export(args.out, include_forgotten=args.include_forgotten)
    print(f"exported {count} items to {args.out}")
    return 0


@command("reembed", "re-embed every item with the current model")
def cmd_reembed(args: argparse.Namespace) -> int:
    with _memory(args, on_model_change="defer") as mem:
        count = mem.reembed()
    print(f"re-embedded {count} items")
    return 0


@command("demo", "index the bundled sample corpus into a fresh demo store and run example searches")
def cmd_demo(args: argparse.Namespace) -> int:
    from nbmemory.demo import run_demo

    return run_demo(home=args.home, db=args.db, model=args.model, quiet=args.quiet)


@command(
    "notebooks",
    "copy the built-in notebooks (memory diagnostics, BEIR evaluation) into a folder",
    Option("dir", nargs="?", default=".", metavar="DIR", help="where to copy them (default: this folder)"),
    Option("--fresh", action="store_true", help="new copies beside any already there (name-1.ipynb, ...)"),
    epilog="A copy you edited or ran is never overwritten; an unchanged copy of an older version is updated.",
)
def cmd_notebooks(args: argparse.Namespace) -> int:
    from nbmemory.jupyter.builtin_notebooks import copy_all

    for copied in copy_all(args.dir, fresh=args.fresh):
        print(copied.describe())
    print("open them in JupyterLab (`jupyter lab`); its launcher's Memory section makes fresh copies too")
    return 0


def _owner_here(args: argparse.Namespace) -> Any:
    """The memory opened by this process, for jobs that run only in the owner (tune, models use):
    the CLI's background owner, idle or not, stops first; other owners keep the file."""
    from nbmemory.remote.launch import stop

    stop(_settings(args).db_path, served_by=("background",))
    return _memory(args, background=False)


def _busy(shared: Any, what: str) -> str:
    """Why a long job does not run here: another process owns the file."""
    return (
        f"{shared.path} is open in another process (a Jupyter kernel or server, or another "
        f"CLI run): {what} runs for minutes, so run it there (%memtune in a notebook) or "
        "close that process and run this again"
    )


def _text_progress(quiet: bool) -> Any:
    shown: dict[str, int] = {}

    def progress(phase: str, fraction: float) -> None:
        step = int(fraction * 10)
        if quiet or shown.get(phase) == step:
            return
        shown[phase] = step
        print(f"{phase}: {fraction:.0%}", file=sys.stderr, flush=True)

    return progress


@command(
    "tune",
    "fine-tune the embedding model on this memory (keyword-vs-vector disagreement); adopt it only if better",
    *TUNE_OPTIONS,
    Option("--ns", help="mine only this namespace (default: all)"),
    Option(
        "--torch-threads",
        type=int,
        help="torch intra-op threads (default: torch's own); 1 is faster when other jobs share the cores",
    ),
    Option("--json", action="store_true", help="machine-readable report"),
)
def cmd_tune(args: argparse.Namespace) -> int:
    options = tune_options(vars(args), namespace=args.ns)
    if args.torch_threads is not None:
        from nbmemory.config import set_torch_threads

        set_torch_threads(args.torch_threads)
    with _owner_here(args) as shared:
        local = owned_memory(shared, _busy(shared, "tuning"))
        report = local.tune(options, progress=_text_progress(args.quiet))
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        print(report.summary())
    return 0


@command(
    "models",
    "list model versions and their scores; `models use VERSION` switches (re-embeds)",
    Option("action", nargs="?", choices=["list", "use"], default="list", help="list (default) or use"),
    Option("version", nargs="?", help="with use: the version to switch to (v1, base, ...)"),
    JSON,
)
def cmd_models(args: argparse.Namespace) -> int:
    if args.action == "use":
        if not args.version:
            raise NbMemoryError("which version? `nbmemory models use VERSION` (see `nbmemory models`)")
        with _owner_here(args) as shared:
            count = owned_memory(shared, _busy(shared, "switching models")).use_model(args.version)
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


@command(
    "mcp",
    "run an MCP server (stdio, or --http PORT) so agents can search, read and write this memory",
    Option(
        "--http",
        type=int,
        metavar="PORT",
        help=(
            "serve streamable HTTP on 127.0.0.1:PORT/mcp instead of stdio; every request must send "
            "the header 'Authorization: Bearer TOKEN' (see --show-token)"
        ),
    ),
    Option(
        "--show-token",
        action="store_true",
        help="print the token --http requires (generated and stored 0600 on first use) and exit",
    ),
    Option(
        "--token-file",
        metavar="FILE",
        help="where the --http token is kept (default: mcp-token beside the memory file); "
        "$NBMEMORY_MCP_TOKEN, when set, is the token instead",
    ),
    Option(
        "--no-auth",
        action="store_true",
        help="with --http: require no token (any process of any user on this machine can then call it)",
    ),
    Option(
        "--namespace", "--ns", help="confine the server to this namespace: it reads and writes nothing else"
    ),
    Option("--read-only", action="store_true", help="refuse remember, forget and index"),
    Option(
        "--root",
        action="append",
        metavar="DIR",
        help="a folder the index tool may read (repeatable); without one, index is refused",
    ),
)
def cmd_mcp(args: argparse.Namespace) -> int:
    from pathlib import Path

    from nbmemory.config import MCP_TOKEN_FILENAME
    from nbmemory.mcp import Policy, check_port, serve
    from nbmemory.mcp.auth import load_token

    if args.no_auth and (args.http is None or args.show_token):
        raise NbMemoryError("--no-auth applies to --http only (stdio needs no token)")
    check_port(args.http)  # before a token is made for a server that will not start
    token_file = (
        Path(args.token_file) if args.token_file else _settings(args).db_path.parent / MCP_TOKEN_FILENAME
    )
    if args.show_token:
        print(load_token(token_file).value)
        return 0
    policy = Policy.create(namespace=args.namespace, read_only=args.read_only, roots=args.root or ())
    token = None
    if args.http is not None and args.no_auth:
        print(
            f"warning: --no-auth: the MCP server on 127.0.0.1:{args.http} takes requests from any "
            "process of any user on this machine, with your memory's rights",
            file=sys.stderr,
        )
    elif args.http is not None:
        loaded = load_token(token_file)
        token = loaded.value
        if loaded.generated:
            # Shown this once; `nbmemory mcp --show-token` prints it again.
            print(
                f"nbmemory: generated the MCP token, stored in {loaded.source} (0600): {token}\n"
                f"nbmemory: clients send the header 'Authorization: Bearer {token}'",
                file=sys.stderr,
            )
    # No progress bars: an agent's client logs stderr, it does not show it.
    quiet = argparse.Namespace(**{**vars(args), "quiet": True})
    # A long-lived server owns the memory itself (or is the client of its owner): no detached
    # owner is left behind when the agent's session ends.
    serve(lambda: _memory(quiet, background=False), policy, http_port=args.http, token=token)
    return 0


@command(
    "serve",
    "own this memory in the foreground and serve CLI runs, kernels and the Jupyter server (Ctrl-C stops)",
    Option(
        "--idle-seconds",
        type=float,
        help="stop after this many seconds without a request (default $NBMEMORY_IDLE_SECONDS or 600; 0: never)",
    ),
)
def cmd_serve(args: argparse.Namespace) -> int:
    from nbmemory.remote.daemon import serve

    settings = _settings(args)
    idle = settings.idle_seconds if args.idle_seconds is None else args.idle_seconds
    if not 0 <= idle < float("inf"):
        raise NbMemoryError(f"--idle-seconds must be 0 or more, got {idle}")
    team = {} if args.team is None else {"team": args.team}
    return serve(settings, idle, "serve", {"progress": not args.quiet, **team})


@command(
    "stop", "stop the owner that CLI runs started for this memory (a kernel or Jupyter server is left alone)"
)
def cmd_stop(args: argparse.Namespace) -> int:
    from nbmemory.remote.launch import stop

    path = _settings(args).db_path
    done = stop(path)
    pid = done.owner["pid"] if done.owner else None
    if done.outcome == "none":
        print(f"no process serves {path}")
        return 0
    if done.outcome == "stopped":
        print(f"stopped the owner of {path} (pid {pid})")
        return 0
    if done.outcome == "busy":
        print(f"asked the owner of {path} (pid {pid}) to stop: it is finishing a request", file=sys.stderr)
        return 1
    print(
        f"{path} is held by pid {pid}, a Jupyter kernel, the Jupyter server or a program that opened "
        "it, not by the command line: it is left running (close the memory there)",
        file=sys.stderr,
    )
    return 1


@command(
    "watch",
    "keep folders indexed as their files change (default: the folders indexed before); Ctrl-C stops",
    Option("folders", nargs="*", metavar="DIR", help="folders to watch (default: the memory's roots)"),
    Option(
        "--ns", help="namespace for the folders named here (default: 'default'); else only this one's roots"
    ),
    Option(
        "--no-scan",
        action="store_true",
        help="do not index the folders first (what changed while nothing watched)",
    ),
)
def cmd_watch(args: argparse.Namespace) -> int:
    from nbmemory.cli.watch import run_watch

    # Long-lived: it owns the memory itself (or is the client of its owner), like `serve`.
    with _memory(args, background=False) as mem:
        return run_watch(mem, args.folders, args.ns, not args.no_scan, args.quiet)


@command(
    "import",
    "import IPython's history (every session's inputs and recorded outputs); again: only what is new",
    Option("source", choices=["ipython-history"], help="what to import: ipython-history"),
    Option("path", nargs="?", help="the history file (default ~/.ipython/profile_default/history.sqlite)"),
    Option("--ns", help="namespace (default: 'default')"),
)
def cmd_import(args: argparse.Namespace) -> int:
    from nbmemory.ingest.history import import_ipython_history

    with _memory(args) as mem:
        done = import_ipython_history(mem, args.path, namespace=args.ns)
    print(done.summary())
    return 0


@command(
    "status",
    "the folders kept current, what live indexing has pending, is doing or failed, and the passages refined so far",
    JSON,
)
def cmd_status(args: argparse.Namespace) -> int:
    from nbmemory.cli.watch import print_status
    from nbmemory.runtime import watchers

    with _memory(args) as mem:
        roots = mem.roots()
        refine = mem.stats().get("refine")
    print_status(roots, watchers(_settings(args).db_path), args.json, refine)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``nbmemory``: every registered command, then ``nbmemory eval``."""
    parser = argparse.ArgumentParser(prog="nbmemory", description=DESCRIPTION)
    for option in GLOBAL_OPTIONS:
        option.add_to(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for cmd in COMMANDS:
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help, epilog=cmd.epilog)
        p.set_defaults(fn=cmd.run)
        for option in cmd.options:
            option.add_to(p)

    from nbmemory.eval.cli import add_eval_parser

    add_eval_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            args = build_parser().parse_args(argv)
            code = int(args.fn(args))
        finally:
            # Flushed here, not at exit: a reader that went away is seen below.
            sys.stdout.flush()
        return code
    except NbMemoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: everything committed so far is kept", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader stopped reading (`nbmemory search ... | head`): stop quietly, as cat does.
        # What is left in the buffer goes nowhere, so the flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a command its pipe stopped


if __name__ == "__main__":
    raise SystemExit(main())
