"""Markdown chunker: sections by heading, then paragraphs, never inside a code fence.

A document is cut at every H1/H2 heading.  A section longer than the cap is cut again
at its H3 headings, and a part still too long is packed paragraph by paragraph.  A
fenced code block stays whole; only a block that alone exceeds the cap is split, by
lines, each part wrapped in the block's own fence lines (language kept).  The
headings that form a chunk's ``heading`` path are left out of its text; deeper
headings stay in the text.
"""

from __future__ import annotations

import os
import re
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from nbmemory.ingest.text import Piece, atoms_of, clean_lines, pack, pack_text, span_pieces
from nbmemory.ingest.types import ChunkDraft

__all__ = ["SEP", "Heading", "MarkdownScan", "chunk_markdown", "markdown_pieces", "scan_markdown"]

SEP = " > "

# Lines that may be a heading, a fence or a setext underline; everything else is text.
_SPECIAL = re.compile(r"^ {0,3}(?:#|`{3}|~{3}|=+$|-+$)", re.M)
_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE_OPEN = re.compile(r"( {0,3})(`{3,}|~{3,})(.*)$")
_THEMATIC_BREAK = re.compile(r" {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
# Lines that cannot be the text of a setext heading (list items, quotes, code).
_NOT_SETEXT_TEXT = re.compile(r"(?: {4}|\t| {0,3}(?:[-*+>]|\d{1,9}[.)])(?:[ \t]|$))")
_FM_CLOSE = re.compile(r"^(?:---|\.\.\.)$", re.M)
_FM_KEY = re.compile(r"([A-Za-z_][\w-]*)[ \t]*:(?:[ \t]+(.*))?$")
_FM_ITEM = re.compile(r"[ \t]*-(?:[ \t]+(.*))?$")


class Heading(NamedTuple):
    """A heading found by `scan_markdown`.

    Parameters
    ----------
    row:
        0-based index of the heading's first line (the text line of a setext heading).
    level:
        1 to 6.
    text:
        The heading text without markers.
    nlines:
        1 for ATX headings, 2 for setext headings.
    """

    row: int
    level: int
    text: str
    nlines: int


@dataclass
class MarkdownScan:
    """Headings and fenced code blocks of a markdown text, in line order."""

    headings: list[Heading] = field(default_factory=list)
    # (opening line index, last line index inclusive) of each fenced code block.
    fences: list[tuple[int, int]] = field(default_factory=list)


class _LineIndex:
    """Turns increasing string offsets into line indices in linear total time."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.offset = 0
        self.line = 0

    def at(self, offset: int) -> int:
        self.line += self.text.count("\n", self.offset, offset)
        self.offset = offset
        return self.line


def scan_markdown(lines: Sequence[str], start: int = 0, text: str | None = None) -> MarkdownScan:
    """Find ATX and setext headings and fenced code blocks ('#' lines in fences skipped).

    Parameters
    ----------
    lines:
        Markdown lines without trailing whitespace.
    start:
        Index of the first line to look at (after front matter).
    text:
        ``"\\n".join(lines)`` when the caller already has it.

    Returns
    -------
    MarkdownScan
        Headings and fences in line order.  An unclosed fence runs to the end.
    """
    if text is None:
        text = "\n".join(lines)
    scan = MarkdownScan()
    index = _LineIndex(text)
    pos = sum(len(line) + 1 for line in lines[:start]) if start else 0
    last_block = start - 1  # last line of the latest heading or fence
    while True:
        m = _SPECIAL.search(text, pos)
        if m is None:
            break
        i = index.at(m.start())
        line = lines[i]
        pos = m.start() + len(line) + 1
        first = line.lstrip(" ")[0]
        if first == "#":
            atx = _ATX.match(line)
            if atx:
                scan.headings.append(Heading(i, len(atx.group(1)), (atx.group(2) or "").strip(), 1))
                last_block = i
            continue
        if first in "`~":
            fence = _FENCE_OPEN.match(line)
            if fence is None or (fence.group(2)[0] == "`" and "`" in fence.group(3)):
                continue
            marker = fence.group(2)
            closing = re.compile(rf"^ {{0,3}}{re.escape(marker[0])}{{{len(marker)},}}[ \t]*$", re.M)
            close = closing.search(text, pos) if pos <= len(text) else None
            if close is None:
                # Unclosed: the block runs to the last non-blank line of the text.
                end = len(lines) - 1
                while end > i and not lines[end]:
                    end -= 1
                pos = len(text) + 1
            else:
                end = index.at(close.start())
                pos = close.start() + len(lines[end]) + 1
            scan.fences.append((i, end))
            last_block = end
            continue
        # "===" or "---": a setext underline when the line above is a one-line paragraph.
        if _is_setext_text(lines, i - 1, start, last_block):
            level = 1 if first == "=" else 2
            scan.headings.append(Heading(i - 1, level, lines[i - 1].strip(), 2))
            last_block = i
    return scan


def _is_setext_text(lines: Sequence[str], j: int, start: int, last_block: int) -> bool:
    """Whether line ``j`` is a one-line paragraph that a setext underline can turn into a heading."""
    if j < start or j <= last_block or not lines[j].strip():
        return False
    text = lines[j]
    if _NOT_SETEXT_TEXT.match(text) or _THEMATIC_BREAK.match(text) or _ATX.match(text):
        return False
    above = j - 1
    return (
        above < start
        or above == last_block
        or not lines[above].strip()
        or bool(_THEMATIC_BREAK.match(lines[above]))
    )


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _front_matter(lines: Sequence[str], text: str) -> tuple[int, str | None, list[str]]:
    """Return (index of the first line after front matter, title, tags)."""
    if not lines or lines[0] != "---":
        return 0, None, []
    close = _FM_CLOSE.search(text, 4)
    if close is None:
        return 0, None, []
    end = text.count("\n", 0, close.start())
    body = lines[1:end]
    # A "---" rule followed by prose is not front matter: every line must look like YAML.
    for line in body:
        if line.strip() and not (line[0] in " \t#-" or _FM_KEY.match(line)):
            return 0, None, []
    title: str | None = None
    tags: list[str] = []
    j = 0
    while j < len(body):
        m = _FM_KEY.match(body[j])
        j += 1
        if not m:
            continue
        key, value = m.group(1).lower(), (m.group(2) or "").strip()
        if key == "title" and value:
            title = _unquote(value) or None
        elif key == "tags":
            if value.startswith("[") and value.endswith("]"):
                tags = [_unquote(t) for t in value[1:-1].split(",")]
            elif value:
                tags = [_unquote(t) for t in value.split(",")]
            else:
                # Block list: "tags:" followed by "- a" lines.
                tags = []
                while j < len(body):
                    item = _FM_ITEM.match(body[j])
                    if item:
                        tags.append(_unquote(item.group(1) or ""))
                    elif body[j].strip():
                        break
                    j += 1
    return end + 1, title, [t for t in tags if t]


def _is_closing(line: str, marker: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and set(stripped) == {marker[0]} and len(stripped) >= len(marker)


def _fence_pieces(lines: Sequence[str], lo: int, hi: int, max_chars: int) -> list[Piece]:
    """Split a fenced block longer than the cap by lines, re-fencing each part.

    ``lo``/``hi`` are the indices of the opening and the last line (inclusive).
    """
    opener = lines[lo]
    fence = _FENCE_OPEN.match(opener)
    marker = fence.group(2) if fence else "```"
    closed = hi > lo and _is_closing(lines[hi], marker)
    body_hi = hi if closed else hi + 1
    budget = max_chars - len(opener) - len(marker) - 2
    body = "\n".join(lines[lo + 1 : body_hi])
    if budget < 1 or not body.strip():
        # The fence lines leave no room for code: split the block as plain lines.
        return pack_text("\n".join(lines[lo : hi + 1]), lo + 1, max_chars)
    parts = pack_text(body, lo + 2, budget)
    pieces: list[Piece] = []
    for k, part in enumerate(parts):
        first = lo + 1 if k == 0 else part.line_start
        last = hi + 1 if k == len(parts) - 1 else part.line_end
        pieces.append(Piece(f"{opener}\n{part.text}\n{marker}", first, last))
    return pieces


def _region_pieces(
    lines: Sequence[str], lo: int, hi: int, scan: MarkdownScan, starts: Sequence[int], max_chars: int
) -> list[Piece]:
    """Pieces for lines ``lo..hi-1``: paragraphs packed, fenced blocks kept whole."""
    first = bisect_left(starts, lo)
    last = bisect_left(starts, hi)
    if first == last:
        return span_pieces("\n".join(lines[lo:hi]), lo + 1, max_chars, headings=True)
    pieces: list[Piece] = []
    cur = lo
    for fence_lo, fence_hi in scan.fences[first:last]:
        fence_hi = min(fence_hi, hi - 1)
        pieces.extend(span_pieces("\n".join(lines[cur:fence_lo]), cur + 1, max_chars, headings=True))
        block = "\n".join(lines[fence_lo : fence_hi + 1])
        if len(block) <= max_chars:
            pieces.append(Piece(block, fence_lo + 1, fence_hi + 1))
        else:
            pieces.extend(_fence_pieces(lines, fence_lo, fence_hi, max_chars))
        cur = fence_hi + 1
    pieces.extend(span_pieces("\n".join(lines[cur:hi]), cur + 1, max_chars, headings=True))
    return pack(atoms_of(pieces), max_chars)


def markdown_pieces(lines: Sequence[str], max_chars: int, scan: MarkdownScan | None = None) -> list[Piece]:
    """Pack markdown by paragraph, keeping fenced code blocks whole; headings stay text.

    Used for notebook markdown cells.

    Parameters
    ----------
    lines:
        Markdown lines without trailing whitespace.
    max_chars:
        Size cap.
    scan:
        The result of `scan_markdown` for ``lines`` when the caller has it.

    Returns
    -------
    list of Piece
        Pieces with 1-based line ranges relative to ``lines``.
    """
    if scan is None:
        scan = scan_markdown(lines)
    starts = [lo for lo, _ in scan.fences]
    return _region_pieces(lines, 0, len(lines), scan, starts, max_chars)


def chunk_markdown(text: str, max_chars: int, file_title: str | None = None) -> list[ChunkDraft]:
    """Chunk a markdown document by H2 (then H3) sections and paragraphs.

    Parameters
    ----------
    text:
        Decoded markdown with ``\\n`` line ends.
    max_chars:
        Size cap of each chunk's text.
    file_title:
        The title a note without its own has (:func:`title_of_file`: Obsidian and similar tools
        name a note by its file and never write the name into it): the root of every heading
        path when there is neither a front matter ``title`` nor an H1.

    Returns
    -------
    list of ChunkDraft
        Chunks of kind ``"markdown"``.  ``heading`` is the path of the enclosing H1
        and H2 headings (plus the H3 when a long section was cut at H3), rooted at
        the front matter ``title`` when there is one; those heading lines are not
        repeated in the text, and a heading with no body gives no chunk.  Front
        matter is dropped; its ``tags`` go to ``meta["tags"]`` (comma-joined).  Line
        ranges are 1-based and inclusive.
    """
    lines = clean_lines(text)
    norm = "\n".join(lines)
    body_start, title, tags = _front_matter(lines, norm)
    meta = {"tags": ",".join(tags)} if tags else {}
    scan = scan_markdown(lines, body_start, norm)
    if title is None and file_title and not any(h.level == 1 for h in scan.headings):
        title = file_title
    fence_starts = [lo for lo, _ in scan.fences]
    h3_lines = [h.row for h in scan.headings if h.level == 3]
    h3_by_line = {h.row: h for h in scan.headings if h.level == 3}

    chunks: list[ChunkDraft] = []

    def emit(path: list[str], pieces: Sequence[Piece]) -> None:
        heading = SEP.join(path)
        for piece in pieces:
            chunks.append(
                ChunkDraft(
                    text=piece.text,
                    heading=heading,
                    kind="markdown",
                    line_start=piece.line_start,
                    line_end=piece.line_end,
                    meta=dict(meta),
                )
            )

    def section(path: list[str], lo: int, hi: int) -> None:
        body = "\n".join(lines[lo:hi])
        if len(body.strip()) <= max_chars:
            emit(path, span_pieces(body, lo + 1, max_chars))
            return
        subs = h3_lines[bisect_left(h3_lines, lo) : bisect_left(h3_lines, hi)]
        if not subs:
            emit(path, _region_pieces(lines, lo, hi, scan, fence_starts, max_chars))
            return
        # Too long: cut at H3 headings, each H3 joining the heading path.
        emit(path, _region_pieces(lines, lo, subs[0], scan, fence_starts, max_chars))
        for k, sub in enumerate(subs):
            end = subs[k + 1] if k + 1 < len(subs) else hi
            h3 = h3_by_line[sub]
            sub_path = [*path, h3.text] if h3.text else path
            emit(sub_path, _region_pieces(lines, sub + 1, end, scan, fence_starts, max_chars))

    h1: str | None = None
    h2: str | None = None
    lo = body_start
    for heading in scan.headings:
        if heading.level > 2:
            continue
        section(_path(title, h1, h2), lo, heading.row)
        if heading.level == 1:
            h1, h2 = heading.text, None
        else:
            h2 = heading.text
        lo = heading.row + heading.nlines
    section(_path(title, h1, h2), lo, len(lines))
    return chunks


def title_of_file(path: str) -> str:
    """A note's title from its file name: ``Weekly review.md`` -> ``Weekly review``,
    ``skip-a-bad-commit.md`` -> ``skip a bad commit`` (a name of letters without spaces is taken
    as words joined by ``-`` or ``_``); ``2024-05-01.md`` stays ``2024-05-01``."""
    stem = os.path.splitext(os.path.basename(path))[0].strip()
    if " " in stem or not re.search(r"[^\W\d_]", stem):
        return stem
    return " ".join(w for w in re.split(r"[-_]+", stem) if w)


def _path(title: str | None, h1: str | None, h2: str | None) -> list[str]:
    """Heading path: front-matter title, then H1 (unless equal to it), then H2."""
    path: list[str] = []
    if title:
        path.append(title)
    if h1 and h1 != title:
        path.append(h1)
    if h2:
        path.append(h2)
    return path
