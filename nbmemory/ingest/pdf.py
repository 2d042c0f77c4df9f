"""PDF: the text layer of each page, read with pypdf, the page number kept as the location.

Each page is cut on its own (paragraphs, then lines, packed up to the size cap), so every
chunk lies on one page: its location is ``file.pdf#page=N`` (1-based, as PDF viewers count in
a link). The heading path comes from the PDF's outline (bookmarks): a page gets the path of the
last outline entry that starts on it or before it; without an outline it is the file name.
"""

from __future__ import annotations

import io
import logging
import os
import re
from bisect import bisect_right
from typing import TYPE_CHECKING, Any

from nbmemory.errors import BadFileError
from nbmemory.ingest.markdown import SEP
from nbmemory.ingest.text import clean_text, pack_text
from nbmemory.ingest.types import ChunkDraft

if TYPE_CHECKING:
    from pypdf import PdfReader

__all__ = ["chunk_pdf"]

# Outline entries deeper than this are folded into their parent (a heading path, not a table of contents).
MAX_OUTLINE_DEPTH = 3
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_BLANK_LINES = re.compile(r"\n{3,}")


def _quiet_pypdf() -> None:
    # pypdf logs each repair of a damaged file as a warning; with no logging set up by the
    # user, Python would print them in the middle of a progress bar. Set up, they still show.
    logger = logging.getLogger("pypdf")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _outline(reader: PdfReader) -> tuple[list[int], list[str]]:
    """0-based start pages (sorted) and the heading path starting at each."""
    entries: list[tuple[int, str]] = []

    def walk(items: list[Any], parents: list[str]) -> None:
        title = None
        for item in items:
            if isinstance(item, list):
                # A list right after an entry holds that entry's children.
                if title is not None and len(parents) + 1 < MAX_OUTLINE_DEPTH:
                    walk(item, [*parents, title])
                continue
            title = " ".join(str(getattr(item, "title", "") or "").split())
            page = reader.get_destination_page_number(item)
            if title and page is not None and page >= 0:
                entries.append((page, SEP.join([*parents, title])))

    try:
        walk(reader.outline, [])
    except Exception:
        # A broken outline costs the headings, never the text.
        return [], []
    entries.sort(key=lambda e: e[0])
    return [p for p, _ in entries], [h for _, h in entries]


def _page_text(raw: str) -> str:
    text = _CONTROL.sub("", raw.replace("\r\n", "\n").replace("\r", "\n"))
    return _BLANK_LINES.sub("\n\n", clean_text(text)).strip()


def chunk_pdf(path: str, data: bytes, max_chars: int) -> list[ChunkDraft]:
    """Chunk a PDF's text layer page by page.

    Parameters
    ----------
    path:
        The file's path, for messages and the default heading.
    data:
        The file's bytes.
    max_chars:
        Size cap of each chunk's text.

    Returns
    -------
    list of ChunkDraft
        Chunks of kind ``"pdf"`` with ``page`` set; pages without text give none.

    Raises
    ------
    BadFileError
        A corrupt file, a PDF that needs a password, or one with no text layer at all
        (``"scanned: no text to index"``).
    """
    from pypdf import PdfReader
    from pypdf.errors import DependencyError

    _quiet_pypdf()
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        encrypted = reader.is_encrypted
    except Exception as exc:
        raise BadFileError(path, f"corrupt PDF ({_reason(exc)})") from None
    if encrypted:
        try:
            opened = reader.decrypt("")
        except DependencyError:
            raise BadFileError(
                path,
                "encrypted PDF (AES): it opens without a password, but reading it needs the "
                "cryptography package (pip install cryptography)",
            ) from None
        except Exception as exc:
            raise BadFileError(path, f"encrypted PDF that cannot be decrypted ({_reason(exc)})") from None
        if not opened:
            raise BadFileError(
                path, "encrypted PDF: it needs a password; save a copy without one to index it"
            )
    try:
        pages = list(reader.pages)
    except Exception as exc:
        raise BadFileError(path, f"corrupt PDF ({_reason(exc)})") from None
    if not pages:
        raise BadFileError(path, "corrupt PDF (no pages)")
    starts, paths = _outline(reader)
    default = os.path.basename(path)
    drafts: list[ChunkDraft] = []
    failures: list[str] = []
    for number, page in enumerate(pages, start=1):
        try:
            text = _page_text(page.extract_text() or "")
        except Exception as exc:
            # One unreadable page costs that page only.
            failures.append(_reason(exc))
            continue
        at = bisect_right(starts, number - 1)
        heading = paths[at - 1] if at else default
        for piece in pack_text(text, 1, max_chars):
            drafts.append(ChunkDraft(text=piece.text, heading=heading, kind="pdf", page=number))
    if drafts:
        return drafts
    if failures:
        raise BadFileError(path, f"corrupt PDF: no page could be read ({failures[0]})")
    raise BadFileError(
        path, f"scanned: no text to index ({len(pages)} pages without a text layer; run OCR on it first)"
    )
