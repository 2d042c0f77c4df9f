"""What nbmemory itself writes into a notebook, so that indexing the notebook leaves it out.

A memory must never feed on itself: a ``%memsearch`` cell and the table it printed, indexed
with the rest of the notebook, would come back as the best answer to the same question and
hide the note it found ("self-poisoning"). Notebook ingestion (:mod:`nbmemory.ingest.notebook`)
drops every cell that calls one of :data:`MAGICS` and every output marked with
:data:`OUTPUT_KEY` (the mark :func:`mimebundle` puts on what nbmemory renders); the rest of the
notebook is indexed as usual.
"""

from __future__ import annotations

import re
from typing import Any

#: The IPython magics of :class:`nbmemory.jupyter.magics.MemoryMagics` (a test keeps the two equal).
MAGICS = frozenset(
    {
        "memcontext",
        "memexplore",
        "memforget",
        "memget",
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
# ``%memsearch ...`` / ``%%remember`` at the start of a line, or the call IPython turns it into
# (``get_ipython().run_line_magic('memsearch', ...)``, as kernel history and exports write it).
_CALL = re.compile(
    rf"^[ \t]*%{{1,2}}(?:{_NAMES})(?![\w.])|run_(?:line|cell)_magic\(\s*['\"](?:{_NAMES})['\"]",
    re.MULTILINE,
)


def calls_magic(source: str) -> bool:
    """Whether a code cell's source calls one of nbmemory's magics."""
    return _CALL.search(source) is not None


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
