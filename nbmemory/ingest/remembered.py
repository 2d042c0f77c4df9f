"""Rows for texts a user asks to remember: redacted like every indexed file."""

from __future__ import annotations

from collections.abc import Sequence

from nbmemory.ingest.redact import redact
from nbmemory.store.chunks import NewChunk


def remembered_rows(
    texts: Sequence[str],
    namespace: str,
    tags: list[str],
    importance: float,
    sources: Sequence[str | None],
    headings: Sequence[str],
) -> list[NewChunk]:
    """One ``memory`` row per text, secrets redacted from text and heading."""
    return [
        NewChunk(
            namespace=namespace,
            kind="memory",
            text=redact(text.strip()).text,
            heading=redact(heading).text,
            source=source,
            tags=tags,
            importance=importance,
        )
        for text, source, heading in zip(texts, sources, headings, strict=True)
    ]
