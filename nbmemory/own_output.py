"""What nbmemory itself writes into a notebook, so that indexing the notebook leaves it out.

A memory must never feed on itself: a ``%memsearch`` cell and the table it printed, indexed
with the rest of the notebook, would come back as the best answer to the same question and
hide the note it found ("self-poisoning"). Notebook ingestion (:mod:`nbmemory.ingest.notebook`)
leaves out

- every cell that calls one of :data:`MAGICS`, alone or assigned (``hits = %memsearch ...``,
  ``mem = %memory``), with its outputs (:func:`calls_magic`);
- the lines that load or set up the extension (``%load_ext nbmemory``, ``%reload_ext nbmemory``,
  ``%config MemoryMagics...``): the rest of their cell stays (:func:`without_setup`);
- every output marked with :data:`OUTPUT_KEY` (the mark :func:`mimebundle` puts on what
  nbmemory renders: a hits table, a search result, a hit or an item shown as a cell's value),
  and, in a printed output, the text forms of those objects (:func:`without_printed`);
- a cell that only shows such an object (``hits`` or ``result[0]`` alone).

The rest of the notebook is indexed as usual.
"""

from __future__ import annotations

import re
from typing import Any

#: The IPython magics of :class:`nbmemory.jupyter.magics.MemoryMagics` (a test keeps the two equal).
MAGICS = frozenset(
    {
        "memcapture",
        "memcontext",
        "memexplore",
        "memforget",
        "memget",
        "memimport",
        "memindex",
        "memlink",
        "memory",
        "memrelated",
        "memsearch",
        "memstats",
        "memtune",
        "memupdate",
        "remember",
    }
)
#: The key of the output metadata nbmemory sets on what it renders.
OUTPUT_KEY = "nbmemory"

_NAMES = "|".join(sorted(MAGICS, key=len, reverse=True))
# ``%memsearch ...`` / ``%%remember`` at the start of a line, a line magic's value assigned
# (IPython's ``hits = %memsearch ...``, ``a, b = %memory``), or the call IPython turns either
# into (``get_ipython().run_line_magic('memsearch', ...)``, as kernel history and exports write it).
_CALL = re.compile(
    rf"^[ \t]*(?:%%?|[A-Za-z_][\w.\[\], \t*]*=[ \t]*%)(?:{_NAMES})(?![\w.])"
    rf"|run_(?:line|cell)_magic\(\s*['\"](?:{_NAMES})['\"]",
    re.MULTILINE,
)
# The lines that load the extension or set its magics up, typed or as IPython's call.
_SETUP = re.compile(
    r"^[ \t]*(?:%(?:re|un)?load_ext[ \t]+nbmemory|%config[ \t]+MemoryMagics\b[^\n]*"
    r"|get_ipython\(\)\.run_line_magic\(\s*['\"](?:re|un)?load_ext['\"],\s*['\"]nbmemory['\"]\s*\))"
    r"[ \t]*(?:#[^\n]*)?$\n?",
    re.MULTILINE,
)


def calls_magic(source: str) -> bool:
    """Whether a code cell's source calls one of nbmemory's magics (alone or assigned)."""
    return _CALL.search(source) is not None


def without_setup(source: str) -> str:
    """A code cell's source without its ``%load_ext nbmemory`` / ``%config MemoryMagics`` lines."""
    return _SETUP.sub("", source)


# What ``print`` writes for nbmemory's objects. One line each: an object's default repr
# (``<nbmemory.memory.Memory at 0x7f...>``), the dataclass repr of a search result, a hit or an
# item, or a list of them.
_OBJECT_LINE = re.compile(
    r"^\[?(?:<nbmemory(?:\.\w+)+ (?:object )?at 0x[0-9a-fA-F]+>"
    r"|SearchResult\(query=|Hit\(id=\d+, score=|Item\(id=\d+, namespace=)"
)
# The text form of a hits table (the repr of what %memsearch returns): a line per hit,
# ``  1. [0.8532] #12 notes/vpn.md  (bm25 1, vector 2)``, the lines under it indented by five
# spaces, a ``  -- weaker matches ... --`` label, ``  (no results)``, its title above (ending
# in the query's repr) and the score's explanation, in parentheses, below.
_ROW = re.compile(r"^ {0,3}\d+\. \[-?\d+\.\d+[^\]\n]*\] #\d+\b")
_UNDER_ROW = re.compile(r"^ {5}\S|^  -- .* --$")
_EMPTY_TABLE = re.compile(r"^  \(no results\)$")
_TITLE = re.compile(r"^\S.* for (['\"]).*\1$")
_SCALE = re.compile(r"^\(.*\)$")
# A ranking trace (``explain()``, or under a table after a ``ranking trace`` line): the query
# and its time, then ``[stage] ...`` lines and the lines indented under them.
_TRACE_HEAD = re.compile(r"^query: (['\"]).*\1  \(\d+(?:\.\d+)? ms.*\)$")
_TRACE_LINE = re.compile(r"^\[[\w-]+\] |^ {4}")


def _table_end(lines: list[str], start: int) -> int:
    """Past the hits table whose first row (or empty mark) is ``lines[start]``."""
    end = start + 1
    while end < len(lines) and (_ROW.match(lines[end]) or _UNDER_ROW.match(lines[end])):
        end += 1
    if end < len(lines) and _SCALE.match(lines[end]):
        end += 1
    return end


def _trace_end(lines: list[str], start: int) -> int:
    """Past the ranking trace whose ``query: ...`` line is ``lines[start]``."""
    end = start + 1
    while end < len(lines) and _TRACE_LINE.match(lines[end]):
        end += 1
    return end


def without_printed(text: str) -> str:
    """``text`` (a printed output) without the text forms of nbmemory's objects in it: their
    default reprs, the reprs of search results, hits and items, hits tables and ranking traces.

    Whatever else the cell printed stays, in its order.
    """
    lines = text.split("\n")
    kept: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if _OBJECT_LINE.match(line):
            i += 1
            continue
        if (
            _ROW.match(line)
            or _EMPTY_TABLE.match(line)
            or (line.startswith("  -- ") and i + 1 < len(lines) and _ROW.match(lines[i + 1]))
        ):
            if kept and _TITLE.match(kept[-1]):
                kept.pop()
            i = _table_end(lines, i)
            if lines[i : i + 2] == ["", "ranking trace"]:
                i += 2  # the trace under the table: the next line starts it
            continue
        if line == "ranking trace" and i + 1 < len(lines) and _TRACE_HEAD.match(lines[i + 1]):
            i += 1
            continue
        if _TRACE_HEAD.match(line):
            i = _trace_end(lines, i)
            continue
        kept.append(line)
        i += 1
    return "\n".join(kept)


def is_rendered(output_metadata: Any) -> bool:
    """Whether a notebook output's metadata carries nbmemory's mark."""
    return isinstance(output_metadata, dict) and OUTPUT_KEY in output_metadata


def mimebundle(obj: Any, what: str) -> tuple[dict[str, str], dict[str, Any]]:
    """``_repr_mimebundle_`` of a rendered object: its HTML and text, marked as nbmemory's own."""
    data = {"text/plain": repr(obj)}
    html = getattr(obj, "_repr_html_", None)
    if html is not None:
        data["text/html"] = html()
    return data, {OUTPUT_KEY: {"rendered": what}}
