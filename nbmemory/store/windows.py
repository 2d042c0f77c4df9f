"""Passages: windows of consecutive sentences inside a chunk, each embedded on its own.

MiniLM reads 256 word pieces; a 1,200-character chunk is near that, and the one sentence a question
is about is diluted by the rest of it. A chunk of prose that holds two or more windows also gets a
vector per window, and search scores the chunk by the best of its own cosine and its windows'
(:mod:`nbmemory.store.passages`). A window starts at every sentence (or paragraph, or code block)
and takes the following ones while it stays under :data:`WINDOW_CHARS` characters; one long block
is cut at twice that. The window size is chosen by ``bench/quality/granularity.py``
(docs/evaluation/notes.md, "Passages").
"""

from __future__ import annotations

import re

#: Characters a window may reach before it stops taking sentences.
WINDOW_CHARS = 400
#: Kinds whose chunks get windows: prose. Code is split by its own structure already.
KINDS = frozenset({"markdown", "notebook", "text", "html", "pdf", "docx", "memory"})

_PARAGRAPHS = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def pieces(text: str) -> list[str]:
    """Sentences of prose paragraphs; a fenced or indented block stays whole."""
    out: list[str] = []
    for para in _PARAGRAPHS.split(text):
        para = para.strip()
        if not para:
            continue
        if para.startswith(("```", "    ")):
            out.append(para)
            continue
        out.extend(s.strip() for s in _SENTENCE_END.split(para) if s.strip())
    return out


def piece_spans(text: str) -> list[tuple[int, int]]:
    """Where each of :func:`pieces` lies in ``text``: (start, end) character offsets."""
    spans: list[tuple[int, int]] = []
    at = 0
    for piece in pieces(text):
        start = text.find(piece, at)
        if start < 0:  # cannot happen (pieces are stripped slices of the text); keep going
            start = at
        spans.append((start, start + len(piece)))
        at = start + len(piece)
    return spans


def window_spans(text: str, size: int = WINDOW_CHARS) -> list[tuple[int, int]]:
    """Where each of :func:`windows` lies in ``text``: the first piece's start to the last piece's
    end (a window cut at ``2 * size`` ends there)."""
    parts = pieces(text)
    spans = piece_spans(text)
    out: list[tuple[int, int]] = []
    i = 0
    while i < len(parts):
        length, j = len(parts[i]), i + 1
        while j < len(parts) and length + len(parts[j]) < size:
            length += 1 + len(parts[j])
            j += 1
        start = spans[i][0]
        out.append((start, min(spans[j - 1][1], start + 2 * size)))
        if j >= len(parts):
            break
        i += 1
    return out


def windows(text: str, size: int = WINDOW_CHARS, disjoint: bool = False) -> list[str]:
    """One window per starting piece, each taking the next pieces while under ``size`` characters
    (cut at ``2 * size``); the last window reaches the end of the text. ``disjoint``: the next
    window starts where the last one ended instead (measured, not used: ``bench/quality/granularity.py``)."""
    parts = pieces(text)
    out: list[str] = []
    i = 0
    while i < len(parts):
        window, j = parts[i], i + 1
        while j < len(parts) and len(window) + len(parts[j]) < size:
            window += " " + parts[j]
            j += 1
        out.append(window[: 2 * size])
        if j >= len(parts):
            break
        i = j if disjoint else i + 1
    return out
