"""Jupyter notebook chunker (nbformat 4, and nbformat 3 worksheets), stdlib only.

Every markdown cell and every code cell becomes one chunk, or several when it is
longer than the cap.  Text outputs of a code cell are appended to the cell's chunk
under a ``# Output:`` line when code and outputs fit in one chunk together; otherwise
the code is chunked alone (kind ``notebook-code``) and the outputs go to separate
chunks of kind ``notebook-output`` with the same cell id and index.  Images, HTML and
widget outputs are skipped; raw cells and empty cells produce nothing.

What nbmemory wrote itself is left out (:mod:`nbmemory.own_output`): a code cell that calls one
of its magics (alone or assigned), with its outputs; the lines loading the extension; any output
nbmemory rendered (marked in its metadata) and the printed text of its objects; a cell that only
shows one of them.
"""

from __future__ import annotations

import ast
import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from nbmemory.errors import BadFileError
from nbmemory.ingest.markdown import SEP, markdown_pieces, scan_markdown
from nbmemory.ingest.text import Piece, clean_lines, span_pieces
from nbmemory.ingest.types import ChunkDraft
from nbmemory.own_output import calls_magic, is_rendered, without_printed, without_setup

__all__ = ["MAX_OUTPUT_CHARS", "OUTPUT_MARKER", "chunk_notebook"]

MAX_OUTPUT_CHARS = 2000
OUTPUT_MARKER = "# Output:"
TRACEBACK_LINES = 5

# CSI sequences (colours, cursor moves), OSC sequences (links, titles), lone escapes.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
# A repr like "<Figure size 640x480 with 1 Axes>" stands in for a rich output.
_REPR_PLACEHOLDER = re.compile(r"<[^\n]*>")
# Where an output may be cut: whitespace, or punctuation no credential contains.
_BREAK = re.compile(r"[\s;,&|\"'()\[\]{}<>]")
_WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
_V3_MIME = {
    "text": "text/plain",
    "png": "image/png",
    "jpeg": "image/jpeg",
    "svg": "image/svg+xml",
    "html": "text/html",
    "latex": "text/latex",
    "javascript": "application/javascript",
    "json": "application/json",
}
_V3_META = frozenset({"output_type", "prompt_number", "metadata", "execution_count"})
_RICH_PREFIXES = ("image/", "text/html", "application/", "text/latex", "video/")


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _multiline(value: object, path: str, where: str) -> str:
    """Join an nbformat multiline string (a string or a list of strings)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "".join(value)
    raise BadFileError(
        path,
        f"{where} is a {_type_name(value)}, expected a string or a list of strings",
    )


def _clean_output(text: str) -> str:
    """Strip ANSI codes, keep what a terminal shows after carriage returns, cap size."""
    text = _ANSI.sub("", text)
    if "\r" in text:
        # Progress bars rewrite a line with "\r"; only the last state is visible.
        text = "\n".join(line.rstrip("\r").rsplit("\r", 1)[-1] for line in text.split("\n"))
    lines = [line.rstrip() for line in text.split("\n")]
    text = "\n".join(line for line in lines if line).strip("\n")
    if len(text) > MAX_OUTPUT_CHARS:
        head = text[:MAX_OUTPUT_CHARS]
        # Never keep half a token: the half of a secret cut here would escape redaction.
        if not _BREAK.match(text, MAX_OUTPUT_CHARS):
            ends = [m.end() for m in _BREAK.finditer(head, MAX_OUTPUT_CHARS // 2)]
            if ends:
                head = head[: ends[-1]]
        text = f"{head.rstrip()}\n... [truncated {len(text) - len(head)} chars]"
    return text


def _bundle_text(bundle: Mapping[str, Any], path: str, where: str) -> str:
    """Pick the text of a mime bundle; empty when only rich media is there."""
    if _WIDGET_MIME in bundle:
        return ""
    if "text/markdown" in bundle:
        return _multiline(bundle["text/markdown"], path, f"{where} text/markdown")
    plain = _multiline(bundle.get("text/plain"), path, f"{where} text/plain")
    rich = any(k.startswith(_RICH_PREFIXES) for k in bundle if k != "text/plain")
    if rich and _REPR_PLACEHOLDER.fullmatch(plain.strip()):
        return ""
    return plain


def _printed(text: str) -> tuple[str, bool]:
    """A printed text without nbmemory's objects in it, and whether that left nothing of it."""
    raw = _clean_output(text)
    kept = _clean_output(without_printed(_ANSI.sub("", text)))
    return kept, bool(raw) and not kept


def _output_text(out: object, path: str, where: str) -> tuple[str, bool]:
    """The searchable text of one output (empty when it has none), and whether the output was
    nbmemory's own (a table of hits, a result shown or printed: left out)."""
    if not isinstance(out, dict):
        raise BadFileError(path, f"{where} is a {_type_name(out)}, expected an object")
    kind = out.get("output_type")
    if kind == "stream":
        return _printed(_multiline(out.get("text"), path, f"{where} text"))
    if kind in ("execute_result", "display_data", "update_display_data", "pyout"):
        if is_rendered(out.get("metadata")):
            return "", True  # a table of hits, a context block: nbmemory's own output
        data = out.get("data")
        if data is None:
            # nbformat 3 keeps the mime bundle in the output itself, under short keys.
            data = {_V3_MIME.get(k, k): v for k, v in out.items() if k not in _V3_META}
        if not isinstance(data, dict):
            raise BadFileError(path, f"{where} data is a {_type_name(data)}, expected an object")
        return _printed(_bundle_text(data, path, where))
    if kind in ("error", "pyerr"):
        return _error_text(out, path, where), False
    return "", False


def _error_text(out: Mapping[str, Any], path: str, where: str) -> str:
    """Format an error output as 'ename: evalue' plus the last traceback lines."""
    ename = out.get("ename", "")
    evalue = out.get("evalue", "")
    header = _ANSI.sub("", f"{ename}: {evalue}" if evalue else str(ename)).strip()
    traceback = out.get("traceback", [])
    if not isinstance(traceback, list) or not all(isinstance(t, str) for t in traceback):
        raise BadFileError(path, f"{where} traceback is not a list of strings")
    tb = [line.rstrip() for line in _ANSI.sub("", "\n".join(traceback)).split("\n")]
    tb = [line for line in tb if line.strip()]
    if tb and tb[-1].strip() == header:
        tb.pop()
    text = "\n".join([header, *tb[-TRACEBACK_LINES:]]).strip()
    return _clean_output(text)


def _load(path: str, text: str) -> list[Any]:
    """Parse the notebook JSON and return its list of cells, or raise BadFileError."""
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadFileError(path, f"not valid notebook JSON: {exc}") from None
    except RecursionError:
        raise BadFileError(path, "not valid notebook JSON: nested too deeply") from None
    if not isinstance(nb, dict):
        raise BadFileError(path, f"notebook JSON top level is a {_type_name(nb)}, expected an object")
    version = nb.get("nbformat")
    if version is not None and (not isinstance(version, int) or version < 3):
        raise BadFileError(path, f"unsupported nbformat {version!r} (need 3 or 4)")
    if "cells" not in nb and "worksheets" in nb:
        sheets = nb["worksheets"]
        if not isinstance(sheets, list):
            raise BadFileError(path, f'"worksheets" is a {_type_name(sheets)}, expected a list')
        cells: list[Any] = []
        for k, sheet in enumerate(sheets):
            sheet_cells = sheet.get("cells") if isinstance(sheet, dict) else None
            if not isinstance(sheet_cells, list):
                raise BadFileError(path, f'worksheet {k} has no "cells" list')
            cells.extend(sheet_cells)
        return cells
    if "cells" not in nb:
        raise BadFileError(path, 'notebook JSON has no "cells" list (not a notebook?)')
    cells_value = nb["cells"]
    if not isinstance(cells_value, list):
        raise BadFileError(path, f'"cells" is a {_type_name(cells_value)}, expected a list')
    return cells_value


def _title(cells: Sequence[tuple[int, str, str, str | None]], path: str) -> str:
    """First H1 of any markdown cell, else the file name without extension."""
    for _, kind, source, _ in cells:
        if kind != "markdown":
            continue
        for heading in scan_markdown(clean_lines(source)).headings:
            if heading.level == 1 and heading.text:
                return heading.text
    return os.path.splitext(os.path.basename(path))[0]


def _normalize_cells(raw: Sequence[Any], path: str) -> list[tuple[int, str, str, str | None]]:
    """Validate cells into (index, kind, source, id); drops raw and unknown cells."""
    cells: list[tuple[int, str, str, str | None]] = []
    for index, cell in enumerate(raw):
        if not isinstance(cell, dict):
            raise BadFileError(path, f"cell {index} is a {_type_name(cell)}, expected an object")
        kind = cell.get("cell_type")
        if not isinstance(kind, str):
            raise BadFileError(path, f'cell {index} has no "cell_type" string')
        cell_id = cell.get("id")
        cell_id = cell_id if isinstance(cell_id, str) else None
        if kind == "heading":
            # nbformat 3 heading cell: turn it into the markdown heading it stands for.
            level = cell.get("level", 1)
            level = level if isinstance(level, int) and 1 <= level <= 6 else 1
            text = _multiline(cell.get("source"), path, f'cell {index} "source"')
            cells.append((index, "markdown", "#" * level + " " + text.strip(), cell_id))
        elif kind == "markdown":
            text = _multiline(cell.get("source"), path, f'cell {index} "source"')
            cells.append((index, kind, text, cell_id))
        elif kind == "code":
            key = "source" if "source" in cell or "input" not in cell else "input"
            text = _multiline(cell.get(key), path, f'cell {index} "{key}"')
            cells.append((index, kind, text, cell_id))
    return cells


def _outputs(cell: Mapping[str, Any], index: int, path: str) -> tuple[list[str], bool]:
    """The texts of a cell's outputs, and whether any output was nbmemory's own."""
    outputs = cell.get("outputs", [])
    if not isinstance(outputs, list):
        raise BadFileError(path, f'cell {index} "outputs" is a {_type_name(outputs)}, expected a list')
    texts = [_output_text(o, path, f"cell {index} output {k}") for k, o in enumerate(outputs)]
    return [t for t, _ in texts if t], any(own for _, own in texts)


# What a cell that only shows a value is made of: ``hits``, ``result[0]``, ``mem.last``.
_SHOWING = (ast.Module, ast.Expr, ast.Name, ast.Attribute, ast.Subscript, ast.Constant, ast.Slice, ast.Load)


def _only_shows(source: str) -> bool:
    """Whether a code cell is one expression that names a value (no call, no assignment)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    return len(tree.body) == 1 and all(isinstance(node, _SHOWING) for node in ast.walk(tree))


def chunk_notebook(path: str, text: str, max_chars: int) -> list[ChunkDraft]:
    """Chunk a Jupyter notebook cell by cell.

    Parameters
    ----------
    path:
        The notebook's path, used in error messages and for the fallback title.
    text:
        The notebook JSON.
    max_chars:
        Size cap of each chunk's text.

    Returns
    -------
    list of ChunkDraft
        Chunks of kind ``"notebook-markdown"``, ``"notebook-code"`` (with text outputs
        after a ``# Output:`` line when everything fits in one chunk) or
        ``"notebook-output"`` (outputs of a cell too long to hold them).  ``heading``
        is ``"<title> > <nearest preceding markdown heading>"``; ``cell_id`` and
        ``cell_index`` locate the cell; line ranges are None.

    Raises
    ------
    BadFileError
        When the JSON is malformed (truncated files included) or is not a notebook.
    """
    raw = _load(path, text)
    cells = _normalize_cells(raw, path)
    title = _title(cells, path)
    nearest: str | None = None
    chunks: list[ChunkDraft] = []

    def heading_for(context: str | None) -> str:
        if not context or context == title:
            return title
        return f"{title}{SEP}{context}"

    def add(
        pieces: Sequence[Piece],
        kind: str,
        index: int,
        cell_id: str | None,
        heading: str,
    ) -> None:
        for piece in pieces:
            chunks.append(
                ChunkDraft(
                    text=piece.text,
                    heading=heading,
                    kind=kind,
                    cell_id=cell_id,
                    cell_index=index,
                )
            )

    for index, kind, source, cell_id in cells:
        if kind == "code":
            if calls_magic(source):
                continue  # a %memsearch cell and what it printed: the memory must not feed on itself
            code = without_setup(source)
            if not code.strip():
                continue  # %load_ext nbmemory, and what loading it printed
            outputs, own = _outputs(raw[index], index, path)
            if own and not outputs and _only_shows(code):
                continue  # `hits` alone: a cell that shows what nbmemory returned
            source = code
        lines = clean_lines(source.replace("\r\n", "\n"))
        if not any(lines):
            continue
        if kind == "markdown":
            scan = scan_markdown(lines)
            marks = [h for h in scan.headings if h.text]
            for piece in markdown_pieces(lines, max_chars, scan):
                # The piece's context is the last heading at or before its first line.
                context = nearest
                for h in marks:
                    if h.row + 1 <= piece.line_start:
                        context = h.text
                add([piece], "notebook-markdown", index, cell_id, heading_for(context))
            if marks:
                nearest = marks[-1].text
            continue
        heading = heading_for(nearest)
        code = "\n".join(lines).strip("\n")
        combined = "\n".join([code, OUTPUT_MARKER, *outputs]) if outputs else code
        if len(combined) <= max_chars:
            add([Piece(combined, 0, 0)], "notebook-code", index, cell_id, heading)
            continue
        add(span_pieces(code, 1, max_chars), "notebook-code", index, cell_id, heading)
        if outputs:
            add(
                span_pieces("\n\n".join(outputs), 1, max_chars),
                "notebook-output",
                index,
                cell_id,
                heading,
            )
    return chunks
