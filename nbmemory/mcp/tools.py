"""The memory as MCP tools, for agents: what ``nbmemory mcp`` serves (:mod:`nbmemory.mcp.server`).

An MCP server (the official ``mcp`` SDK's :class:`~mcp.server.mcpserver.MCPServer`) on stdio, or
on streamable HTTP at ``127.0.0.1:PORT/mcp``, with eight tools: ``search``, ``remember``,
``forget``, ``get``, ``related``, ``context``, ``stats`` and ``index``. It opens the memory
through :func:`nbmemory.remote.connect` on the first tool call, so it shares one memory with
kernels, the Jupyter server and the CLI (as the file's owner or as a client of its owner).

What a server may do is its :class:`Policy`, fixed when it starts:

* ``namespace``: the server reads and writes that namespace only. A tool argument naming another
  namespace is refused with an error (never silently widened or narrowed); an id of an item in
  another namespace is answered as an id that does not exist, so nothing about it leaks.
* ``read_only``: ``remember``, ``forget`` (except a dry run) and ``index`` are refused.
* ``roots``: ``index`` reads only files inside these folders (symlinks resolved); none, no indexing.

Stored text comes back as data: structured JSON (``structuredContent``, mirrored as JSON text),
never as prompt text of the server's own; a hit whose text looks like a prompt injection carries
a ``warning``, and ``context`` leaves such hits out (:func:`nbmemory.safety.build_context`).
Mistakes (a bad argument, an unknown id, a refused write) come back as tool errors
(``isError: true`` with a message saying what to do); the server keeps serving.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NotRequired, Protocol

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

# pydantic reads typing.TypedDict only from Python 3.12 on.
from typing_extensions import TypedDict

from nbmemory.api import MemoryAPI
from nbmemory.errors import ConfigError, NbMemoryError
from nbmemory.items import cell_number
from nbmemory.options import (
    KINDS,
    MAX_NAME,
    MAX_RESULTS,
    hit_payload,
    link_outside,
    search_arguments,
    search_payload,
)
from nbmemory.safety import build_context, injection_warning
from nbmemory.search.prefix import require_words

if TYPE_CHECKING:
    from nbmemory.items import Hit, Item

__all__ = ["HOST", "ClosableMemory", "MemoryTools", "Policy"]

#: Streamable HTTP listens here only: the server has no authentication of its own.
HOST = "127.0.0.1"
MAX_K = MAX_RESULTS

# Kind filter values as an enum in the input schema (a model sees the choices); str for mypy.
if TYPE_CHECKING:
    Kind = str
else:
    Kind = Literal.__getitem__(KINDS)

# -- input types: the JSON schema of every tool argument, with what a model needs to know --------
Query = Annotated[str, Field(description="What to look for, in plain words or exact identifiers.")]
TopK = Annotated[int, Field(ge=1, le=MAX_K, description=f"How many results (1-{MAX_K}).")]
ItemId = Annotated[int, Field(ge=0, le=2**63 - 1, description="An item id, from a search result.")]
Namespace = Annotated[
    str | None,
    Field(description="Only this namespace. Leave out to use the server's namespace (or all namespaces)."),
]
Kinds = Annotated[
    list[Kind] | None,
    Field(description="Only these kinds of source (markdown, notebook, code, memory, ...)."),
]
PathGlob = Annotated[
    str | None, Field(description="Only sources whose path matches this glob, e.g. '*/ops/*.md'.")
]
Tags = Annotated[list[str], Field(description="Only items carrying all of these tags.")]
When = Annotated[
    str | None,
    Field(
        description="An ISO date (2026-01-31) or an age (30d, 12h, 2w), compared with when an item "
        "happened: its event time (a conversation turn's `at`), else its last update."
    ),
]
Speaker = Annotated[
    str | None,
    Field(max_length=MAX_NAME, description="Only conversation turns said by this speaker (exact match)."),
]
Conversation = Annotated[
    str | None,
    Field(max_length=MAX_NAME, description="Only items of this conversation or session (exact match)."),
]


# -- output types: structured content, documented in each tool's output schema -------------------
class HitData(TypedDict):
    """One search result: the best passage of one source
    (:func:`~nbmemory.options.hit_payload`, as every front end returns it).

    For an agent, ``score`` is rounded to four places, ``more`` says how many other chunks of the
    file ranked (their ids are ``more_ids``), and ``text`` is there only when asked for.
    """

    id: int
    source: str | None
    location: str
    cell_number: int | None
    cell_id: str | None
    cell_index: int | None
    line_start: int | None
    line_end: int | None
    page: int | None
    heading: str
    kind: str
    namespace: str
    tags: list[str]
    importance: float
    score: float
    tier: str
    weak: bool
    found_by: list[str]
    ranks: dict[str, int]
    retriever_scores: dict[str, float]
    similarity: float | None
    snippet: str
    updated_at: str | None
    event_at: str | None
    speaker: str | None
    conversation: str | None
    more_ids: list[int]
    store: str
    more: NotRequired[str]
    text: NotRequired[str]
    warning: NotRequired[str]


class SearchData(TypedDict):
    query: str
    namespace: str | None
    rejected: bool
    reason: str
    hits: list[HitData]


class ItemData(TypedDict):
    id: int
    namespace: str
    kind: str
    source: str | None
    location: str
    cell_number: int | None
    heading: str
    text: str
    tags: list[str]
    importance: float
    pinned: bool
    created_at: str | None
    updated_at: str | None
    event_at: str | None
    speaker: str | None
    conversation: str | None
    warning: NotRequired[str]


class RememberData(TypedDict):
    item: ItemData
    redacted: bool


class Candidate(TypedDict):
    id: int
    namespace: str
    location: str
    snippet: str


class ForgetData(TypedDict):
    dry_run: bool
    forgotten: list[int]
    candidates: list[Candidate]
    message: str


class RelatedData(TypedDict):
    id: int
    hits: list[HitData]


class Included(TypedDict):
    id: int
    location: str
    tokens: int
    truncated: bool


class Excluded(TypedDict):
    id: int
    location: str
    reason: str


class ContextData(TypedDict):
    query: str
    text: str
    tokens: int
    budget: int
    empty: bool
    reason: str
    included: list[Included]
    excluded: list[Excluded]


class Skipped(TypedDict):
    path: str
    reason: str


class IndexData(TypedDict):
    namespace: str | None
    summary: str
    files_seen: int
    files_changed: int
    files_unchanged: int
    files_removed: int
    chunks_added: int
    chunks_removed: int
    skipped: list[Skipped]


class ClosableMemory(MemoryAPI, Protocol):
    """What :func:`nbmemory.remote.connect` returns: the memory API, and ``close``."""

    def close(self) -> None: ...


# -- the policy ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Policy:
    """What one server may do; see the module docstring.

    Parameters
    ----------
    namespace:
        The only namespace the server reads and writes; None: every namespace.
    read_only:
        Refuse ``remember``, ``forget`` and ``index``.
    roots:
        Folders ``index`` may read (resolved, existing); empty: ``index`` is refused.
    """

    namespace: str | None = None
    read_only: bool = False
    roots: tuple[Path, ...] = ()

    @classmethod
    def create(
        cls, namespace: str | None = None, read_only: bool = False, roots: Sequence[str] = ()
    ) -> Policy:
        """A policy from command-line values, checked: a bad namespace or root is a ConfigError."""
        if namespace is not None and (not namespace.strip() or not namespace.isprintable()):
            raise ConfigError(f"--namespace {namespace!r}: give a non-empty name without control characters")
        resolved = []
        for raw in roots:
            path = Path(raw).expanduser()
            if not path.is_dir():
                raise ConfigError(f"--root {raw!r} is not a folder: give an existing folder")
            resolved.append(path.resolve())
        return cls(namespace, read_only, tuple(resolved))

    def describe(self) -> str:
        """One line for the server's instructions and the tool descriptions."""
        parts = [f"confined to namespace {self.namespace!r}" if self.namespace else "every namespace"]
        if self.read_only:
            parts.append("read-only")
        return ", ".join(parts)


# -- the tools -----------------------------------------------------------------------------------
class MemoryTools:
    """The tools' implementations over one memory, under one :class:`Policy`.

    Parameters
    ----------
    open_memory:
        Opens the memory (``connect()``); called on the first tool call, not at start-up, so
        ``tools/list`` answers at once and the model loads only when a tool needs it.
    policy:
        What the server may do.
    """

    def __init__(self, open_memory: Callable[[], ClosableMemory], policy: Policy) -> None:
        self.policy = policy
        self._open = open_memory
        self._memory: ClosableMemory | None = None
        self._lock = threading.Lock()

    @property
    def memory(self) -> ClosableMemory:
        # Sync tools run on worker threads: two first calls must open one memory.
        with self._lock:
            if self._memory is None:
                self._memory = self._open()
            return self._memory

    def close(self) -> None:
        with self._lock:
            if self._memory is not None:
                self._memory.close()
            self._memory = None

    # -- the policy, applied ----------------------------------------------------------------
    def namespace(self, asked: str | None) -> str | None:
        """The namespace a call works in: the server's own, or what the call asked for."""
        confined = self.policy.namespace
        if confined is None or asked is None or asked == confined:
            return confined if confined is not None else asked
        raise NbMemoryError(
            f"this server is confined to namespace {confined!r}: namespace {asked!r} is refused "
            "(leave namespace out)"
        )

    def writable(self, tool: str) -> None:
        if self.policy.read_only:
            raise NbMemoryError(f"this server is read-only (started with --read-only): {tool} is refused")

    def item(self, item_id: int, namespace: str | None, touch: bool = False) -> Item:
        """Item ``item_id`` when it lies in ``namespace`` (None: any).

        On a confined server an id from another namespace reads as one that does not exist, so
        nothing about the item leaks, not even that it exists.
        """
        if namespace is None:
            return self.memory.get(item_id, touch=touch)
        item = self.memory.get(item_id, touch=False, include_forgotten=True)
        if item.namespace != namespace:
            if self.policy.namespace is not None:
                raise NbMemoryError(f"no item with id {item_id}")
            raise NbMemoryError(f"item {item_id} is in namespace {item.namespace!r}, not {namespace!r}")
        if item.deleted_at is not None:
            raise NbMemoryError(f"no item with id {item_id} (it was forgotten)")
        return self.memory.get(item_id, touch=True) if touch else item

    def inside_roots(self, raw: str) -> Path:
        """The file or folder ``raw`` names, when it lies inside an allowed root."""
        roots = self.policy.roots
        if not roots:
            raise NbMemoryError(
                "indexing is off on this server: start it with --root DIR to allow indexing inside DIR"
            )
        if not raw.strip() or "\x00" in raw:
            raise NbMemoryError(f"path {raw!r}: give a file or folder inside {shown_roots(roots)}")
        candidate = Path(raw).expanduser()
        try:
            resolved = (candidate if candidate.is_absolute() else roots[0] / candidate).resolve()
        except (OSError, RuntimeError, ValueError) as exc:  # a name too long, a symlink loop
            raise NbMemoryError(f"path {raw!r} cannot be resolved: {type(exc).__name__}") from None
        if not any(resolved == root or root in resolved.parents for root in roots):
            raise NbMemoryError(f"path {raw!r} is outside the allowed roots {shown_roots(roots)}")
        try:
            found, folder = resolved.exists(), resolved.is_dir()
        except OSError as exc:  # resolve() leaves a missing name too long for the system as it is
            raise NbMemoryError(f"path {raw[:80]!r}... cannot be read: {exc.strerror}") from None
        if not found:
            raise NbMemoryError(f"no such file or folder: {raw!r}")
        if folder:
            link = link_outside(resolved, roots)
            if link is not None:
                raise NbMemoryError(
                    f"{link} links to a file outside the allowed roots: remove the link, or index the "
                    "files inside the roots one by one"
                )
        return resolved

    # -- tools ------------------------------------------------------------------------------
    def search(
        self,
        query: Query,
        k: TopK = 10,
        namespace: Namespace = None,
        kind: Kinds = None,
        path: PathGlob = None,
        tags: Tags = [],  # noqa: B006 (never mutated; the schema shows the default)
        since: When = None,
        until: When = None,
        speaker: Speaker = None,
        conversation: Conversation = None,
        full_text: Annotated[
            bool, Field(description="Also return each hit's whole text (default: a snippet).")
        ] = False,
    ) -> SearchData:
        with _errors():
            ns = self.namespace(namespace)
            values = {"k": k, "ns": ns, "kind": kind, "path": path, "tag": tags, "since": since}
            values.update(until=until, speaker=speaker, conversation=conversation)
            result = self.memory.search(query, **search_arguments(query, values))
        found = search_payload(result, lambda h: _hit(h, full_text))
        return {
            "query": found["query"],
            "namespace": ns,
            "rejected": found["rejected"],
            "reason": found["reason"],
            "hits": found["hits"],
        }

    def remember(
        self,
        text: Annotated[
            str, Field(description="The text to store, self-contained (it is read alone later).")
        ],
        tags: Annotated[
            list[str], Field(description="Tags to file it under, e.g. ['ops', 'decision'].")
        ] = [],  # noqa: B006
        importance: Annotated[
            float, Field(ge=0, le=1, description="0 to 1; higher ranks it a little higher (default 0.5).")
        ] = 0.5,
        namespace: Annotated[
            str | None,
            Field(description="Store into this namespace (default: the server's, else 'default')."),
        ] = None,
        at: Annotated[
            str | None,
            Field(
                max_length=64,
                description="For a conversation turn: when it was said, as an ISO 8601 time "
                "(2023-05-08T13:56, or with an offset: 2023-05-08T13:56:00+02:00), not when you store it. "
                "since/until of search then compare this time.",
            ),
        ] = None,
        speaker: Annotated[
            str | None,
            Field(
                max_length=MAX_NAME,
                description="For a conversation turn: who said it ('user', 'assistant' or a name such "
                "as 'Caroline'); search can filter on it.",
            ),
        ] = None,
        conversation: Annotated[
            str | None,
            Field(
                max_length=MAX_NAME,
                description="For a conversation turn: the conversation or session it belongs to (the "
                "same value for every turn of it); search can filter on it.",
            ),
        ] = None,
    ) -> RememberData:
        with _errors():
            self.writable("remember")
            item = self.memory.remember(
                text,
                tags=tags,
                importance=importance,
                namespace=self.namespace(namespace),
                at=at,
                speaker=speaker,
                conversation=conversation,
            )
        return {"item": _item(item), "redacted": item.text != text.strip()}

    def forget(
        self,
        ids: Annotated[
            list[ItemId] | None, Field(max_length=1000, description="Forget these items (ids from search).")
        ] = None,
        query: Annotated[
            str | None, Field(description="Or: forget the top k results of this search.")
        ] = None,
        k: Annotated[int, Field(ge=1, le=MAX_K, description="With query: how many results (default 1).")] = 1,
        dry_run: Annotated[
            bool | None,
            Field(
                description="Only list what would be forgotten. Default: true with query or a "
                "selection (path, kind, since, until), false with ids."
            ),
        ] = None,
        namespace: Namespace = None,
        path: Annotated[
            PathGlob, Field(description="Or select: the items of sources matching this glob.")
        ] = None,
        kind: Annotated[
            Kinds, Field(description="Or select: the items of these kinds (execution: captured cells).")
        ] = None,
        since: Annotated[
            When, Field(description="Or select: what happened since then (an ISO date, or an age: 12h, 30d).")
        ] = None,
        until: Annotated[
            When, Field(description="Or select: what happened until then (an ISO date, or an age).")
        ] = None,
    ) -> ForgetData:
        with _errors():
            selected = any(x is not None for x in (path, kind, since, until))
            if sum((ids is not None, query is not None, selected)) != 1:
                raise ConfigError(
                    "forget needs ids, or query, or a selection by path, kind, since and until (exactly one)"
                )
            dry = ids is None if dry_run is None else dry_run
            if not dry:
                self.writable("forget")
            ns = self.namespace(namespace)
            if query is not None:
                result = self.memory.search(require_words(query), k=k, namespace=ns, log=False)
                candidates = [_candidate(h.id, h.namespace, h.location, h.snippet) for h in result.hits]
                if result.rejected and not dry:
                    raise NbMemoryError(
                        f"nothing forgotten: {result.reason}, so its results may not be what you mean; "
                        "forget by ids instead (search, then forget ids=[...])"
                    )
                forgotten = [] if dry else self.memory.forget(query=query, k=k, namespace=ns)
            elif selected:
                selection: dict[str, Any] = {"path": path, "kind": kind, "since": since, "until": until}
                chosen = self.memory.forget(**selection, namespace=ns, dry_run=True)
                items = [self.item(i, ns) for i in chosen[:MAX_K]]
                candidates = [_candidate(i.id, i.namespace, i.location, i.text) for i in items]
                forgotten = [] if dry else self.memory.forget(**selection, namespace=ns)
            else:
                items = [self.item(i, ns) for i in ids or ()]
                candidates = [_candidate(i.id, i.namespace, i.location, i.text) for i in items]
                forgotten = [] if dry else self.memory.forget([i.id for i in items])
        if dry:
            message = f"dry run: would forget {len(candidates)} item(s); call again with dry_run=false"
        else:
            message = f"forgot {len(forgotten)} item(s)"
        return {"dry_run": dry, "forgotten": forgotten, "candidates": candidates, "message": message}

    def get(self, id: ItemId) -> ItemData:
        with _errors():
            return _item(self.item(id, self.policy.namespace, touch=True))

    def related(
        self, id: ItemId, k: Annotated[int, Field(ge=1, le=MAX_K)] = 5, namespace: Namespace = None
    ) -> RelatedData:
        with _errors():
            ns = self.namespace(namespace)
            # The seed item may lie in another namespace than the results, unless confined.
            self.item(id, self.policy.namespace)
            hits = self.memory.related(id, k=k, namespace=ns)
        return {"id": id, "hits": [_hit(h, False) for h in hits]}

    def context(
        self,
        query: Query,
        budget: Annotated[
            int, Field(ge=50, le=100_000, description="Most tokens the block may take (default 800).")
        ] = 800,
        k: Annotated[
            int, Field(ge=1, le=MAX_K, description="How many results to draw from (default 10).")
        ] = 10,
        namespace: Namespace = None,
        kind: Kinds = None,
        path: PathGlob = None,
        tags: Tags = [],  # noqa: B006
        since: When = None,
        until: When = None,
        speaker: Speaker = None,
        conversation: Conversation = None,
    ) -> ContextData:
        with _errors():
            values = {"k": k, "ns": self.namespace(namespace), "kind": kind, "path": path, "tag": tags}
            values.update(since=since, until=until, speaker=speaker, conversation=conversation)
            result = self.memory.search(query, **search_arguments(query, values))
            # Nothing confident to put in a prompt: an empty block that says why (as %memcontext).
            block = build_context(
                [] if result.rejected else result.hits, budget, query=query, no_answer=result.reason
            )
        if block.included:
            reason = ""
        elif block.no_answer or not result.hits:
            reason = block.no_answer or "no results"
        else:
            reason = "every result was left out: see excluded"
        return {
            "query": query,
            "text": block.text if block.included else "",
            "tokens": block.tokens if block.included else 0,
            "budget": budget,
            "empty": not block.included,
            "reason": reason,
            "included": [
                {"id": x.hit.id, "location": x.hit.location, "tokens": x.tokens, "truncated": x.truncated}
                for x in block.included
            ],
            "excluded": [
                {
                    "id": x.hit.id,
                    "location": x.hit.location,
                    "reason": x.reason + ("; " + "; ".join(f.kind for f in x.findings) if x.findings else ""),
                }
                for x in block.excluded
            ],
        }

    def stats(self) -> dict[str, Any]:
        with _errors():
            stats = self.memory.stats()
        policy = {
            "namespace": self.policy.namespace,
            "read_only": self.policy.read_only,
            "index_roots": [str(r) for r in self.policy.roots],
        }
        if self.policy.namespace is None:
            return {**stats, **policy}
        # Confined: nothing about other namespaces, not even their names or sizes.
        keep = ("model", "dim", "role")
        items = int(stats.get("by_namespace", {}).get(self.policy.namespace, 0))
        return {**{k: stats.get(k) for k in keep}, "items": items, **policy}

    def index(
        self,
        paths: Annotated[
            list[str],
            Field(min_length=1, max_length=100, description="Files or folders inside the allowed roots."),
        ],
        namespace: Annotated[
            str | None,
            Field(description="Index into this namespace (default: the server's, else 'default')."),
        ] = None,
    ) -> IndexData:
        with _errors():
            self.writable("index")
            ns = self.namespace(namespace)
            resolved = [self.inside_roots(p) for p in paths]
            report = self.memory.index(*resolved, namespace=ns)
        return {
            "namespace": ns,
            "summary": report.summary(),
            "files_seen": report.files_seen,
            "files_changed": report.files_changed,
            "files_unchanged": report.files_unchanged,
            "files_removed": report.files_removed,
            "chunks_added": report.chunks_added,
            "chunks_removed": report.chunks_removed,
            "skipped": [{"path": p, "reason": r} for p, r in report.skipped],
        }


@contextlib.contextmanager
def _errors() -> Iterator[None]:
    """nbmemory's own errors (a user mistake, an unknown id, a refusal) as tool errors the model reads."""
    try:
        yield
    except NbMemoryError as exc:
        raise ToolError(str(exc)) from None


def shown_roots(roots: Sequence[Path]) -> str:
    return ", ".join(str(r) for r in roots)


def _hit(hit: Hit, full_text: bool) -> HitData:
    # The one hit payload, in the agent's shape (see HitData): four places, "more" as a line.
    data = hit_payload(hit, full_text)
    data["score"] = round(float(hit.score), 4)
    del data["more"]
    if hit.more:
        data["more"] = f"+{len(hit.more)} more in this file"
    return data  # type: ignore[return-value]


def _item(item: Item) -> ItemData:
    out: ItemData = {
        "id": item.id,
        "namespace": item.namespace,
        "kind": item.kind,
        "source": item.source,
        "location": item.location,
        "cell_number": cell_number(item.cell_index),
        "heading": item.heading,
        "text": item.text,
        "tags": list(item.tags),
        "importance": item.importance,
        "pinned": item.pinned,
        "created_at": item.created_at.isoformat() if item.created_at else None,
        "updated_at": item.updated_at.isoformat() if item.updated_at else None,
        "event_at": item.event_at.isoformat() if item.event_at else None,
        "speaker": item.speaker,
        "conversation": item.conversation,
    }
    warning = injection_warning(item.heading + "\n" + item.text)
    if warning:
        out["warning"] = warning
    return out


def _candidate(item_id: int, namespace: str, location: str, text: str) -> Candidate:
    snippet = text if len(text) <= 200 else text[:197] + "..."
    return {"id": item_id, "namespace": namespace, "location": location, "snippet": snippet}
