"""Forget a whole source from one of its items: what Forget on a file's hit does.

Results come one per file: a hit stands for its file, and forgetting only its chunk lets the
same file come back at once with its next chunk. :func:`forget_source` forgets every chunk of the
item's file in the item's namespace (the file is marked forgotten too, so indexing it again does
not bring it back); :meth:`~nbmemory.Memory.restore` of the ids it returns undoes all of it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["forget_source", "literal_glob"]

# What GLOB reads as other than itself, each written as a class that matches the character alone.
_GLOB_SPECIAL = {"*": "[*]", "?": "[?]", "[": "[[]"}


def literal_glob(path: str) -> str:
    """A glob that matches ``path`` and nothing else: ``notes[1].md`` -> ``notes[[]1].md``.

    :meth:`~nbmemory.Memory.forget` reads a ``path`` holding ``*``, ``?`` or ``[`` as a glob,
    which would forget ``notes1.md`` with ``notes[1].md``.
    """
    return "".join(_GLOB_SPECIAL.get(c, c) for c in path)


def forget_source(memory: Any, item_id: int) -> list[int]:
    """Forget every chunk of the source of item ``item_id``, in that item's namespace; the item
    alone when it has no source (a remembered text). Returns the ids forgotten.

    ``memory``: a :class:`~nbmemory.Memory` or its shared form (:func:`nbmemory.remote.connect`).
    """
    item = memory.get(item_id, touch=False)
    if item.source is None:
        return list(memory.forget(item_id))
    return list(memory.forget(path=literal_glob(item.source), namespace=item.namespace))
