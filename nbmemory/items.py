"""Plain dataclasses for what the store holds (:class:`Item`) and what a search returns (:class:`Hit`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from nbmemory.own_output import mimebundle

#: Every kind an item can have: what files are chunked as (ingest) and what a search filters on.
KINDS = ("markdown", "notebook", "code", "text", "html", "pdf", "docx", "memory", "execution", "chat")
ITEM_COLUMNS = (
    "id, namespace, kind, source, text, heading, cell_id, cell_index, line_start, line_end, page, "
    "tags, importance, pinned, access_count, retrieval_count, created_at, updated_at, deleted_at, "
    "event_at, speaker, conversation"
)


@dataclass
class Item:
    """One stored chunk or remembered memory.

    ``event_at``, ``speaker`` and ``conversation`` say when what it holds was said or happened
    (naive UTC; ``created_at`` is when it was stored), who said it, and in which conversation or
    session: set for conversation turns, None when not given.
    """

    id: int
    namespace: str
    kind: str
    source: str | None
    text: str
    heading: str = ""
    cell_id: str | None = None
    cell_index: int | None = None
    line_start: int | None = None
    line_end: int | None = None
    page: int | None = None
    tags: list[str] = field(default_factory=list)
    importance: float = 0.5
    pinned: bool = False
    access_count: int = 0
    retrieval_count: int = 0
    created_at: datetime | None = None
    updated_at: datetime | None = None
    deleted_at: datetime | None = None
    event_at: datetime | None = None
    speaker: str | None = None
    conversation: str | None = None

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> Item:
        (
            id_,
            ns,
            kind,
            source,
            text,
            heading,
            cell_id,
            cell_index,
            ls,
            le,
            page,
            tags,
            imp,
            pinned,
            acc,
            ret,
            created,
            updated,
            deleted,
            event_at,
            speaker,
            conversation,
        ) = row
        return cls(
            int(id_),
            ns,
            kind,
            source,
            text,
            heading or "",
            cell_id,
            cell_index,
            ls,
            le,
            page,
            list(tags or []),
            float(imp),
            bool(pinned),
            int(acc),
            int(ret),
            created,
            updated,
            deleted,
            event_at,
            speaker,
            conversation,
        )

    def to_dict(self) -> dict[str, Any]:
        """The item as JSON-ready data: times as ISO strings, and its ``location``."""
        data = asdict(self)
        for name in ("created_at", "updated_at", "deleted_at", "event_at"):
            value = getattr(self, name)
            data[name] = value.isoformat() if value else None
        data["location"] = self.location
        data["cell_number"] = None if self.kind == "chat" else cell_number(self.cell_index)
        return data

    @property
    def location(self) -> str:
        """``path:12-30``, ``notebook.ipynb#cell 4``, ``file.pdf#page=3`` or ``(remembered)``."""
        return location(
            self.source, self.cell_index, self.line_start, self.line_end, self.page, self.cell_id, self.kind
        )

    def _repr_mimebundle_(
        self, include: Any = None, exclude: Any = None
    ) -> tuple[dict[str, str], dict[str, Any]]:
        # Shown in a notebook, a stored item is nbmemory's own output: indexing leaves it out.
        return mimebundle(self, "Item")


def cell_number(cell_index: int | None) -> int | None:
    """The cell's number as JupyterLab shows it (from 1), for ``cell_index`` (from 0); None off a notebook."""
    return None if cell_index is None else cell_index + 1


def location(
    source: str | None,
    cell_index: int | None,
    line_start: int | None,
    line_end: int | None,
    page: int | None = None,
    cell_id: str | None = None,
    kind: str | None = None,
) -> str:
    """Where a chunk is: ``path:12-30``, ``notebook.ipynb#cell 4``, ``team.chat#message 2``,
    ``file.pdf#page=3`` or ``(remembered)``.

    Cells count from 1, as JupyterLab numbers them (``cell_index`` counts from 0); a cell of the
    kernel's history notebook is named by its execution count (``kernel-3.ipynb#In [5]``); a
    chat's messages count from 1 too (a chat item keeps its message's position in ``cell_index``).
    A page is written as a PDF viewer's URL fragment, so the location also works as a link.
    """
    if source is None:
        return "(remembered)"
    if cell_index is not None and kind == "chat":
        return f"{source}#message {cell_index + 1}"
    if cell_index is not None:
        history = cell_id == f"in-{cell_index}"
        return f"{source}#In [{cell_index}]" if history else f"{source}#cell {cell_index + 1}"
    if page is not None:
        return f"{source}#page={page}"
    if line_start is not None:
        return f"{source}:{line_start}" + (f"-{line_end}" if line_end and line_end != line_start else "")
    return source


#: What a hit's ``tier`` says, for the legends of every front end.
TIER_MEANING = (
    "tier (high, medium, low): how close in meaning the item is to the query, by the model's cosine "
    "against levels set for this model; not a rank: an exact keyword match can be #1 and low"
)


@dataclass
class Hit:
    """One search result.

    ``ranks`` maps each retriever (``"bm25"``, ``"vector"``) to the 1-based rank it gave this
    item, absent when that retriever did not return it; ``retriever_scores`` holds the raw
    scores (BM25 score, cosine similarity). ``similarity`` is the item's cosine similarity to
    the query, and ``tier`` (``high``, ``medium``, ``low``, ``none``) how likely an item that close
    is relevant, from thresholds derived for the active model (``none`` when there are none).
    ``more`` lists the other chunks of the same source that ranked (best first) when results
    are grouped per source; ``weak`` marks a hit neither retriever supports (a weaker match).
    ``event_at``, ``speaker`` and ``conversation`` are the item's (see :class:`Item`). ``store``
    says where the item lives: ``"personal"`` (the memory file) or ``"team"`` (the team's lake,
    :mod:`nbmemory.team`; its ``id`` is the lake's).
    """

    id: int
    score: float
    text: str
    snippet: str
    source: str | None
    kind: str
    namespace: str
    heading: str = ""
    cell_id: str | None = None
    cell_index: int | None = None
    line_start: int | None = None
    line_end: int | None = None
    page: int | None = None
    tags: list[str] = field(default_factory=list)
    importance: float = 0.5
    updated_at: datetime | None = None
    event_at: datetime | None = None
    speaker: str | None = None
    conversation: str | None = None
    ranks: dict[str, int] = field(default_factory=dict)
    retriever_scores: dict[str, float] = field(default_factory=dict)
    similarity: float | None = None
    tier: str = "none"
    more: list[int] = field(default_factory=list)
    weak: bool = False
    store: str = "personal"

    @property
    def found_by(self) -> list[str]:
        return sorted(self.ranks)

    @property
    def location(self) -> str:
        return location(
            self.source, self.cell_index, self.line_start, self.line_end, self.page, self.cell_id, self.kind
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["updated_at"] = self.updated_at.isoformat() if self.updated_at else None
        data["event_at"] = self.event_at.isoformat() if self.event_at else None
        data["location"] = self.location
        data["cell_number"] = None if self.kind == "chat" else cell_number(self.cell_index)
        data["found_by"] = self.found_by
        return data

    def _repr_mimebundle_(
        self, include: Any = None, exclude: Any = None
    ) -> tuple[dict[str, str], dict[str, Any]]:
        # Shown in a notebook, a stored item is nbmemory's own output: indexing leaves it out.
        return mimebundle(self, "Hit")
