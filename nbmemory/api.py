"""The operations of a memory, declared once.

:class:`MemoryAPI` is what every front end (CLI, magics, widgets, server, agents) may call.
:class:`~nbmemory.Memory` implements it; :class:`~nbmemory.remote.shared.SharedMemory` derives a
proxy for each method from it; the owner of a memory file serves exactly :data:`API_METHODS`.
A new operation is declared here once, with its signature and docstring.
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from nbmemory.ingest.indexer import IndexReport
    from nbmemory.items import Hit, Item
    from nbmemory.search.config import PipelineConfig
    from nbmemory.search.result import SearchResult
    from nbmemory.store.doctor import DoctorReport
    from nbmemory.tune.versions import ModelVersion


#: The value types the operations take and return, for the front ends: imported on first use,
#: so that a client of a warm owner, which never needs DuckDB or numpy, does not load them.
TYPES = {
    "IndexReport": "nbmemory.ingest.indexer",
    "PipelineConfig": "nbmemory.search.config",
    "SearchResult": "nbmemory.search.result",
    "Trace": "nbmemory.search.trace",
}


def __getattr__(name: str) -> Any:
    module = TYPES.get(name)
    if module is None:
        raise AttributeError(f"module 'nbmemory.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


class MemoryAPI(Protocol):
    """A personal memory: index, remember, search, forget, and keep it healthy."""

    def index(
        self,
        *paths: str | os.PathLike[str],
        namespace: str | None = None,
        progress: Callable[..., None] | None = None,
    ) -> IndexReport:
        """Index files and folders (markdown, notebooks, code, text, PDF, DOCX, HTML), incrementally.

        Unchanged files are skipped by mtime and size, then by content hash; removed files
        lose their chunks; bad files are skipped with a message in ``report.skipped``.
        ``progress(done, total, path, snapshot)`` is called as the run goes: files finished
        (embedded and written) of all files, the file at hand, and a dict of
        :class:`nbmemory.progress.IndexProgress` (phase, files read, chunks and passages
        embedded, rate, time left, the line that says so); a callback that takes only the first
        three gets those. A client's callback runs in its own process, from what the owner sends.
        ``report.seconds`` is the wall time of the whole call, the model's load included. An
        indexed folder is remembered as a root (:meth:`roots`) that the live indexer keeps current.
        """
        ...

    def roots(self) -> list[dict[str, Any]]:
        """The folders this memory keeps current: ``[{path, namespace, added_at}]``.

        A folder becomes a root when it is indexed (a folder inside a root of the same namespace
        is covered by it). The live indexer (``nbmemory watch``, the Jupyter server) re-indexes
        what changes under them.
        """
        ...

    def remove_root(self, path: str | os.PathLike[str], *, namespace: str | None = None) -> int:
        """Stop keeping a folder current (in ``namespace``, or in every namespace).

        What was indexed from it stays searchable (``forget(path=...)`` removes it). Returns the
        number of roots removed.
        """
        ...

    def remember(
        self,
        text: str,
        *,
        tags: Sequence[str] = (),
        importance: float = 0.5,
        namespace: str | None = None,
        source: str | None = None,
        heading: str = "",
        at: str | datetime | None = None,
        speaker: str | None = None,
        conversation: str | None = None,
        request_key: str | None = None,
    ) -> Item:
        """Store a piece of text; it is found by the very next search.

        For a conversation turn, ``at`` is when it was said (a datetime, an aware one converted to
        UTC, or an ISO 8601 string such as ``"2023-05-08T13:56"``), ``speaker`` who said it
        (``"user"``, ``"assistant"``, ``"Caroline"``) and ``conversation`` the conversation or
        session it belongs to; searches filter on the last two, and ``since``/``until`` range over
        ``at`` where it is set. ``request_key`` makes the call idempotent: a retry with the same key
        (a client whose owner died after committing) returns the item stored the first time.
        """
        ...

    def remember_many(
        self,
        texts: Sequence[str],
        *,
        tags: Sequence[str] = (),
        importance: float = 0.5,
        namespace: str | None = None,
        sources: Sequence[str | None] | None = None,
        headings: Sequence[str] | None = None,
        times: Sequence[str | datetime | None] | None = None,
        speakers: Sequence[str | None] | None = None,
        conversations: Sequence[str | None] | None = None,
        batch_size: int = 512,
        progress: Callable[[int], None] | None = None,
        request_key: str | None = None,
    ) -> list[int]:
        """Store many texts at once (batched embedding, one transaction per batch).

        ``sources``, ``headings``, ``times``, ``speakers`` and ``conversations`` give one value per
        text (see :meth:`remember` for the last three: the turns of a conversation). Returns the new
        ids in input order. Empty texts and bad values are rejected before anything is written.
        With ``request_key``, a retried call skips the batches already committed.
        """
        ...

    def capture(self, runs: Sequence[Mapping[str, Any]], *, namespace: str | None = None) -> list[int]:
        """Store executed cells (runs), one item of kind ``execution`` per notebook, cell and source.

        Each run is a mapping: ``source`` (the code, required), ``at`` (when it ran; default
        now), ``notebook``, ``cell_id`` and ``cell_index`` (where it came from), ``error`` and
        ``traceback`` (a failed run's ``"ValueError: ..."`` and last traceback lines), ``output``
        and ``output_chars`` (a plain-text part of what it printed and displayed, and how much
        there was in all): see :mod:`nbmemory.executions`. A run of a cell already stored with
        the same source moves that item's time and replaces its output and error instead of
        adding a copy. Text is made plain (invalid UTF-8, control characters and binary output
        are replaced, with a note), cut to its limits with its size said, and redacted before it
        is stored; found by the very next search. Returns the item id of each run, in order.
        What a kernel that loaded the extension sends by itself (``%memcapture``).
        """
        ...

    def get(self, item_id: int, *, touch: bool = True, include_forgotten: bool = False) -> Item:
        """Read one item; counts as an access unless ``touch=False``."""
        ...

    def update(
        self,
        item_id: int,
        *,
        text: str | None = None,
        tags: Sequence[str] | None = None,
        importance: float | None = None,
        pinned: bool | None = None,
        at: str | datetime | None = None,
        speaker: str | None = None,
        conversation: str | None = None,
    ) -> Item:
        """Change an item's text, tags, importance, pin, event time, speaker or conversation; new
        text is re-embedded and indexed.

        None leaves a field as it is; ``""`` clears ``at``, ``speaker`` or ``conversation``.
        """
        ...

    def forget(
        self,
        item_id: int | Iterable[int] | None = None,
        *,
        query: str | None = None,
        k: int = 1,
        path: str | None = None,
        namespace: str | None = None,
        kind: str | Sequence[str] | None = None,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        dry_run: bool = False,
    ) -> list[int]:
        """Forget items by id, by the top ``k`` hits of ``query``, or by source ``path`` (a glob).

        ``kind``, ``since`` and ``until`` select as in :meth:`search` (``since``/``until`` range
        over when a thing happened), alone or narrowing ``path``: ``forget(kind="execution",
        path="analysis.ipynb")`` forgets what was run in that notebook and keeps its indexed
        cells, ``forget(kind="execution", since="2h")`` the cells captured in the last two hours.
        Forgotten items are soft-deleted (the row records when and why) and never returned by
        search again; a file forgotten by ``path`` alone is not re-indexed. Returns the ids
        forgotten; :meth:`restore` brings them back. ``dry_run=True`` forgets nothing and returns
        the ids that would go.
        """
        ...

    def restore(self, item_id: int | Iterable[int]) -> list[int]:
        """Bring forgotten items back (the undo of :meth:`forget`): they are searchable again,
        with their text, tags, importance and counters as they were, and a file they came from
        is indexed again when it changes. Returns the ids restored (items not forgotten are left
        as they are); raises :class:`NotFoundError` for an id never stored.
        """
        ...

    def link(self, src: int, dst: int, type: str = "related", note: str | None = None) -> None:
        """Record a typed link ``src -> dst`` (similar, related, contradicts, extends,
        supersedes, caused_by, temporal)."""
        ...

    def links(self, item_id: int) -> list[dict[str, Any]]:
        """Links from and to an item."""
        ...

    def related(self, item_id: int, k: int = 5, *, namespace: str | None = None) -> list[Hit]:
        """Items most similar to ``item_id`` by vector, plus those it links to.

        ``namespace`` restricts the results (similar and linked items) to one namespace, as
        for :meth:`search`; ``None`` looks in every namespace.
        """
        ...

    def search(
        self,
        query: str,
        k: int = 10,
        *,
        namespace: str | None = None,
        kind: str | Sequence[str] | None = None,
        path: str | None = None,
        tags: Sequence[str] = (),
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        speaker: str | None = None,
        conversation: str | None = None,
        config: PipelineConfig | None = None,
        log: bool = True,
    ) -> SearchResult:
        """Hybrid search: BM25 and vector retrieval fused (convex by default, or RRF), then the stages.

        Filters restrict the results exactly (a filter matching 1 % of items still yields
        ``k`` hits when ``k`` exist): see :class:`~nbmemory.search.filters.Filters`. ``since`` and
        ``until`` range over when a thing happened (an item's event time, else its last update);
        ``speaker`` and ``conversation`` match exactly. Returned items have their retrieval
        counters raised.
        """
        ...

    def stats(self) -> dict[str, Any]:
        """Counts, sizes and index state; ``refine``: ``{"done", "total"}``, the passages stored of
        those the live chunks need (they differ while the background refiner works)."""
        ...

    def wait_refined(self, timeout: float | None = None) -> bool:
        """Wait until every passage the memory's chunks need is stored (the background refiner of
        :mod:`nbmemory.refine` has caught up with the writes); True then, False when ``timeout``
        seconds passed first. A memory is searchable before: this is for benchmarks and scripts
        that want its final rankings."""
        ...

    def doctor(self, repair: bool = False) -> DoctorReport:
        """Check integrity; with ``repair=True`` fix what can be fixed from stored data."""
        ...

    def export(self, out: str | os.PathLike[str], include_forgotten: bool = False) -> int:
        """Write items (no vectors) to Parquet, CSV or JSON lines, chosen by the file suffix."""
        ...

    def reembed(self) -> int:
        """Re-embed every live item with the current model (after a model change).

        Resumable: vectors are staged in batches that are committed one by one, so a run that is
        killed goes on from where it stopped the next time (here, on open, or through
        ``doctor(repair=True)``). Searches keep using the old vectors until one transaction swaps
        all of them at once. Returns the number of live items.
        """
        ...

    def models(self) -> list[ModelVersion]:
        """Every model version of this memory (:class:`~nbmemory.tune.versions.ModelVersion`).

        ``in_use`` marks the model whose vectors the store holds; ``active`` the one it opens with.
        """
        ...


#: The operations of :class:`MemoryAPI`, in declaration order.
API_METHODS: tuple[str, ...] = tuple(
    name for name, value in vars(MemoryAPI).items() if not name.startswith("_") and inspect.isfunction(value)
)


def signature(name: str) -> inspect.Signature:
    """The declared signature of one operation, without ``self``."""
    sig = inspect.signature(getattr(MemoryAPI, name))
    return sig.replace(parameters=list(sig.parameters.values())[1:])


C = TypeVar("C", bound=type)


def implements(cls: C) -> C:
    """Class decorator: check that ``cls`` has every operation with its declared parameters, and
    give the methods that have none the declared docstring."""
    for name in API_METHODS:
        method = getattr(cls, name, None)
        if method is None:
            raise TypeError(f"{cls.__name__} lacks the memory operation {name!r}")
        # Parameters must match exactly; return annotations may name the type another way.
        declared = signature(name).replace(return_annotation=inspect.Signature.empty)
        ours = inspect.signature(method).replace(return_annotation=inspect.Signature.empty)
        ours = ours.replace(parameters=list(ours.parameters.values())[1:])
        if str(ours) != str(declared):
            raise TypeError(f"{cls.__name__}.{name}{ours} differs from MemoryAPI.{name}{declared}")
        if not method.__doc__:
            method.__doc__ = getattr(MemoryAPI, name).__doc__
    return cls
