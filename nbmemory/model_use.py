"""Writes share the model in use; a model swap takes it alone.

A write embeds its text outside the database lock, then stores the vector: a swap between the two
would leave a vector of the replaced model among the new model's. Writes hold :meth:`ModelUse.writing`
from embedding to commit (any number at once: a background ``%memindex`` and a ``remember`` go on
together); a swap (a background ``%memtune`` adopting its candidate, ``use_model``, ``reembed``)
holds :meth:`ModelUse.swapping`, which waits for the writes under way and makes new ones wait for
it, so a loop of writes cannot hold it off.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ModelUse:
    """A shared/exclusive lock: writes share it, a swap holds it alone (and goes before new writes)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._writes = 0
        self._swapping = False
        self._swaps_waiting = 0

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Held by a write from its embedding to its commit (never around a swap: it would wait for itself)."""
        with self._cond:
            while self._swapping or self._swaps_waiting:
                self._cond.wait()
            self._writes += 1
        try:
            yield
        finally:
            with self._cond:
                self._writes -= 1
                self._cond.notify_all()

    @property
    def writes(self) -> int:
        """How many writes hold it now (the background refiner starts no step while one does)."""
        with self._cond:
            return self._writes

    @contextmanager
    def swapping(self) -> Iterator[None]:
        """Held by a model swap: once the writes under way have committed, before the next begins."""
        with self._cond:
            self._swaps_waiting += 1
            try:
                while self._swapping or self._writes:
                    self._cond.wait()
            finally:
                self._swaps_waiting -= 1
            self._swapping = True
        try:
            yield
        finally:
            with self._cond:
                self._swapping = False
                self._cond.notify_all()
