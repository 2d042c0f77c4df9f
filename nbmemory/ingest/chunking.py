"""Entry points of chunking: which files are ingested, decoding, dispatch by kind.

``chunk_file(path, data)`` decodes the bytes strictly as UTF-8 and hands the text to
the chunker for the file's kind: `chunk_markdown`, `chunk_notebook`, `chunk_code`,
`chunk_plain` or `chunk_html`; PDF and DOCX go as bytes to `chunk_pdf` and `chunk_docx`.
Every chunk's text is at most ``max_chars`` characters, is never empty, and has no
trailing whitespace on its lines.
"""

from __future__ import annotations

import os

from nbmemory.errors import BadFileError, ConfigError
from nbmemory.ingest.chat import chunk_chat
from nbmemory.ingest.code import chunk_code
from nbmemory.ingest.docx import chunk_docx
from nbmemory.ingest.html import chunk_html, declared_charset
from nbmemory.ingest.markdown import chunk_markdown, title_of_file
from nbmemory.ingest.notebook import chunk_notebook
from nbmemory.ingest.pdf import chunk_pdf
from nbmemory.ingest.text import chunk_plain
from nbmemory.ingest.types import ChunkDraft
from nbmemory.items import KINDS

__all__ = [
    "BINARY_KINDS",
    "EXTENSIONS",
    "FILE_KINDS",
    "KINDS",
    "MAX_CHARS",
    "NUL_SCAN_BYTES",
    "chunk_file",
    "chunk_text",
    "decode",
    "kind_of",
]

# all-MiniLM-L6-v2 reads ~256 word pieces; 1200 characters stays under that.
MAX_CHARS = 1200
# Like git, a NUL byte near the start marks a file as binary.
NUL_SCAN_BYTES = 8192

_MARKDOWN = (".md", ".markdown", ".mdx")
_NOTEBOOK = (".ipynb",)
_CODE = (
    ".py",
    ".pyi",
    ".js",
    ".jsx",
    ".mjs",
    ".cjs",
    ".ts",
    ".tsx",
    ".go",
    ".rs",
    ".java",
    ".kt",
    ".kts",
    ".scala",
    ".c",
    ".h",
    ".cc",
    ".cpp",
    ".cxx",
    ".hh",
    ".hpp",
    ".hxx",
    ".cs",
    ".rb",
    ".php",
    ".sh",
    ".bash",
    ".zsh",
    ".sql",
    ".r",
    ".jl",
    ".lua",
    ".swift",
    ".toml",
    ".yaml",
    ".yml",
)
_TEXT = (".txt", ".rst", ".org", ".log", ".tex")
_HTML = (".html", ".htm", ".xhtml")

EXTENSIONS: dict[str, str] = {
    **dict.fromkeys(_MARKDOWN, "markdown"),
    **dict.fromkeys(_NOTEBOOK, "notebook"),
    **dict.fromkeys(_CODE, "code"),
    **dict.fromkeys(_TEXT, "text"),
    **dict.fromkeys(_HTML, "html"),
    ".pdf": "pdf",
    ".docx": "docx",
    ".chat": "chat",
}
# Kinds read from the file's bytes by their library, never decoded as text.
BINARY_KINDS = frozenset({"pdf", "docx"})
# The kinds a file can have: those of KINDS but "memory" (remembered items have no file).
FILE_KINDS = frozenset(EXTENSIONS.values())

_BOMS = (
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\xfe\xff", "UTF-16"),
    (b"\xff\xfe", "UTF-16"),
)
_UTF8_BOM = b"\xef\xbb\xbf"


def kind_of(path: str) -> str | None:
    """Return the chunker kind for a path, by extension (case-insensitive).

    Parameters
    ----------
    path:
        File path or name.

    Returns
    -------
    str or None
        ``"markdown"``, ``"notebook"``, ``"code"``, ``"text"``, ``"html"``, ``"pdf"``,
        ``"docx"`` or ``"chat"``; None when files of this type are not ingested.
    """
    ext = os.path.splitext(path)[1].lower()
    return EXTENSIONS.get(ext)


def decode(path: str, data: bytes) -> str:
    """Decode file bytes as strict UTF-8, dropping a BOM and turning CRLF into LF.

    Parameters
    ----------
    path:
        The file's path; notebooks are scanned for NUL bytes in full, other files in
        their first 8192 bytes.
    data:
        The file's bytes.

    Returns
    -------
    str
        The text; it never holds replacement characters made by decoding.

    Raises
    ------
    BadFileError
        ``"binary file (NUL byte at offset N)"``, ``"not valid UTF-8 (byte 0xNN at
        offset N)"`` or a UTF-16/UTF-32 byte order mark; offsets count from the start
        of the file.
    """
    for bom, name in _BOMS:
        if data.startswith(bom):
            raise BadFileError(
                path,
                f"not valid UTF-8 (byte 0x{data[0]:02x} at offset 0): {name} byte "
                "order mark; save the file as UTF-8",
            )
    limit = len(data) if kind_of(path) == "notebook" else NUL_SCAN_BYTES
    nul = data.find(b"\x00", 0, limit)
    if nul >= 0:
        raise BadFileError(path, f"binary file (NUL byte at offset {nul})")
    skip = len(_UTF8_BOM) if data.startswith(_UTF8_BOM) else 0
    try:
        text = data[skip:].decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = exc.start + skip
        raise BadFileError(path, f"not valid UTF-8 (byte 0x{data[offset]:02x} at offset {offset})") from None
    return text.replace("\r\n", "\n")


def chunk_text(path: str, text: str, kind: str, max_chars: int = MAX_CHARS) -> list[ChunkDraft]:
    """Chunk decoded text with the chunker for ``kind``.

    Parameters
    ----------
    path:
        The file's path, for headings (code, text, notebook title) and errors.
    text:
        Decoded text; a leading BOM and CRLF line ends are normalized here too.
    kind:
        ``"markdown"``, ``"notebook"``, ``"code"``, ``"text"`` or ``"html"`` (PDF and DOCX
        are read from bytes: see `chunk_file`).
    max_chars:
        Size cap of each chunk's text (at least 1).

    Returns
    -------
    list of ChunkDraft
        Chunks in source order; empty when the text has nothing to index.

    Raises
    ------
    ConfigError
        Unknown or binary ``kind``, or ``max_chars`` below 1.
    BadFileError
        A notebook that is not valid notebook JSON.
    """
    if max_chars < 1:
        raise ConfigError(f"max_chars must be at least 1, got {max_chars}")
    if text.startswith("\ufeff"):
        text = text[1:]
    text = text.replace("\r\n", "\n")
    if kind == "markdown":
        return chunk_markdown(text, max_chars, file_title=title_of_file(path))
    if kind == "notebook":
        return chunk_notebook(path, text, max_chars)
    if kind == "code":
        return chunk_code(path, text, max_chars)
    if kind == "text":
        return chunk_plain(text, max_chars, heading=os.path.basename(path))
    if kind == "html":
        return chunk_html(text, max_chars)
    if kind == "chat":
        return chunk_chat(path, text, max_chars)
    if kind in BINARY_KINDS:
        raise ConfigError(f"{kind} files are read from their bytes: use chunk_file, not chunk_text")
    raise ConfigError(f"unknown chunk kind {kind!r}; use one of {', '.join(sorted(FILE_KINDS))}")


def chunk_file(path: str, data: bytes, max_chars: int = MAX_CHARS) -> list[ChunkDraft]:
    """Decode a file's bytes and chunk them by the file's kind.

    Parameters
    ----------
    path:
        The file's path; its extension picks the chunker (see `kind_of`).
    data:
        The file's bytes.
    max_chars:
        Size cap of each chunk's text.

    Returns
    -------
    list of ChunkDraft
        Chunks in source order.

    Raises
    ------
    BadFileError
        Unsupported extension, binary or non-UTF-8 content, a malformed notebook, or a
        document its library cannot read (encrypted, corrupt, no text layer).
    """
    kind = kind_of(path)
    if kind is None:
        ext = os.path.splitext(path)[1].lower() or "(no extension)"
        raise BadFileError(path, f"unsupported file type {ext}; supported: {' '.join(EXTENSIONS)}")
    if max_chars < 1:
        raise ConfigError(f"max_chars must be at least 1, got {max_chars}")
    if kind == "pdf":
        return chunk_pdf(path, data, max_chars)
    if kind == "docx":
        return chunk_docx(path, data, max_chars)
    if kind == "html":
        return chunk_text(path, _decode_html(path, data), kind, max_chars)
    return chunk_text(path, decode(path, data), kind, max_chars)


def _decode_html(path: str, data: bytes) -> str:
    """HTML as UTF-8, else in the charset its ``<meta charset>`` declares."""
    try:
        return decode(path, data)
    except BadFileError:
        charset = declared_charset(data)
        if charset is None or charset == "utf-8":
            raise
        try:
            return data.decode(charset).replace("\r\n", "\n")
        except UnicodeDecodeError as exc:
            raise BadFileError(
                path, f"not valid {charset} (byte at offset {exc.start}), the charset it declares"
            ) from None
