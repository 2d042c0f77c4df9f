"""Rows for texts a user asks to remember: redacted like every indexed file."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from nbmemory.ingest.redact import redact
from nbmemory.store.chunks import NewChunk


def remembered_rows(
    texts: Sequence[str],
    namespace: str,
    tags: list[str],
    importance: float,
    sources: Sequence[str | None],
    headings: Sequence[str],
    times: Sequence[datetime | None] | None = None,
    speakers: Sequence[str | None] | None = None,
    conversations: Sequence[str | None] | None = None,
) -> list[NewChunk]:
    """One ``memory`` row per text, secrets redacted from text and heading; ``times``,
    ``speakers`` and ``conversations`` (checked, one per text) make them conversation turns."""
    n = len(texts)
    return [
        NewChunk(
            namespace=namespace,
            kind="memory",
            text=redact(text.strip()).text,
            heading=redact(heading).text,
            source=source,
            tags=tags,
            importance=importance,
            event_at=at,
            speaker=speaker,
            conversation=conversation,
        )
        for text, source, heading, at, speaker, conversation in zip(
            texts,
            sources,
            headings,
            times or [None] * n,
            speakers or [None] * n,
            conversations or [None] * n,
            strict=True,
        )
    ]
