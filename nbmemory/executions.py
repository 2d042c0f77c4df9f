"""Executed cells as items: what a captured run holds, its text, and its row.

A kernel that loaded the extension captures each cell it runs (:mod:`nbmemory.jupyter.capture`)
and hands the owner of the memory a *run*: a mapping of

``source`` (str, required)
    The cell's code as it ran.
``at``
    When it ran (a datetime, naive UTC or aware, or an ISO 8601 string); default now.
``notebook``, ``cell_id``, ``cell_index``
    The notebook it came from (a path) and the cell in it (JupyterLab's cell id; its position
    in the saved file, from 0); None where unknown (a terminal, a notebook never saved).
``error``, ``traceback``
    For a failed run: ``"ValueError: zorblax-quux failed"`` and the last lines of the traceback.
``output``, ``output_chars``
    A plain-text part of what it printed and displayed (no images, no widget state), and how
    many characters there were in all when that is more than ``output`` holds.

A run's notebook is also its ``conversation``: the cells run in one notebook are read in search
as a conversation's turns are, each beside the cells run right before and after it.

One item per notebook, cell and source (:func:`run_key`): running an unchanged cell again moves
its time (and replaces its output and error) instead of adding a copy; an edited cell is a new
item beside the old one, so the run that failed stays next to the one that worked. Everything
is made plain text here, whoever sent it: invalid UTF-8 (lone surrogates) becomes U+FFFD,
control characters and ANSI colours go, output that is mostly not text is replaced by a line
saying so, and anything over the limits below is cut with its size said. Secrets are redacted
(:func:`nbmemory.ingest.redact.redact`) before the row exists.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from nbmemory import validate
from nbmemory.errors import ConfigError
from nbmemory.ingest.redact import redact
from nbmemory.store.chunks import NewChunk
from nbmemory.store.db import utcnow

__all__ = [
    "ERROR_MARKER",
    "KIND",
    "OUTPUT_CHARS",
    "OUTPUT_MARKER",
    "SOURCE_CHARS",
    "TRACEBACK_LINES",
    "plain_text",
    "run_key",
    "run_rows",
    "source_of",
]

#: The kind of a captured run (a search filter: ``kind="execution"``).
KIND = "execution"
#: Where a run's output and its error start in its text (the output's marker is the one indexed
#: notebooks use).
OUTPUT_MARKER = "# Output:"
ERROR_MARKER = "# Error:"
#: At most this much of a cell's source is kept (a cell holding pasted data, say).
SOURCE_CHARS = 20_000
#: At most this much output is kept: its start and its end (:data:`OUTPUT_TAIL`).
OUTPUT_CHARS = 2_000
OUTPUT_TAIL = 500
#: Lines of a traceback kept above its last line.
TRACEBACK_LINES = 5
_ERROR_CHARS = 300

_FIELDS = frozenset(
    {"source", "at", "notebook", "cell_id", "cell_index", "error", "traceback", "output", "output_chars"}
)
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_SURROGATE = re.compile("[\ud800-\udfff]")
# Control characters other than tab and newline (a carriage return is read as a terminal does).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f]")
# Output with more than this share of characters that are not text is binary.
_BINARY_SHARE = 0.1


def plain_text(text: str) -> tuple[str, list[str]]:
    """``text`` as storable plain text, and notes on what was changed to make it so.

    ANSI escape sequences go; a line rewritten with carriage returns (a progress bar) keeps its
    last state; lone surrogates (bytes that were not UTF-8) become U+FFFD; other control
    characters go. Text that is mostly not text (binary written to a stream) becomes ``""``
    with a note saying how long it was.
    """
    notes: list[str] = []
    text = _ANSI.sub("", text).replace("\r\n", "\n")
    if "\r" in text:
        text = "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))
    text, replaced = _SURROGATE.subn("\ufffd", text)
    controls = len(_CONTROL.findall(text))
    odd = controls + text.count("\ufffd")
    if len(text) >= 32 and odd > _BINARY_SHARE * len(text):
        return "", [f"[binary output: {len(text):,} characters, not stored]"]
    if replaced:
        notes.append(f"[{replaced:,} characters of invalid UTF-8 replaced with \ufffd]")
    if controls:
        text = _CONTROL.sub("", text)
    return text, notes


def _clip(text: str, limit: int, tail: int, total: int | None, what: str) -> str:
    """``text`` cut to its first ``limit - tail`` and last ``tail`` characters when longer than
    ``limit``, with a line saying how long it was (``total``: its length before an earlier cut)."""
    size = max(total or 0, len(text))
    kept = len(text)
    if len(text) > limit:
        head = text[: limit - tail]
        text = f"{head}\n…\n{text[len(text) - tail :]}" if tail else head
        kept = limit
    if size > kept:
        text += f"\n[{what} truncated: {size:,} characters in all, {kept:,} kept]"
    return text


def _string(run: Mapping[str, Any], name: str, where: str) -> str | None:
    value = run.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {name} must be a string, got {type(value).__name__}")
    return value


def _text(run: Mapping[str, Any], where: str) -> tuple[str, str, str]:
    """The run's heading, its text and its source as stored (clean and redacted).

    The text is the source, then an ``# Output:`` section, then an ``# Error:`` one: each
    section starts a line with its marker, so the source is the text up to the first of them.
    """
    source = _string(run, "source", where)
    if source is None or not source.strip():
        raise ConfigError(f"{where}: source is empty: a run needs the code that ran")
    source, _ = plain_text(source.strip("\n"))
    source = redact(_clip(source, SOURCE_CHARS, 0, None, "source")).text
    sections: list[str] = []
    output = _string(run, "output", where)
    total = run.get("output_chars")
    if total is not None and (not isinstance(total, int) or isinstance(total, bool)):
        raise ConfigError(f"{where}: output_chars must be an int, got {type(total).__name__}")
    if output is not None and output.strip():
        clean, notes = plain_text(output.strip("\n"))
        kept = [_clip(clean.strip("\n"), OUTPUT_CHARS, OUTPUT_TAIL, total, "output")] if clean.strip() else []
        sections += [OUTPUT_MARKER, *kept, *notes]
    heading = ""
    error = _string(run, "error", where)
    if error is not None:
        error, _ = plain_text(error.strip())
        error = error.splitlines()[0][:_ERROR_CHARS] if error.strip() else "error"
        heading = f"failed: {error}"
        sections.append(f"{ERROR_MARKER} {error}")
        trace = _string(run, "traceback", where)
        if trace is not None:
            lines = [line.rstrip() for line in plain_text(trace)[0].splitlines() if line.strip()]
            if lines and lines[-1].strip() == error:
                lines.pop()
            sections += lines[-TRACEBACK_LINES:]
    # Redacted apart, so that the stored text starts with the stored source exactly.
    text = "\n".join([source, redact("\n".join(sections)).text]) if sections else source
    return redact(heading).text, text, source


def source_of(text: str, source: str) -> bool:
    """Whether a stored run's ``text`` is of the stored ``source`` (and not of a longer one)."""
    if not text.startswith(source):
        return False
    rest = text[len(source) :]
    return rest == "" or rest.startswith((f"\n{OUTPUT_MARKER}\n", f"\n{ERROR_MARKER} "))


def run_key(row: NewChunk, source: str) -> tuple[str, str | None, str | None, str]:
    """What makes two runs the same item: namespace, notebook, cell and (stored) source."""
    return (row.namespace, row.source, row.cell_id, source)


def run_rows(runs: Sequence[Mapping[str, Any]], namespace: str) -> list[tuple[NewChunk, str]]:
    """One ``execution`` row per run, with its stored source (the part of its text that
    :mod:`nbmemory.store.executions` matches); every run checked before any row is made."""
    if isinstance(runs, (Mapping, str)) or not isinstance(runs, Sequence):
        raise ConfigError("capture takes a list of runs (mappings with at least 'source')")
    out: list[tuple[NewChunk, str]] = []
    now = utcnow()
    for i, run in enumerate(runs):
        where = f"run {i}"
        if not isinstance(run, Mapping):
            raise ConfigError(f"{where} must be a mapping with at least 'source', got {type(run).__name__}")
        unknown = sorted(set(run) - _FIELDS)
        if unknown:
            raise ConfigError(
                f"{where}: unknown field(s) {', '.join(map(repr, unknown))}: use {sorted(_FIELDS)}"
            )
        heading, text, source = _text(run, where)
        at = run.get("at")
        when: datetime | None = validate.event_time(at, f"{where} at") if at is not None else now
        notebook = _string(run, "notebook", where)
        cell_id = _string(run, "cell_id", where)
        validate.check_fields(notebook=notebook, cell_id=cell_id)
        index = run.get("cell_index")
        if index is not None and (not isinstance(index, int) or isinstance(index, bool) or index < 0):
            raise ConfigError(f"{where}: cell_index must be an int from 0, got {index!r}")
        row = NewChunk(
            namespace=namespace,
            kind=KIND,
            text=text,
            heading=heading,
            source=notebook,
            cell_id=cell_id,
            cell_index=index,
            event_at=when,
            # The cells run in a notebook follow one another as the turns of a conversation do:
            # search reads each with the cells run before and after it (nbmemory.search.turns).
            conversation=notebook,
        )
        out.append((row, source))
    return out
