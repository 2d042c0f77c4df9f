"""Structured documents (DOCX, HTML) chunked like markdown.

A reader turns its document into `Block`\\ s: headings with their level, paragraphs, list items,
table rows and preformatted text. `chunk_blocks` writes them as markdown (headings as ``#``
lines, preformatted text fenced) and cuts that with `chunk_markdown`, so a document is cut at
its H1/H2 (then H3) headings and packed by paragraph exactly like a note, the heading path
kept. Line ranges are translated back to the source's own lines when the reader knows them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass

from nbmemory.ingest.markdown import chunk_markdown
from nbmemory.ingest.types import ChunkDraft

__all__ = ["Block", "chunk_blocks"]

# Body lines the markdown scanner would read as structure: a heading, a fence, a setext
# underline or front matter. A backslash in front keeps them text (markdown's own escape).
_STRUCTURAL = re.compile(r" {0,3}(?:#|`{3}|~{3})| {0,3}(?:=+|-+)[ \t]*$")
_BACKTICKS = re.compile(r"`+")


@dataclass(frozen=True)
class Block:
    """One unit of a document's text, in reading order.

    Parameters
    ----------
    text:
        The text; line breaks inside it are kept.
    level:
        1 to 6 for a heading (deeper levels count as 6), 0 for body text.
    code:
        Preformatted text, kept whole as a fenced block where it fits a chunk.
    tight:
        Follows the block before it without a blank line (list items, table rows).
    line_start, line_end:
        1-based lines of the source file the block came from, when known.
    """

    text: str
    level: int = 0
    code: bool = False
    tight: bool = False
    line_start: int | None = None
    line_end: int | None = None


def _fence(text: str) -> str:
    longest = max((len(m.group()) for m in _BACKTICKS.finditer(text)), default=0)
    return "`" * max(3, longest + 1)


def _markdown_lines(block: Block) -> list[str]:
    if block.level:
        return ["#" * min(block.level, 6) + " " + " ".join(block.text.split())]
    if block.code:
        fence = _fence(block.text)
        return [fence, *block.text.split("\n"), fence]
    return ["\\" + line.lstrip(" ") if _STRUCTURAL.match(line) else line for line in block.text.split("\n")]


def chunk_blocks(
    blocks: Iterable[Block], kind: str, max_chars: int, title: str | None = None
) -> list[ChunkDraft]:
    """Chunk a document's blocks like a markdown note.

    Parameters
    ----------
    blocks:
        The document's blocks in reading order; blank ones are skipped.
    kind:
        The kind every chunk gets (``"docx"``, ``"html"``).
    max_chars:
        Size cap of each chunk's text.
    title:
        The document's title: the root of every heading path, as a note's front matter title.

    Returns
    -------
    list of ChunkDraft
        Chunks whose ``heading`` is the path of the enclosing H1 and H2 (and H3 when a long
        section was cut at its H3s), with the blocks' source line ranges (None when unknown).
    """
    lines: list[str] = []
    # For each markdown line: the source lines of the block it was written from.
    source: list[tuple[int | None, int | None]] = []
    title = " ".join((title or "").split())
    if title:
        lines += ["---", f"title: {title}", "---"]
        source += [(None, None)] * 3
    for block in blocks:
        if not block.text.strip():
            continue
        if lines and not block.tight:
            lines.append("")
            source.append((None, None))
        written = _markdown_lines(block)
        lines.extend(written)
        source.extend([(block.line_start, block.line_end)] * len(written))
    drafts = chunk_markdown("\n".join(lines), max_chars)
    return [
        dataclasses.replace(
            draft,
            kind=kind,
            line_start=source[draft.line_start - 1][0] if draft.line_start else None,
            line_end=source[draft.line_end - 1][1] if draft.line_end else None,
        )
        for draft in drafts
    ]
