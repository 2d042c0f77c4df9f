"""Plain-text chunker and the size-capped splitting shared by every chunker.

`pack_text` cuts a text into pieces of at most ``max_chars`` characters.  Each piece
is as long as it can be while ending at the coarsest boundary available: a blank
line, else a line end (only inside a paragraph too long for one piece), else a
sentence end, else whitespace, and only for a single token longer than the cap,
anywhere.  It works on string offsets with ``find``/``rfind`` and regexes bounded to
one window per piece, so its cost is linear in the text, not in its number of lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from nbmemory.ingest.types import ChunkDraft

__all__ = [
    "Atom",
    "Piece",
    "atoms_of",
    "chunk_plain",
    "clean_lines",
    "clean_text",
    "pack",
    "pack_text",
    "span_pieces",
]

# Whitespace after a sentence end; the lookbehind keeps the punctuation in the sentence.
_SENTENCE_END = re.compile(r"(?<=[.!?;:。！？])[^\S\n]+")
_SPACE = re.compile(r"[^\S\n]+")
_NEWLINES = re.compile(r"\n*")
_PUNCT_CUT = re.compile(r"[;,&|\"'()\[\]{}<>]")
_TRAILING_SPACE = re.compile(r"[^\S\n](?=\n|\Z)")
# A markdown ATX heading paragraph, kept with the paragraph it introduces.
_HEADING_PARAGRAPH = re.compile(r" {0,3}#{1,6}(?:[ \t][^\n]*)?")


class Atom(NamedTuple):
    """A piece of text no longer than the size cap, with its source lines.

    ``sep`` goes in front of it when it shares a chunk with the atom before.
    """

    text: str
    line_start: int
    line_end: int
    sep: str


class Piece(NamedTuple):
    """One chunk body with its 1-based inclusive source line range."""

    text: str
    line_start: int
    line_end: int


def clean_lines(text: str) -> list[str]:
    """Split text at ``\\n`` and strip trailing whitespace from every line.

    Parameters
    ----------
    text:
        Text with ``\\n`` line ends.

    Returns
    -------
    list of str
        One entry per line, so indices stay aligned with line numbers.
    """
    # Most files have no trailing whitespace; one regex scan beats a per-line rstrip.
    if _TRAILING_SPACE.search(text) is None:
        return text.split("\n")
    return [line.rstrip() for line in text.split("\n")]


def clean_text(text: str) -> str:
    """Strip trailing whitespace from every line, keeping the line count.

    Parameters
    ----------
    text:
        Text with ``\\n`` line ends.

    Returns
    -------
    str
        The text, unchanged when no line had trailing whitespace.
    """
    if _TRAILING_SPACE.search(text) is None:
        return text
    return "\n".join(line.rstrip() for line in text.split("\n"))


def _last_match(pattern: re.Pattern[str], s: str, lo: int, hi: int) -> re.Match[str] | None:
    """Last match of ``pattern`` starting in ``s[lo:hi]`` (a window of bounded size)."""
    last = None
    for m in pattern.finditer(s, lo, hi):
        last = m
    return last


def _find_cut(s: str, pos: int, max_chars: int, headings: bool) -> tuple[int, int]:
    """Where the piece starting at ``pos`` ends, and where the next one starts.

    ``s[pos:]`` is longer than ``max_chars``.  The cut lies in
    ``(pos, pos + max_chars]``; the next piece starts after the separator at the cut.
    A boundary of a finer kind is used only inside a unit of the coarser kind that
    is itself too long (a line break only inside an over-long paragraph, ...).
    Every search is bounded to about ``max_chars`` characters, keeping the whole
    split linear in the text length.
    """
    n = len(s)
    end = pos + max_chars  # s[pos:cut] fits when cut <= end
    best: tuple[int, int] | None = None
    lo = pos  # start of the unit that straddles the end of the window

    # Paragraphs: the last blank line inside the window.
    j = s.rfind("\n\n", pos, end + 2)
    if j > pos:
        best = _keep_heading(s, pos, j) if headings else (j, j + 2)
        lo = j + 2
    if best is not None and (n - lo <= max_chars or s.find("\n\n", lo, lo + max_chars + 2) >= 0):
        return best

    # Lines, inside a paragraph too long for one piece.
    k = s.rfind("\n", lo, end + 1)
    if k > pos:
        best = (k, k + 1)
        lo = k + 1
    if best is not None and _line_fits(s, lo, max_chars):
        return best

    # Sentences, inside a line too long for one piece.
    m = _last_match(_SENTENCE_END, s, lo, end + 1)
    if m is not None and m.start() > pos:
        best = (m.start(), m.end())
        lo = m.end()
    if best is not None and (
        _line_fits(s, lo, max_chars) or _SENTENCE_END.search(s, lo, lo + max_chars + 1) is not None
    ):
        return best

    # Words, inside a sentence too long for one piece; a token longer than the
    # cap starts a piece of its own.
    m = _last_match(_SPACE, s, lo, end + 1)
    if m is not None and m.start() > pos:
        best = (m.start(), m.end())
    if best is not None:
        return best
    # No space in reach (minified code, a long query string): cut after punctuation no
    # credential contains rather than inside a token, which would leave half a secret.
    m = _last_match(_PUNCT_CUT, s, pos + 1, end)
    if m is not None:
        return m.end(), m.end()
    # A token longer than the cap at the start of the piece: cut it anywhere.
    return end, end


def _line_fits(s: str, lo: int, max_chars: int) -> bool:
    """Whether the rest of the line starting at ``lo`` is at most ``max_chars`` long."""
    return len(s) - lo <= max_chars or s.find("\n", lo, lo + max_chars + 1) >= 0


def _keep_heading(s: str, pos: int, j: int) -> tuple[int, int]:
    """Move a paragraph cut before a heading that would end the piece alone."""
    prev = s.rfind("\n\n", pos, j)
    start = prev + 2 if prev > pos else pos
    if prev > pos and _HEADING_PARAGRAPH.fullmatch(s, start, j):
        return prev, prev + 2
    return j, j + 2


def pack_text(s: str, first_line: int, max_chars: int, headings: bool = False) -> list[Piece]:
    """Cut text into pieces of at most ``max_chars`` at the coarsest boundaries.

    Parameters
    ----------
    s:
        Text whose lines have no trailing whitespace (see `clean_lines`).
    first_line:
        1-based line number of the first line of ``s``.
    max_chars:
        Size cap of each piece.
    headings:
        Keep a markdown heading paragraph with the paragraph after it.

    Returns
    -------
    list of Piece
        Non-empty pieces in order, with 1-based inclusive line ranges.
    """
    pieces: list[Piece] = []
    n = len(s)
    pos = 0
    line = first_line  # line number at offset `counted`
    counted = 0
    while True:
        skip = _NEWLINES.match(s, pos)  # "\n*" always matches, possibly empty
        pos = skip.end() if skip else pos
        if pos >= n:
            break
        if n - pos <= max_chars:
            cut, nxt = n, n
        else:
            cut, nxt = _find_cut(s, pos, max_chars, headings)
        text = s[pos:cut].rstrip()
        if text.strip():
            line += s.count("\n", counted, pos)
            counted = pos
            pieces.append(Piece(text, line, line + text.count("\n")))
        pos = nxt
    return pieces


def span_pieces(s: str, first_line: int, max_chars: int, headings: bool = False) -> list[Piece]:
    """Return ``s`` as one piece when it fits the cap, else `pack_text` pieces.

    Parameters
    ----------
    s:
        Text whose lines have no trailing whitespace; inner blank lines are kept
        when it stays whole.
    first_line:
        1-based line number of the first line of ``s``.
    max_chars:
        Size cap.
    headings:
        Passed to `pack_text`.

    Returns
    -------
    list of Piece
        Empty when ``s`` is blank.
    """
    body = s.lstrip("\n")
    first_line += len(s) - len(body)
    body = body.rstrip()
    if not body.strip():
        return []
    if len(body) <= max_chars:
        return [Piece(body, first_line, first_line + body.count("\n"))]
    return pack_text(body, first_line, max_chars, headings)


def pack(atoms: Iterable[Atom], max_chars: int) -> list[Piece]:
    """Greedily join atoms into pieces of at most ``max_chars`` characters.

    Parameters
    ----------
    atoms:
        Atoms in source order, each at most ``max_chars`` long.
    max_chars:
        Size cap.

    Returns
    -------
    list of Piece
        Pieces in source order.
    """
    pieces: list[Piece] = []
    parts: list[str] = []
    size = 0
    start = end = 0
    for atom in atoms:
        if parts and size + len(atom.sep) + len(atom.text) <= max_chars:
            # A list of parts joined once keeps packing linear on huge inputs.
            parts.append(atom.sep)
            parts.append(atom.text)
            size += len(atom.sep) + len(atom.text)
            end = atom.line_end
            continue
        if parts:
            pieces.append(Piece("".join(parts), start, end))
        parts = [atom.text]
        size = len(atom.text)
        start, end = atom.line_start, atom.line_end
    if parts:
        pieces.append(Piece("".join(parts), start, end))
    return pieces


def atoms_of(pieces: Sequence[Piece]) -> list[Atom]:
    """Turn consecutive pieces into atoms, separated as in the source.

    Parameters
    ----------
    pieces:
        Pieces in source order.

    Returns
    -------
    list of Atom
        A newline separates pieces on adjacent lines, a blank line the others.
    """
    atoms: list[Atom] = []
    prev_end = None
    for p in pieces:
        sep = "\n" if prev_end is not None and p.line_start == prev_end + 1 else "\n\n"
        atoms.append(Atom(p.text, p.line_start, p.line_end, sep))
        prev_end = p.line_end
    return atoms


def chunk_plain(text: str, max_chars: int, heading: str = "") -> list[ChunkDraft]:
    """Chunk plain text into paragraphs packed up to ``max_chars``.

    Parameters
    ----------
    text:
        Decoded text with ``\\n`` line ends.
    max_chars:
        Size cap of each chunk's text.
    heading:
        Heading given to every chunk (the file name, set by ``chunk_text``).

    Returns
    -------
    list of ChunkDraft
        Chunks of kind ``"text"`` with 1-based inclusive line ranges.
    """
    s = clean_text(text)
    return [
        ChunkDraft(
            text=p.text,
            heading=heading,
            kind="text",
            line_start=p.line_start,
            line_end=p.line_end,
        )
        for p in pack_text(s, 1, max_chars)
    ]
