"""What the front ends share: option specs, the tune options, one JSON encoder, the owner helper.

The command line (:mod:`nbmemory.cli`), the magics (:mod:`nbmemory.jupyter.magics`) and the REST handlers
(:mod:`nbmemory.server.handlers`) offer the same operations. Their options are declared here once,
as :class:`Option` specs: :meth:`Option.add_to` puts one on an argparse parser,
:func:`magic_options` on an IPython magic, and the handlers read the same names from the query
string. :func:`search_filters` and :func:`tune_options` turn the values into what
:meth:`~nbmemory.Memory.search` and :meth:`~nbmemory.Memory.tune` take.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from nbmemory.errors import ConfigError, NbMemoryError, RequestError
from nbmemory.search.filters import KINDS

if TYPE_CHECKING:
    import argparse

    from nbmemory.items import Hit
    from nbmemory.memory import Memory
    from nbmemory.search.config import PipelineConfig
    from nbmemory.search.result import SearchResult
    from nbmemory.tune.run import TuneOptions

__all__ = [
    "CHUNKS",
    "CLOSEST",
    "KINDS",
    "MAX_NAME",
    "MAX_RESULTS",
    "RETRIEVERS",
    "TUNE_OPTIONS",
    "WEAK_LABEL",
    "Option",
    "check_k",
    "filter_options",
    "hit_payload",
    "link_outside",
    "local_memory",
    "magic_options",
    "owned_memory",
    "pipeline_config",
    "plural",
    "print_hits",
    "query_sources",
    "said_line",
    "score_scale",
    "search_arguments",
    "search_filters",
    "search_payload",
    "to_jsonable",
    "tune_options",
]

F = TypeVar("F", bound=Callable[..., Any])


class Option:
    """One option of a front-end command, declared once.

    Takes what :meth:`argparse.ArgumentParser.add_argument` takes, e.g.
    ``Option("--kind", action="append", choices=KINDS, help="only this kind")``.
    """

    def __init__(self, *flags: str, **settings: Any) -> None:
        if not flags:
            raise ValueError("an Option needs at least one flag or positional name")
        self.flags = flags
        self.settings = settings

    def __repr__(self) -> str:
        return f"Option({', '.join(map(repr, self.flags))}, ...)"

    @property
    def name(self) -> str:
        """The attribute argparse stores the value under; also the REST query argument's name."""
        if "dest" in self.settings:
            return str(self.settings["dest"])
        long = [f for f in self.flags if f.startswith("--")]
        return (long or list(self.flags))[0].lstrip("-").replace("-", "_")

    @property
    def help(self) -> str | None:
        return self.settings.get("help")

    @property
    def repeatable(self) -> bool:
        return self.settings.get("action") == "append"

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(self.settings.get("choices") or ())

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """Add this option to an argparse parser."""
        parser.add_argument(*self.flags, **self.settings)


def magic_options(*options: Option, group: str | None = None) -> Callable[[F], F]:
    """A decorator giving an IPython magic these options, as ``@argument`` lines in this order would.

    Parameters
    ----------
    options:
        The options, in the order ``%magic?`` lists them.
    group:
        Under this heading of the help (``@argument_group``); None: with the magic's other options.
    """
    from IPython.core.magic_arguments import argument, argument_group

    decorators: list[Callable[[F], F]] = [argument_group(group)] if group else []
    decorators += [argument(*o.flags, **o.settings) for o in options]

    def apply(func: F) -> F:
        # ArgDecorators are listed in the order applied and read back reversed: apply last first.
        for decorate in reversed(decorators):
            func = decorate(func)
        return func

    return apply


# -- search ---------------------------------------------------------------------------------------
def filter_options(namespace_default: str = "all") -> tuple[Option, ...]:
    """The search filters every searching command takes, in the order their help lists them.

    Parameters
    ----------
    namespace_default:
        What ``--ns`` falls back on in this front end, for its help text.
    """
    kinds = f"{', '.join(KINDS[:-1])} or {KINDS[-1]}"
    return (
        Option("--ns", help=f"only this namespace (default: {namespace_default})"),
        Option("--kind", action="append", choices=KINDS, help=f"only this kind: {kinds} (repeatable)"),
        Option("--path", help="only sources matching this glob, e.g. '*/ops/*.md'"),
        Option("--tag", action="append", help="only items with this tag (repeatable: all must match)"),
        Option(
            "--since",
            help="happened since (an item's event time, else its last update): an ISO date "
            "(2026-01-31) or an age (30d, 12h, 2w)",
        ),
        Option("--until", help="happened until: an ISO date or an age"),
        Option("--speaker", help="only items said by this speaker (exact), e.g. user or Caroline"),
        Option("--conversation", help="only items of this conversation or session (exact)"),
    )


#: The most results one request may ask for in the front ends a page or an agent drives: the REST
#: API (and the sidebar's setting), the MCP tools, the magics. The Python API and the CLI, which
#: export and script, take any k.
MAX_RESULTS = 200
#: The longest namespace, speaker or conversation name a request of the REST API or an MCP tool
#: takes (a name is a label, not a text).
MAX_NAME = 200


RETRIEVERS = Option("--retrievers", help="bm25, vector or bm25,vector (default: both)")
CHUNKS = Option(
    "--chunks", action="store_true", help="list every matching chunk (default: one result per file)"
)


def search_filters(values: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of :meth:`~nbmemory.Memory.search` that :func:`filter_options` give.

    Parameters
    ----------
    values:
        Option values by :attr:`Option.name` (``vars(args)`` of a parsed command line).
    """
    return {
        "namespace": values.get("ns"),
        "kind": values.get("kind") or None,
        "path": values.get("path"),
        "tags": values.get("tag") or (),
        "since": values.get("since"),
        "until": values.get("until"),
        "speaker": values.get("speaker"),
        "conversation": values.get("conversation"),
    }


def pipeline_config(retrievers: str | None, rrf_k: int, chunks: bool = False) -> PipelineConfig | None:
    """The pipeline that ``--retrievers bm25,vector`` (a comma-separated list) and ``--chunks``
    ask for; None for the default one."""
    if not retrievers and not chunks:
        return None
    # Imported only now: the default pipeline must cost a command-line client nothing.
    from nbmemory.search.config import RETRIEVERS as ALL
    from nbmemory.search.config import PipelineConfig

    names = tuple(r.strip() for r in (retrievers or ",".join(ALL)).split(",") if r.strip())
    return PipelineConfig(retrievers=names, rrf_k=rrf_k, group=not chunks)


def check_k(value: Any, default: int, most: int | None = MAX_RESULTS) -> int:
    """How many results a request asks for: ``value`` (an int, or its digits as text), else ``default``.

    Raises
    ------
    RequestError
        Naming the value, when it is not a whole number from 1 to ``most`` (None: no upper bound;
        :meth:`~nbmemory.Memory.search` keeps its own).
    """
    bounds = f"from 1 to {most}" if most is not None else "of at least 1"
    if value is None or value == "":
        value = default
    number = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        with contextlib.suppress(ValueError):
            number = int(value)
    if number is None:
        raise RequestError(f"k must be an integer {bounds}, got {value!r}")
    if number < 1 or (most is not None and number > most):
        raise RequestError(f"k must be an integer {bounds}, got {number}")
    return number


def search_arguments(
    query: Any,
    values: Mapping[str, Any] | None = None,
    *,
    default_k: int = 10,
    most: int | None = MAX_RESULTS,
    rrf_k: int | None = None,
) -> dict[str, Any]:
    """The keyword arguments of :meth:`~nbmemory.Memory.search` (``k``, the filters, ``config``)
    that one search request of any front end asks for, checked with its query:
    ``memory.search(query, **search_arguments(query, values))``.

    Parameters
    ----------
    query:
        What to search for: checked (it must hold a letter or a digit), passed on as it is.
    values:
        The request's options by :attr:`Option.name`: ``k``, the :func:`filter_options` (``ns``,
        ``kind``, ``path``, ``tag``, ``since``, ``until``, ``speaker``, ``conversation``),
        :data:`RETRIEVERS` and :data:`CHUNKS`. A missing one is its default.
    default_k:
        ``k`` when the request gives none.
    most:
        The largest ``k`` this front end takes (:data:`MAX_RESULTS`; None: any).
    rrf_k:
        The RRF constant of a pipeline that ``retrievers`` or ``chunks`` ask for (default: the
        pipeline's own).

    Raises
    ------
    RequestError
        Naming the bad value: a query without a letter or digit, a ``k`` out of bounds, an unknown
        kind, a filter that is not text.
    """
    from nbmemory.search.prefix import require_words

    values = values or {}
    if not isinstance(query, str) or not query.strip():
        raise RequestError(f"no query given (got {query!r}): give words to search for")
    try:
        require_words(query)
    except ConfigError as exc:
        raise RequestError(str(exc)) from None
    k = check_k(values.get("k"), default_k, most)
    kinds = values.get("kind")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds or ())
    tags = values.get("tag")
    tags = [tags] if isinstance(tags, str) else list(tags or ())
    for name, given in (("kind", kinds), ("tag", tags)):
        for value in given:
            if not isinstance(value, str):
                raise RequestError(f"{name} must be text, got {value!r}")
    unknown = [x for x in kinds if x not in KINDS]
    if unknown:
        raise RequestError(f"kind must be one of {', '.join(KINDS)}, got {unknown[0]!r}")
    for name in ("ns", "path", "since", "until", "speaker", "conversation", "retrievers"):
        value = values.get(name)
        if value is not None and not isinstance(value, str):
            raise RequestError(f"{name} must be text, got {value!r}")
    if values.get("retrievers") or values.get("chunks"):
        if rrf_k is None:
            from nbmemory.search.config import PipelineConfig

            rrf_k = PipelineConfig().rrf_k
        config = pipeline_config(values.get("retrievers"), rrf_k, bool(values.get("chunks")))
    else:
        config = None
    filters = search_filters({**values, "kind": kinds, "tag": tags})
    return {"k": k, **filters, "config": config}


def hit_payload(hit: Hit, full_text: bool = True) -> dict[str, Any]:
    """The one JSON dict of a search hit, as the command line (``--json``), the REST API and the
    MCP tools return it.

    :meth:`Hit.to_dict <nbmemory.items.Hit.to_dict>` (its fields, ``location``, ``cell_number``,
    ``found_by``), with ``more_ids`` (the other chunks of the file, as ``more``) and, when the hit's
    text looks like a prompt injection, a ``warning``.

    Parameters
    ----------
    full_text:
        Keep the hit's whole ``text`` (its ``snippet`` is always there).
    """
    from nbmemory.safety import injection_warning

    data = hit.to_dict()
    data["more_ids"] = list(hit.more)
    if not full_text:
        del data["text"]
    warning = injection_warning(hit.heading + "\n" + hit.text)
    if warning:
        data["warning"] = warning
    return data


def search_payload(
    result: Any, hit: Callable[[Hit], Any] = hit_payload, trace: bool = False
) -> dict[str, Any]:
    """A search's JSON: its ``query``, ``hits`` (each as ``hit`` makes it), ``rejected`` and
    ``reason``; with ``trace``, the ranking trace too.

    ``result`` is a :class:`~nbmemory.api.SearchResult`, or its fields (a command-line client
    reads it that way).
    """
    payload: dict[str, Any] = {
        "query": result.query,
        "hits": [hit(h) for h in result.hits],
        "rejected": result.rejected,
        "reason": result.reason,
    }
    if trace:
        payload["trace"] = result.trace.to_dict()
    return payload


#: The line over the hits that neither retriever supports well (``Hit.weak``), in every front end.
WEAK_LABEL = "weaker matches: far in meaning, and holding under half of the query's keywords"
#: A search flagged "no confident match" shows at most this many of its closest items.
CLOSEST = 3


def plural(n: int, word: str) -> str:
    """``1 hit``, ``3 hits``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def score_scale(result: SearchResult) -> str:
    """What a hit's score is, in one sentence, from the weights the search's fusion used.

    Convex fusion (the default) adds the cosine and the keyword share of the query, which passes 1
    when a short item repeats the query's words; RRF adds ``weight / (k + rank)`` per retriever.
    Empty for a result without a fusion stage (one retriever, related items).
    """
    fusion = result.fusion
    if fusion is None:
        return ""
    weights = dict(fusion.notes.get("weights", {}))
    stages = result.trace.stages
    # A stage after fusion that rescored (recency, rerank, MMR...) recorded its own parts.
    later = any(stage.parts for stage in stages[stages.index(fusion) + 1 :])
    then = "; then changed by " + ", ".join(s.name for s in stages if s.parts and s is not fusion) if later else ""
    if fusion.name == "convex":
        turns = ""
        said = fusion.notes.get("turns")
        if isinstance(said, dict):
            turns = (
                f"; a conversation turn's keyword share also gains {said.get('neighbour_share', 0):g} x "
                f"its best neighbour's, and a turn by the speaker, or said on the date, the question "
                f"names gains {said.get('gain', 0):g} for each"
            )
        return (
            f"score = {weights.get('vector', 0.8):g} x cosine (the best passage's when higher) + "
            f"{weights.get('bm25', 0.2):g} x keyword share (the query's keywords an item holds, "
            f"weighted by rarity: above 1 when a short item repeats them){turns}{then}"
        )
    return f"score = sum over the retrievers of weight / ({fusion.notes.get('k', 60)} + rank){then}"


def print_hits(result: SearchResult, out: Any = None) -> None:
    """Print ranked hits as text, with the rank each retriever gave.

    A flagged search says so first, then shows its :data:`CLOSEST` closest items; other chunks
    of a file are counted under its best one; the first weak hit starts :data:`WEAK_LABEL`.
    """
    out = out or sys.stdout
    hits = result.hits
    if result.rejected:
        hits = hits[:CLOSEST]
        print(f"  {result.reason}; the {plural(len(hits), 'closest item')}:", file=out)
    if not hits:
        print("  (no results)", file=out)
        return
    weak_shown = False
    for rank, hit in enumerate(hits, start=1):
        if hit.weak and not weak_shown and not result.rejected:
            print(f"  -- {WEAK_LABEL} --", file=out)
            weak_shown = True
        tier = f" {hit.tier}" if hit.tier != "none" else ""
        print(f"{rank:>3}. [{hit.score:.4f}{tier}] #{hit.id} {hit.location}  ({_ranks(hit)})", file=out)
        said = said_line(hit)
        if said:
            print(f"     {said}", file=out)
        if hit.heading:
            print(f"     {hit.heading}", file=out)
        for line in textwrap.wrap(hit.snippet, width=96)[:3]:
            print(f"     {line}", file=out)
        if hit.more:
            print(f"     +{len(hit.more)} more in this file", file=out)


def said_line(item: Any) -> str:
    """Who said a conversation turn and when, short: ``Caroline · 2023-05-08 13:56``; empty when
    neither is known."""
    when = item.event_at.strftime("%Y-%m-%d %H:%M") if item.event_at else None
    return " · ".join(x for x in (item.speaker, when) if x)


def _ranks(hit: Any) -> str:
    parts = []
    for name in ("bm25", "vector"):
        rank = hit.ranks.get(name)
        parts.append(f"{name} #{rank}" if rank else f"{name} -")
    return ", ".join(parts)


# -- tuning ---------------------------------------------------------------------------------------
TUNE_OPTIONS: tuple[Option, ...] = (
    Option(
        "--query-source",
        action="append",
        help="where queries come from: title, first_sentence, log (repeatable or comma-separated; default title,log)",
    ),
    Option("--epochs", type=int, default=1, help="training epochs (default 1)"),
    Option("--max-triples", type=int, default=2048, help="most triples trained on (default 2048)"),
    Option("--max-queries", type=int, default=3000, help="most queries mined (default 3000)"),
    Option("--max-steps", type=int, help="cap on training steps (default 150 on CPU, none on CUDA; 0: none)"),
    Option("--batch-size", type=int, default=32, help="triples per step (default 32)"),
    Option("--lr", type=float, default=2e-5, help="peak learning rate (default 2e-5)"),
    Option("--max-seq-length", type=int, help="word pieces per text (default 128 on CPU, 256 on CUDA)"),
    Option("--seed", type=int, default=42, help="seed: mining sample, held-out split, training (default 42)"),
    Option("--device", help="cpu, cuda or cuda:N (default: cuda when present, else cpu)"),
    Option(
        "--min-gain", type=float, default=0.005, help="held-out NDCG@10 gain needed to adopt (default 0.005)"
    ),
    Option(
        "--no-hard-negatives",
        action="store_true",
        help="train on (query, positive) pairs only (in-batch negatives), without the mined negatives",
    ),
)


def query_sources() -> tuple[str, ...]:
    """Where tuning may take its training queries from (``--query-source``)."""
    from nbmemory.tune.mine import QUERY_SOURCES

    return QUERY_SOURCES


def tune_options(values: Mapping[str, Any], namespace: str | None = None) -> TuneOptions:
    """The settings of a tuning run that :data:`TUNE_OPTIONS` values ask for.

    Parameters
    ----------
    values:
        Option values by :attr:`Option.name` (``vars(args)`` of a parsed command line).
    namespace:
        Mine only this namespace (default: all).
    """
    from nbmemory.tune.run import DEFAULT_SOURCES, TuneOptions
    from nbmemory.tune.train import TrainConfig

    sources = tuple(
        s.strip()
        for part in (values["query_source"] or [",".join(DEFAULT_SOURCES)])
        for s in part.split(",")
        if s.strip()
    )
    return TuneOptions(
        sources=sources,
        max_queries=values["max_queries"],
        max_triples=values["max_triples"],
        train=TrainConfig(
            epochs=values["epochs"],
            batch_size=values["batch_size"],
            learning_rate=values["lr"],
            max_steps=values["max_steps"],
            max_seq_length=values["max_seq_length"],
            seed=values["seed"],
            device=values["device"],
            hard_negatives=not values["no_hard_negatives"],
        ),
        min_delta=values["min_gain"],
        namespace=namespace,
    )


# -- the owner ------------------------------------------------------------------------------------
def local_memory(memory: Any) -> Memory | None:
    """The :class:`~nbmemory.Memory` of this process behind ``memory``, if any.

    ``memory`` itself when it is a Memory; for a :class:`~nbmemory.remote.SharedMemory`, its
    local Memory when this process owns the file, else None (another process runs the calls).
    """
    from nbmemory.memory import Memory

    return memory if isinstance(memory, Memory) else memory.memory


def owned_memory(memory: Any, busy: str) -> Memory:
    """The local Memory, for work that runs only in the owner (tuning, switching models).

    Such work runs for minutes and reports progress through callbacks, which cannot cross to
    another process.

    Raises
    ------
    NbMemoryError
        With the message ``busy`` when another process owns the file.
    """
    local = local_memory(memory)
    if local is None:
        raise NbMemoryError(busy)
    return local


# -- JSON -----------------------------------------------------------------------------------------
def to_jsonable(value: Any, tagged: bool = False) -> Any:
    """``default=`` of :func:`json.dumps` for nbmemory's results: dataclasses, datetimes, sets, numpy.

    Parameters
    ----------
    value:
        What :mod:`json` cannot encode by itself.
    tagged:
        Mark datetimes and dataclasses (``{"__dt__": ...}``, ``{"__type__": "Hit", ...}``) so
        that the other end rebuilds them (:func:`nbmemory.remote.wire.loads`); plain JSON if False.
    """
    if isinstance(value, datetime):
        return {"__dt__": value.isoformat()} if tagged else value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if not tagged:
            return dataclasses.asdict(value)
        return {
            "__type__": type(value).__name__,
            **{f.name: getattr(value, f.name) for f in dataclasses.fields(value)},
        }
    if isinstance(value, (set, tuple)):
        return list(value)
    if isinstance(value, Mapping):  # read-only mappings (a stage's score parts, made when read)
        return dict(value)
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    name = type(value).__name__
    raise TypeError(f"cannot send {name} over the wire" if tagged else f"cannot encode {name} as JSON")


def link_outside(folder: Path, roots: Sequence[Path]) -> Path | None:
    """The first file the indexer would read under ``folder`` that resolves outside every root.

    The indexer follows symlinked files (not folders): one inside a root can point anywhere, so a
    front end that confines indexing to roots (the Jupyter server, the MCP server) checks this.
    """
    from nbmemory.ingest.indexer import walk

    for file in walk(folder):
        try:
            target = file.resolve()
        except (OSError, RuntimeError):
            return file
        if not any(target == root or root in target.parents for root in roots):
            return file
    return None
