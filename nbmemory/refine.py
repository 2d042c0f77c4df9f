"""Passages made in the background: a memory is searchable once its chunks are stored, and its
sentence windows (:mod:`nbmemory.store.passages`) follow.

A write stores each chunk with its BM25 postings and its own vector, and returns: hybrid search
finds it at once. The passages of its long chunks of prose (one more pass over about three times
the text) are then made by a :class:`Refiner`, a thread of whichever process owns the memory, in
small steps at low priority: it starts no step while a search or a write is under way, each step
embeds a few chunks' windows outside the store's lock and commits them in one short transaction.
What is pending is never a list in memory: it is every live chunk of prose with two or more
windows and no passage of the model (:func:`nbmemory.store.passages.missing`), so a process
killed in the middle leaves the steps it committed, and the next opening of the file goes on.

While passages are pending, a candidate without them is scored by its own vector (as with
passages off), and the no-answer flag does not call a query far from everything on the strength
of such a candidate (:func:`nbmemory.store.passages.awaiting`). When the last step is committed,
the memory's near-miss cosine (:mod:`nbmemory.search.nearmiss`) is measured again with every
passage: the memory then ranks and flags as one whose passages were made with each write.

``NBMEMORY_REFINE`` (``background``, the default, or ``inline``) or ``Memory(refine=...)``
chooses; ``inline`` makes each write's passages before it returns.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Literal

from nbmemory.errors import ConfigError
from nbmemory.search import nearmiss, reject
from nbmemory.store import passages

if TYPE_CHECKING:
    from nbmemory.active_model import ActiveModel
    from nbmemory.embed.base import Embedder
    from nbmemory.store.db import Database

RefineMode = Literal["background", "inline"]
MODES = ("background", "inline")
#: Passages (sentence windows) embedded per step: one step's embedding is what a search or a write
#: that arrives meanwhile may find under way (a step starts only when none is), and its commit is
#: one short hold of the store's lock.
STEP_WINDOWS = 32
#: A search in the last this many seconds counts as under way: searches come in runs (typing,
#: an agent's turn), and a step begun between two of them would slow the second.
SEARCH_QUIET_S = 0.25
#: A refiner that searches kept waiting this long takes a step anyway (searches without end, an
#: agent's loop, would otherwise hold passages off for good); a search then waits for the lock
#: no longer than the step's commit (the store lets searches in flight finish first).
MAX_YIELD_S = 5.0
#: How often a refiner waiting for its turn looks again.
POLL_S = 0.05
#: After a failed step (a model that cannot load, a full disk), the wait before trying again.
RETRY_S = 30.0
#: Longest :meth:`Refiner.close` waits for a step under way to end.
CLOSE_WAIT_S = 30.0
#: What an opening finds pending waits this long before the model is loaded for it, unless a
#: write or :meth:`Refiner.wait` comes first: a process that opens the memory for a moment (a
#: command, a script that only reads) does not load the model for passages it will not finish.
START_DELAY_S = 2.0
#: Chunk ids read per statement when looking for pending passages: the store's lock is held
#: for that part of the scan only. (Not through a snapshot cursor: a read transaction left open
#: while a write drops and builds the full-text index again leaves a log that does not replay.)
SCAN_SPAN = 5_000
#: Passages per step on a GPU: its passes are short, and large length-sorted batches use it well.
GPU_STEP_WINDOWS = 2048
#: The meta key that says with how many passages of a model the near-miss cosine was measured.
_NEAR_MISS_AT = "near_miss_passages:"


def step_windows(embedder: Embedder) -> int:
    """Passages one step embeds with this embedder."""
    device = str(getattr(embedder, "device", "cpu"))
    return GPU_STEP_WINDOWS if device.startswith("cuda") else STEP_WINDOWS


def refine_mode(value: str | None = None) -> RefineMode:
    """The refinement mode: ``value``, else ``NBMEMORY_REFINE``, else ``background``."""
    chosen = (value if value is not None else os.environ.get("NBMEMORY_REFINE", "background")).strip().lower()
    if chosen not in MODES:
        where = "refine" if value is not None else "NBMEMORY_REFINE"
        raise ConfigError(f"{where}={chosen!r}: give background or inline")
    return chosen  # type: ignore[return-value]


def _lower_priority() -> None:
    # Linux gives each thread its own nice value, and the threads the model's library starts for
    # this one inherit it: the refiner's forward passes give way to a search's or a write's.
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


class Refiner:
    """Fills a memory's pending passages in a background thread (see the module's text).

    Parameters
    ----------
    db:
        The open memory file (this process owns it).
    model:
        The memory's model: steps embed with it and hold its write share from embedding to
        commit, so no swap comes between (:class:`~nbmemory.model_use.ModelUse`).
    log:
        Where a failed step says why.
    """

    def __init__(self, db: Database, model: ActiveModel, log: Callable[[str], None]) -> None:
        self.db = db
        self.model = model
        self.log = log
        self._cond = threading.Condition()
        #: Bumped by every write that may leave passages pending: a pass that began before it
        #: cannot call the memory complete.
        self._generation = 0
        #: The generation a pass last found nothing pending at (None: not yet).
        self._complete_at: int | None = None
        self._searches = 0
        self._last_search = 0.0
        self._stopping = False
        #: Whether a write or a wait asked for passages since the opening.
        self._asked = False
        #: Whether a step runs now (closing waits for it, not for a model's load).
        self._stepping = False
        self._thread: threading.Thread | None = None
        #: Windows the current pass has left, when it knows (:meth:`progress`).
        self._left: int | None = None
        self.error: str | None = None
        self._mark_if_known()

    def _mark_if_known(self) -> None:
        fingerprint = self.db.get_meta("model_fingerprint")
        if fingerprint is not None:
            # Until the first pass has looked, any long chunk without passages may be pending.
            passages.mark_refining(self.db, fingerprint, True)

    # -- what the memory tells it ------------------------------------------------------------
    def start(self) -> None:
        """Begin (once): the thread looks for pending passages at once, then after every write
        that leaves some (:meth:`writing`) and at every :meth:`wait`."""
        with self._cond:
            if self._thread is None and not self._stopping:
                self._thread = threading.Thread(target=self._run, name="nbmemory-refine", daemon=True)
                self._thread.start()

    @contextlib.contextmanager
    def writing(self, fingerprint: str) -> Iterator[None]:
        """Around a write that leaves its chunks' passages pending, from before its commit (a
        search after the commit must know they are pending) to after it (a pass that began before
        the commit cannot call the memory complete: the next one finds them)."""
        self._bump(fingerprint)
        try:
            yield
        finally:
            self._bump(fingerprint)
            self.start()

    def _bump(self, fingerprint: str) -> None:
        with self._cond:
            passages.mark_refining(self.db, fingerprint, True)
            self._asked = True
            self._generation += 1
            self._left = None
            self._cond.notify_all()

    @contextlib.contextmanager
    def searching(self) -> Iterator[None]:
        """Around a search: no step starts while one runs (nor :data:`SEARCH_QUIET_S` after)."""
        with self._cond:
            self._searches += 1
        try:
            yield
        finally:
            with self._cond:
                self._searches -= 1
                self._last_search = time.monotonic()
                self._cond.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Until every passage the memory's chunks need is stored (True), or ``timeout`` seconds
        passed or the memory closed (False)."""
        self.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._asked = True
            # A pass of its own: the file as it is now (a re-embed may have changed its model).
            self._generation += 1
            self._left = None
            self._cond.notify_all()
            while self._complete_at != self._generation:
                if self._stopping:
                    return False
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left if left is not None else 1.0)
            return True

    @property
    def busy(self) -> bool:
        """Whether passages are pending that this refiner is making (not after a failed step)."""
        with self._cond:
            return not self._stopping and self._complete_at != self._generation and self.error is None

    def progress(self, fingerprint: str | None) -> dict[str, int]:
        """``{"done": passages stored, "total": passages the memory's chunks need}`` for the model."""
        with self._cond:
            left = 0 if self._complete_at == self._generation else self._left
        return progress(self.db, fingerprint, left)

    def close(self) -> None:
        """Stop: the step under way ends (its passages are committed or not at all), no other starts."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            thread = self._thread if self._stepping else None
        if thread is not None and thread is not threading.current_thread():
            thread.join(CLOSE_WAIT_S)

    # -- the thread --------------------------------------------------------------------------
    def _run(self) -> None:
        _lower_priority()
        while True:
            with self._cond:
                while self._complete_at == self._generation and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                generation = self._generation
            try:
                self._pass(generation)
            except Exception as exc:  # the memory stays searchable; the next write or wait tries again
                self.error = f"{type(exc).__name__}: {exc}"
                self.log(f"refining passages: {self.error}; trying again in {RETRY_S:.0f} s")
                with self._cond:
                    self._cond.wait(RETRY_S)
                    self._cond.notify_all()

    def _pass(self, generation: int) -> None:
        """One pass: fill what is pending now, step by step; then, if no write came meanwhile,
        call the memory complete."""
        fingerprint = self.db.get_meta("model_fingerprint")
        if fingerprint is None:  # nothing stored yet
            self._completed(generation, None)
            return
        passages.mark_refining(self.db, fingerprint, True)
        todo = self._pending(fingerprint)
        stale = not todo and self._near_miss_stale(fingerprint)
        embedder: Embedder | None = None
        if todo or stale:
            with self._cond:
                self._cond.wait_for(lambda: self._asked or self._stopping, START_DELAY_S)
                if self._stopping:
                    return
            # Loaded, not checked: a file of another model is re-embedded by whoever uses the
            # memory first (in its own thread), never at this thread's priority.
            embedder = self.model.loaded()
            if embedder.fingerprint != fingerprint:
                with self._cond:  # until a write or a wait (which checks the model first)
                    self._cond.wait_for(lambda: self._generation != generation or self._stopping)
                return
        with self._cond:
            if generation == self._generation:  # else a write came since the file was read
                self._left = passages.window_count(todo)
        first = 0
        per_step = step_windows(embedder) if embedder is not None else STEP_WINDOWS
        while first < len(todo):
            step: list[passages.Content] = []
            windows = 0
            while first < len(todo) and (not step or windows < per_step):
                step.append(todo[first])
                windows += len(passages.texts_of(*todo[first][1:]))
                first += 1
            if not self._turn() or not self._begin_step():
                return
            if self._generation != generation and first > len(step):
                # A write came: the next pass reads the file again (what is pending, and how
                # much: the progress is counted from it). Each pass makes one step at least, so
                # writes that come more often than a step still leave it going.
                self._end_step()
                return
            assert embedder is not None
            try:
                with self.model.use.writing():
                    if self.db.get_meta("model_fingerprint") != embedder.fingerprint:
                        return  # a swap came first: its own fill made the new model's passages
                    passages.fill(self.db, embedder, step)
            finally:
                self._end_step()
            with self._cond:
                if generation == self._generation and self._left is not None:
                    self._left = max(self._left - windows, 0)
        # What writes left meanwhile is found by the next pass (their generation is newer).
        if (todo or stale) and not self._remeasure(embedder, fingerprint):
            return  # closing: the next opening measures it
        self._completed(generation, fingerprint)

    def _begin_step(self) -> bool:
        # Under the same lock as close(): a step either begins before the close (which then
        # waits for it) or not at all.
        with self._cond:
            if self._stopping:
                return False
            self._stepping = True
            return True

    def _end_step(self) -> None:
        with self._cond:
            self._stepping = False
            self._cond.notify_all()

    def _pending(self, fingerprint: str) -> list[passages.Content]:
        return passages.missing(self.db, fingerprint, SCAN_SPAN)

    def _turn(self) -> bool:
        """Wait until no search ran for :data:`SEARCH_QUIET_S` (or searches kept it waiting for
        :data:`MAX_YIELD_S`) and no write is under way (writes go first); False once the memory
        closes."""
        began = time.monotonic()
        with self._cond:
            while True:
                if self._stopping:
                    return False
                now = time.monotonic()
                quiet = not self._searches and now - self._last_search >= SEARCH_QUIET_S
                if not self.model.use.writes and (quiet or now - began >= MAX_YIELD_S):
                    return True
                self._cond.wait(POLL_S)

    def _near_miss_stale(self, fingerprint: str) -> bool:
        """Whether the near-miss cosine kept for this model may have been measured with other
        passages than are stored now (by a search while passages were pending, then the process
        died; or by a version that did not say)."""
        if reject.thresholds_for(fingerprint) is None or self.db.get_meta(f"near_miss:{fingerprint}") is None:
            return False
        at = self.db.get_meta(_NEAR_MISS_AT + fingerprint)
        return at is None or int(at) != passages.stored_count(self.db, fingerprint)

    def _remeasure(self, embedder: Embedder | None, fingerprint: str) -> bool:
        """Measure the near-miss cosine again, with every passage (what an index that made them
        inline measured after its write); False when the memory closed first."""
        if reject.thresholds_for(fingerprint) is None:
            return True
        embedder = embedder or self.model.loaded()
        if not self._turn() or not self._begin_step():
            return False
        try:
            nearmiss.forget(self.db, fingerprint)
            nearmiss.near_miss(self.db, embedder)
            self.db.set_meta(_NEAR_MISS_AT + fingerprint, passages.stored_count(self.db, fingerprint))
        finally:
            self._end_step()
        return True

    def _completed(self, generation: int, fingerprint: str | None) -> None:
        with self._cond:
            if generation != self._generation:
                return  # a write came during the pass: another pass follows
            self._complete_at = generation
            self._left = 0
            self.error = None
            if fingerprint is not None:
                passages.mark_refining(self.db, fingerprint, False)
            self._cond.notify_all()


def progress(db: Database, fingerprint: str | None, left: int | None = None) -> dict[str, int]:
    """``{"done": passages stored, "total": passages the memory's chunks need}`` for the model;
    ``left``: the windows still to embed when the caller knows (else counted from the file)."""
    if fingerprint is None:
        return {"done": 0, "total": 0}
    done = passages.stored_count(db, fingerprint)
    if left is None:
        left = passages.window_count(passages.missing(db, fingerprint, SCAN_SPAN))
    return {"done": done, "total": done + left}


def near_miss_measured(db: Database, fingerprint: str) -> None:
    """Note that the near-miss cosine was just measured with the passages stored now (an index
    whose passages were made inline)."""
    if not db.read_only:
        db.set_meta(_NEAR_MISS_AT + fingerprint, passages.stored_count(db, fingerprint))
