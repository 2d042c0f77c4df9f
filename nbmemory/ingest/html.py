"""HTML: the page's main text and headings, read with the standard library's ``html.parser``.

The text of ``<main>`` (or ``role="main"``) is kept when the page has one, else that of its
``<article>`` elements, else the whole body; navigation, sidebars, footers, forms, scripts and
styles are dropped everywhere. Headings ``<h1>``-``<h6>`` become the heading path (the
``<title>`` stands in for a missing ``<h1>``), ``<pre>`` stays whole as code, list items and
table rows stay one per line. Chunks keep the lines of the HTML file they came from.
"""

from __future__ import annotations

import codecs
import re
from html.parser import HTMLParser

from nbmemory.ingest.blocks import Block, chunk_blocks
from nbmemory.ingest.types import ChunkDraft

__all__ = ["chunk_html", "declared_charset"]

# Elements whose content is never the page's text.
_SKIP = frozenset(
    {
        "script",
        "style",
        "noscript",
        "template",
        "head",
        "nav",
        "aside",
        "footer",
        "form",
        "button",
        "select",
        "textarea",
        "iframe",
        "object",
        "svg",
        "math",
        "canvas",
        "dialog",
    }
)
# Elements that end the paragraph before them and start a new one.
_BLOCK = frozenset(
    {
        "address",
        "article",
        "blockquote",
        "body",
        "caption",
        "dd",
        "details",
        "div",
        "dl",
        "dt",
        "figcaption",
        "figure",
        "header",
        "hr",
        "main",
        "ol",
        "p",
        "section",
        "summary",
        "table",
        "tbody",
        "td",
        "tfoot",
        "th",
        "thead",
        "ul",
    }
)
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
# Elements that never have content or an end tag.
_VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
)
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE)


def declared_charset(data: bytes) -> str | None:
    """The codec named by a ``<meta charset>`` in the first 4 KiB, if Python knows it."""
    match = _META_CHARSET.search(data[:4096])
    if match is None:
        return None
    try:
        return codecs.lookup(match.group(1).decode("ascii")).name
    except LookupError:
        return None


class _Reader(HTMLParser):
    """Collects blocks, each with the region (main, article) it lies in."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        # Open elements, innermost last, with the roles each one counts in `open`.
        self.stack: list[tuple[str, list[str]]] = []
        # How many open elements skip their content, are a main region, an article, ...
        self.open = {"skip": 0, "main": 0, "article": 0, "pre": 0, "li": 0, "tr": 0, "svg": 0}
        self.heading = 0
        self.blocks: list[tuple[Block, bool, bool]] = []
        self.title: list[str] = []
        self.in_title = False
        self.parts: list[str] = []
        self.start_line = 0
        self.start_region = (False, False)
        # "li" or "tr" when the last block was a list item or a table row.
        self.last_kind: str | None = None

    def _roles(self, tag: str, attrs: list[tuple[str, str | None]]) -> list[str]:
        roles = [tag] if tag in ("article", "pre", "li", "tr", "svg") else []
        if tag in _SKIP:
            roles.append("skip")
        if tag == "main" or ("role", "main") in attrs:
            roles.append("main")
        return roles

    # -- text ---------------------------------------------------------------------------
    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title.append(data)
            return
        if self.open["skip"] or (not self.parts and not data.strip()):
            return
        if not self.parts:
            self.start_line = self.getpos()[0]
            self.start_region = (self.open["main"] > 0, self.open["article"] > 0)
        # Outside <pre> a line end in the source is a space; only <br> breaks a line.
        self.parts.append(data if self.open["pre"] else data.replace("\n", " "))

    def flush(self) -> None:
        """End the current paragraph, heading, list item, table row or preformatted block."""
        raw = "".join(self.parts)
        self.parts = []
        if not raw.strip():
            return
        kind = "li" if self.open["li"] else "tr" if self.open["tr"] else None
        if self.open["pre"]:
            block = Block(raw.strip("\n").rstrip(), code=True)
            kind = None
        elif self.heading:
            block = Block(" ".join(raw.split()), level=self.heading)
            kind = None
        else:
            lines = (" ".join(line.split()) for line in raw.split("\n"))
            text = "\n".join(line for line in lines if line)
            block = Block(
                "- " + text if kind == "li" else text, tight=kind is not None and kind == self.last_kind
            )
        end = max(self.getpos()[0], self.start_line)
        located = Block(block.text, block.level, block.code, block.tight, self.start_line, end)
        self.blocks.append((located, *self.start_region))
        self.last_kind = kind

    # -- tags ---------------------------------------------------------------------------
    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title" and not self.open["svg"]:
            self.in_title = True
            return
        if tag == "br":
            if self.parts and not self.open["skip"]:
                self.parts.append("\n")
            return
        if tag in ("td", "th") and self.open["tr"]:
            # The cells of a row share its line.
            if self.parts:
                self.parts.append(" | ")
        elif (tag in _BLOCK or tag in _HEADINGS or tag in ("li", "tr", "pre")) and not self.open["pre"]:
            self.flush()
        if tag in _VOID:
            return
        roles = self._roles(tag, attrs)
        self.stack.append((tag, roles))
        for role in roles:
            self.open[role] += 1
        if tag in _HEADINGS:
            self.heading = _HEADINGS[tag]

    def handle_endtag(self, tag: str) -> None:
        if tag == "title" and self.in_title:
            self.in_title = False
            return
        if all(open_tag != tag for open_tag, _ in self.stack):
            return
        if not (tag in ("td", "th") and self.open["tr"]) and (
            tag in _BLOCK or tag in _HEADINGS or tag in ("li", "tr", "pre")
        ):
            self.flush()
        # Close the element and any left open inside it (HTML lets many end tags be omitted).
        while self.stack:
            open_tag, roles = self.stack.pop()
            for role in roles:
                self.open[role] -= 1
            if open_tag in _HEADINGS:
                self.heading = 0
            if open_tag == tag:
                break

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        # <br/> breaks a line; other self-closed elements hold nothing.
        if tag == "br":
            self.handle_starttag(tag, attrs)


def chunk_html(text: str, max_chars: int) -> list[ChunkDraft]:
    """Chunk an HTML page's main text by its headings, like a markdown note.

    Parameters
    ----------
    text:
        The decoded HTML.
    max_chars:
        Size cap of each chunk's text.

    Returns
    -------
    list of ChunkDraft
        Chunks of kind ``"html"`` with the heading path and the HTML file's line range.
    """
    reader = _Reader()
    reader.feed(text)
    reader.close()
    reader.flush()
    found = reader.blocks
    if any(main for _, main, _ in found):
        blocks = [b for b, main, _ in found if main]
    elif any(article for _, _, article in found):
        blocks = [b for b, _, article in found if article]
    else:
        blocks = [b for b, _, _ in found]
    title = " ".join("".join(reader.title).split())
    if title and not any(b.level == 1 for b in blocks):
        first = blocks[0].line_start if blocks else None
        blocks.insert(0, Block(title, level=1, line_start=first, line_end=first))
    return chunk_blocks(blocks, "html", max_chars)
