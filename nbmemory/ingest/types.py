"""The shape every chunker produces."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True)
class ChunkDraft:
    """One chunk cut from a source, before it is stored.

    Parameters
    ----------
    text:
        The chunk's own text (what BM25 indexes at full weight and what is shown).
    heading:
        Context that locates the chunk: a markdown heading path ("Setup > Docker"),
        a notebook's nearest markdown heading, or a code definition's qualified name.
        Indexed at lower weight and prepended for embedding.
    kind:
        "markdown", "code", "notebook-markdown", "notebook-code", "notebook-output", "text",
        "pdf", "docx", "html", "chat".
    line_start, line_end:
        1-based inclusive line range in the source file (None for notebooks, PDF and DOCX).
    cell_id, cell_index:
        For notebooks: nbformat cell id (may be None for old notebooks) and 0-based index.
    page:
        For PDF: the 1-based page the chunk is on.
    event_at, speaker, conversation:
        For a chat message: when it was sent (naive UTC), its sender's name, and the chat.
    """

    text: str
    heading: str = ""
    kind: str = "text"
    line_start: int | None = None
    line_end: int | None = None
    cell_id: str | None = None
    cell_index: int | None = None
    page: int | None = None
    meta: dict[str, str] = field(default_factory=dict)
    event_at: datetime | None = None
    speaker: str | None = None
    conversation: str | None = None
