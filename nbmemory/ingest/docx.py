"""DOCX: paragraphs, headings, lists and tables of the document body, read with python-docx.

Paragraphs in Word's heading styles (``Heading 1`` ... ``Heading 9``, or a style based on one
of them) form the heading path, rooted at the first paragraph in the ``Title`` style; the body
is chunked like a markdown note (`chunk_blocks`). Lists stay one item per line, a table one row per line with its
cells separated by ``|``. Headers, footers, comments and text boxes are not read. A DOCX has no
lines, so its chunks have no line range: the heading path says where they are.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Iterator
from typing import TYPE_CHECKING

from nbmemory.errors import BadFileError
from nbmemory.ingest.blocks import Block, chunk_blocks
from nbmemory.ingest.types import ChunkDraft

if TYPE_CHECKING:
    from docx.document import Document
    from docx.styles.style import CharacterStyle

__all__ = ["MAX_EXPANDED_BYTES", "chunk_docx"]

#: A DOCX is a zip archive; one whose parts unpack to more than this is refused (a zip bomb).
MAX_EXPANDED_BYTES = 256_000_000
# Word saves a password-protected document (and the old binary .doc) as an OLE compound file.
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_HEADING_STYLE = re.compile(r"heading ([1-9])", re.IGNORECASE)


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _heading_level(style: CharacterStyle | None) -> int:
    """1-9 for a heading style (or one based on it, a few steps up), -1 for Title, else 0."""
    for _ in range(4):
        if style is None:
            return 0
        name = style.name or ""
        if name.lower() == "title":
            return -1
        match = _HEADING_STYLE.fullmatch(name)
        if match:
            return int(match.group(1))
        style = style.base_style
    return 0


def _is_list(style: CharacterStyle | None) -> bool:
    return style is not None and (style.name or "").lower().startswith("list")


def _blocks(document: Document, title: list[str]) -> Iterator[Block]:
    """The body's blocks; the text of the first Title paragraph goes to ``title``."""
    from docx.table import Table

    previous_item = False
    for part in document.iter_inner_content():
        if isinstance(part, Table):
            first = True
            for row in part.rows:
                cells: list[str] = []
                for cell in row.cells:
                    text = " ".join(cell.text.split())
                    # A merged cell is returned once for every grid column it spans.
                    if text and (not cells or cells[-1] != text):
                        cells.append(text)
                if cells:
                    yield Block(" | ".join(cells), tight=not first)
                    first = False
            previous_item = False
            continue
        style = part.style
        level = _heading_level(style)
        text = part.text.strip()
        if level < 0 and text and not title:
            title.append(text)
            continue
        if level:
            yield Block(" ".join(text.split()), level=max(level, 1))
            previous_item = False
        elif _is_list(style) and text:
            yield Block("- " + text, tight=previous_item)
            previous_item = True
        else:
            yield Block(text)
            previous_item = False


def chunk_docx(path: str, data: bytes, max_chars: int) -> list[ChunkDraft]:
    """Chunk a Word document by its headings, like a markdown note.

    Parameters
    ----------
    path:
        The file's path, for messages.
    data:
        The file's bytes.
    max_chars:
        Size cap of each chunk's text.

    Returns
    -------
    list of ChunkDraft
        Chunks of kind ``"docx"`` with their heading path; empty for a document without text.

    Raises
    ------
    BadFileError
        A password-protected or old binary document, a corrupt file, or a zip that unpacks to
        more than `MAX_EXPANDED_BYTES`.
    """
    if data.startswith(_OLE_MAGIC):
        raise BadFileError(
            path,
            "password-protected DOCX (or an old .doc renamed): save it as .docx without a password to index it",
        )
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            expanded = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise BadFileError(path, f"corrupt DOCX: not a zip archive ({_reason(exc)})") from None
    if expanded > MAX_EXPANDED_BYTES:
        raise BadFileError(
            path,
            f"DOCX unpacks to {expanded / 1e6:.0f} MB, over the {MAX_EXPANDED_BYTES / 1e6:.0f} MB "
            "limit for a document's parts",
        )
    import docx

    try:
        document = docx.Document(io.BytesIO(data))
        title: list[str] = []
        blocks = list(_blocks(document, title))
    except Exception as exc:
        raise BadFileError(path, f"corrupt DOCX ({_reason(exc)})") from None
    return chunk_blocks(blocks, "docx", max_chars, title=title[0] if title else None)
