"""Objects that live as long as the process, moved out of the garbage collector's way.

A full garbage collection walks every object the collector tracks: with the bundled model
loaded that is about 490,000 objects (torch and transformers), a collection of one to two
seconds on a loaded machine, and it fires inside whichever search allocates at that moment
(``bench/search/bench_shapes.py`` saw them in dedup). :func:`settle` calls :func:`gc.freeze`
once the long-lived objects exist (after a model is loaded, after the memory-resident index is
built): they move to a permanent generation that no collection walks, so a full collection
costs what was allocated since.

What it costs: an object alive at that moment that later becomes part of a reference cycle
is never collected (one freed by its reference count is freed as usual). The young
generations are collected first, so only what had already survived two collections is frozen.
``NBMEMORY_GC_FREEZE=0`` turns it off.
"""

from __future__ import annotations

import gc
import os

#: ``NBMEMORY_GC_FREEZE=0`` leaves the garbage collector as it is.
ENABLED = os.environ.get("NBMEMORY_GC_FREEZE", "1") != "0"


def settle() -> None:
    """Freeze every object tracked now (see the module docstring), after collecting the young ones."""
    if not ENABLED:
        return
    gc.collect(1)
    gc.freeze()
