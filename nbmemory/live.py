"""Live memory: the indexed folders (the memory's roots) kept current as their files change.

Two sources feed one :class:`ChangeQueue`: :func:`watch` (a file watcher, ``watchfiles``, for
``nbmemory watch``) and the Jupyter server extension (the contents manager's save, rename and
delete events). The queue waits for a short quiet period (a burst keeps extending it, up to a
maximum), drops what is never indexed (:mod:`nbmemory.ingest.exclude`, files outside the roots,
the memory's own files; ignore files are read again at every batch, so a rule added later holds
from the next change on, and a change to one indexes its folder again, which removes what it now
ignores), then hands the batch to the incremental ``index`` operation in slices:
unchanged files cost a ``stat`` (a touched one also a hash) and never an embedding, a deleted
or renamed file's chunks go when its folder is indexed again, and a file that fails is reported
and retried once without holding up the others.

The queue runs in the process that hears the changes and calls the memory through the facade
API, so the indexing itself happens in whichever process owns the file (docs/architecture.md,
note 5). What each queue has pending, is doing and has failed is published to a small status
file beside the owner's socket, so ``stats()`` (``%memstats``, ``nbmemory status``, the sidebar)
shows every live indexer of a memory, whichever process asks.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbmemory.ingest import exclude
from nbmemory.ingest.chunking import kind_of
from nbmemory.runtime import publish, status_folder
from nbmemory.tune.versions import models_dir

if TYPE_CHECKING:
    from nbmemory.api import MemoryAPI

__all__ = ["Batch", "ChangeQueue", "Root", "enabled", "watch"]

#: Seconds without a new change before a batch is indexed.
QUIET_SECONDS = 0.3
#: A burst that keeps changing files is indexed at least this often (seconds).
MAX_WAIT_SECONDS = 2.0
#: Files per ``index`` call: a search waits for at most one slice, not for a whole burst.
SLICE_FILES = 32
#: A file that failed (half-written, removed while read) is tried again once, this much later.
RETRY_SECONDS = 1.0
#: Failures kept for the status, the latest last.
MAX_FAILURES = 20


def enabled() -> bool:
    """Whether live indexing is on: ``NBMEMORY_WATCH=0`` turns both sources off."""
    return os.environ.get("NBMEMORY_WATCH", "1").strip().lower() not in ("0", "false", "no", "off")


@dataclass(frozen=True)
class Root:
    """A folder kept current, and the namespace its files are indexed into."""

    path: str
    namespace: str


@dataclass
class Batch:
    """What one batch of changes did."""

    changes: int = 0
    indexed: int = 0
    removed: int = 0
    unchanged: int = 0
    embedded: int = 0
    #: Passages of the chunks written that the background refiner makes after the batch.
    refining: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)
    ms: float = 0.0
    at: float = 0.0

    def line(self) -> str:
        """One line for a terminal: what changed, how long it took, what failed."""
        text = (
            f"{time.strftime('%H:%M:%S', time.localtime(self.at))} {self.changes} change(s): "
            f"{self.indexed} indexed, {self.removed} removed, {self.unchanged} unchanged, "
            f"{self.embedded} chunks embedded, {self.ms:.0f} ms"
        )
        if self.refining:
            text += f"; searchable, {self.refining} passages to refine"
        if self.failures:
            text += f"; {len(self.failures)} failed: " + "; ".join(f"{p}: {r}" for p, r in self.failures[:3])
        return text


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _absolute(path: str | os.PathLike[str]) -> str:
    return os.path.abspath(os.path.expanduser(path))


class ChangeQueue:
    """A debounced queue of changed paths, indexed in batches into a memory.

    Parameters
    ----------
    memory:
        The memory (a :class:`~nbmemory.Memory` or :class:`~nbmemory.remote.SharedMemory`), or a
        function that opens it on first use (the Jupyter server opens its memory lazily).
    source:
        Who feeds the queue (``"watch"``, ``"server"``), as the status reports it.
    roots:
        The folders to keep current; None reads the memory's roots (:meth:`MemoryAPI.roots`)
        at every batch, so a folder indexed meanwhile is kept current from then on.
    on_batch:
        Called with each :class:`Batch` once it is indexed (in the queue's thread).
    quiet, max_wait, slice_files, retry_after:
        See :data:`QUIET_SECONDS`, :data:`MAX_WAIT_SECONDS`, :data:`SLICE_FILES`,
        :data:`RETRY_SECONDS`.
    """

    def __init__(
        self,
        memory: MemoryAPI | Callable[[], MemoryAPI],
        *,
        source: str = "watch",
        roots: Sequence[Root] | None = None,
        on_batch: Callable[[Batch], None] | None = None,
        quiet: float = QUIET_SECONDS,
        max_wait: float = MAX_WAIT_SECONDS,
        slice_files: int = SLICE_FILES,
        retry_after: float = RETRY_SECONDS,
    ) -> None:
        if quiet < 0 or max_wait < quiet:
            raise ValueError(f"need 0 <= quiet <= max_wait, got quiet={quiet}, max_wait={max_wait}")
        if slice_files < 1:
            raise ValueError(f"slice_files must be greater than 0, got {slice_files}")
        self._memory: Any = memory if hasattr(memory, "index") else None
        self._open: Callable[[], MemoryAPI] | None = memory if self._memory is None else None  # type: ignore[assignment]
        self.source = source
        self.fixed_roots = (
            [Root(_absolute(r.path), r.namespace) for r in roots] if roots is not None else None
        )
        self.on_batch = on_batch
        self.quiet, self.max_wait = quiet, max_wait
        self.slice_files, self.retry_after = slice_files, retry_after
        self._cond = threading.Condition()
        self._pending: dict[str, bool] = {}  # path -> the last event said it was deleted
        self._first = self._last = 0.0
        self._scan = False
        self._indexing = 0  # changes in the batch being indexed
        self._retried: set[str] = set()
        self._failures: dict[str, tuple[str, float]] = {}
        self._ignored: dict[str, exclude.Ignored] = {}
        self._roots: list[Root] = list(self.fixed_roots or [])
        self._own: tuple[str, ...] = ()
        self._status_file: Path | None = None
        self._published = 0.0
        self.batches = 0
        self.last_batch: Batch | None = None
        self.started = time.time()
        self.error: str | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._main, name=f"nbmemory-live-{source}", daemon=True)
        self._thread.start()

    # -- feeding ----------------------------------------------------------------------------
    def put(self, path: str | os.PathLike[str], deleted: bool = False) -> None:
        """A file or folder was written, created, moved here (``deleted=False``) or went away."""
        self.put_many([(path, deleted)])

    def put_many(self, changes: Iterable[tuple[str | os.PathLike[str], bool]]) -> None:
        """Several changes at once (one wake-up of the queue's thread)."""
        now = time.monotonic()
        with self._cond:
            added = False
            for raw, deleted in changes:
                path = _absolute(raw)
                skipped = exclude.skip_file(os.path.basename(path)) and not exclude.is_ignore_file(path)
                if skipped or self._is_own(path):
                    continue  # editor temp files and the memory's own writes never wake it
                self._retried.discard(path)  # a new save earns a new retry
                self._pending[path] = deleted
                added = True
            if not added:
                return
            if not self._first:
                self._first = now
            self._last = now
            self._cond.notify_all()
        self._publish(throttle=True)

    def scan(self) -> None:
        """Index every root now (what changed while nothing watched); unchanged files cost a stat."""
        with self._cond:
            self._scan = True
            self._first = self._first or time.monotonic()
            self._last = time.monotonic()
            self._cond.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until nothing is pending or being indexed; whether that happened in time."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._pending or self._scan or self._indexing:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self) -> None:
        """Stop the queue's thread (a batch being indexed finishes first) and withdraw its status."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=60)
        if self._status_file is not None:
            with contextlib.suppress(OSError):
                self._status_file.unlink()

    def __enter__(self) -> ChangeQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- status -----------------------------------------------------------------------------
    @property
    def roots(self) -> list[Root]:
        """The folders this queue keeps current (as of its last batch)."""
        return list(self._roots)

    def status(self) -> dict[str, Any]:
        """``{source, pid, roots, pending, indexing, batches, last_batch, failures, error, started}``."""
        with self._cond:
            pending = len(self._pending) + (1 if self._scan else 0)
            indexing = self._indexing
            failures = [{"path": p, "reason": r, "at": round(t, 3)} for p, (r, t) in self._failures.items()]
        return {
            "source": self.source,
            "pid": os.getpid(),
            "roots": [r.path for r in self._roots],
            "pending": pending,
            "indexing": indexing,
            "batches": self.batches,
            "last_batch": asdict(self.last_batch) | {"line": self.last_batch.line()}
            if self.last_batch
            else None,
            "failures": failures[-MAX_FAILURES:],
            "error": self.error,
            "started": round(self.started, 3),
        }

    def _publish(self, throttle: bool = False) -> None:
        if self._status_file is None or (throttle and time.monotonic() - self._published < 0.25):
            return
        self._published = time.monotonic()
        publish(self._status_file, self.status())

    # -- the queue's thread -----------------------------------------------------------------
    def _main(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._pending and not self._scan:
                    self._cond.wait()
                # Debounce: wait for a quiet period, but no longer than max_wait from the first change.
                while not self._closed:
                    now = time.monotonic()
                    left = min(self._last + self.quiet, self._first + self.max_wait) - now
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if self._closed:
                    return
                batch, scan = self._pending, self._scan
                self._pending, self._scan, self._first = {}, False, 0.0
                self._indexing = len(batch) + (1 if scan else 0)
            try:
                self._index(batch, scan)
            except Exception as exc:  # the thread must outlive a failed batch
                self.error = f"{type(exc).__name__}: {exc}"
            finally:
                with self._cond:
                    self._indexing = 0
                    self._cond.notify_all()
                self._publish()

    def _memory_now(self) -> Any:
        if self._memory is None:
            assert self._open is not None
            self._memory = self._open()
        path = getattr(self._memory, "path", None)
        if self._status_file is None and path is not None:
            db = _absolute(path)
            self._own = (db, str(models_dir(db)))
            self._status_file = status_folder(db, "live") / f"{self.source}-{os.getpid()}.json"
        return self._memory

    def _is_own(self, path: str) -> bool:
        # The memory file, its write-ahead log and temp files, and its tuned models' folder.
        return any(path.startswith(own) for own in self._own)

    def _index(self, batch: dict[str, bool], scan: bool) -> None:
        started = time.perf_counter()
        mem = self._memory_now()
        self._publish()
        if self.fixed_roots is None:
            self._roots = [Root(r["path"], r["namespace"]) for r in mem.roots()]
        # Read again at every batch: a rule written since the last one (heard or not: the
        # server hears only what is saved through Jupyter) holds for this batch's changes.
        self._ignored = {}
        result = Batch(changes=len(batch) + (len(self._roots) if scan else 0))
        targets: dict[str, set[str]] = {}
        if scan:
            for root in self._roots:
                targets.setdefault(root.namespace, set()).add(root.path)
        for raw, deleted in batch.items():
            for root, path in self._placed(raw):
                target = self._target(path, deleted, root)
                if target is not None:
                    targets.setdefault(root.namespace, set()).add(target)
        tried: list[str] = []
        for namespace, paths in targets.items():
            # A folder to index again covers the files inside it.
            folders = sorted(p for p in paths if os.path.isdir(p))
            chosen = sorted(p for p in paths if not any(p != f and _inside(p, f) for f in folders))
            for start in range(0, len(chosen), self.slice_files):
                part = chosen[start : start + self.slice_files]
                tried += part
                self._index_slice(mem, part, namespace, result)
                with self._cond:
                    self._indexing = max(len(chosen) - start - len(part), 0) + 1
                self._publish(throttle=True)
        failed = {p for p, _ in result.failures}
        with self._cond:
            # A file indexed now, itself or inside a folder indexed again, has not failed.
            for path in [p for p in self._failures if p not in failed]:
                if any(_inside(path, t) for t in tried):
                    del self._failures[path]
            for path, reason in result.failures:
                self._failures.pop(path, None)
                self._failures[path] = (reason, time.time())
            while len(self._failures) > MAX_FAILURES:
                self._failures.pop(next(iter(self._failures)))
        # Tried again once: a notebook saved half-written, a file removed while it was read.
        for path in sorted(failed - self._retried):
            if _inside_any(path, self._roots):
                self._retried.add(path)
                timer = threading.Timer(self.retry_after, self._retry, [path])
                timer.daemon = True
                timer.start()
        result.ms = (time.perf_counter() - started) * 1000
        result.at = time.time()
        self.batches += 1
        self.last_batch = result
        if self.on_batch is not None:
            self.on_batch(result)

    def _retry(self, path: str) -> None:
        with self._cond:
            if self._closed:
                return
            self._pending.setdefault(path, not os.path.lexists(path))
            now = time.monotonic()
            self._first = self._first or now
            self._last = now
            self._cond.notify_all()

    def _placed(self, path: str) -> list[tuple[Root, str]]:
        """The roots ``path`` lies under, with ``path`` spelt as under each root: an event may
        name it through a symlink the root was not indexed through, or the other way round."""
        found = [(root, path) for root in self._roots if _inside(path, root.path)]
        if found or not self._roots:
            return found
        real = os.path.realpath(path)
        for root in self._roots:
            base = os.path.realpath(root.path)
            if _inside(real, base):
                found.append((root, os.path.normpath(os.path.join(root.path, os.path.relpath(real, base)))))
        return found

    def _target(self, path: str, deleted: bool, root: Root) -> str | None:
        """What to index for a change of ``path`` under ``root``: the file, the folder moved or
        created, or for a path that went away the nearest folder still there (indexing it
        again removes the chunks of its files that are gone); None to ignore the change."""
        ignored = self._ignored.setdefault(root.path, exclude.Ignored(root.path))
        name = os.path.basename(path)
        if exclude.is_ignore_file(path):
            # What it ignores, or no longer ignores, changed: index its folder again (which
            # removes the files it now ignores), unless the folder itself is never indexed.
            folder = os.path.dirname(path)
            if not os.path.isdir(folder):
                return self._target(folder, True, root)  # gone with its folder
            return folder if exclude.excluded(folder, root.path, ignored) is None else None
        if self._is_own(path) or exclude.excluded(path, root.path, ignored) is not None:
            return None
        if not deleted and os.path.isdir(path):
            # As an index run's walk does: a symlinked folder is not followed (it may loop).
            return None if os.path.islink(path) else path
        if not deleted and os.path.lexists(path):
            return path if kind_of(name) is not None else None
        # Gone. A path without an ingestible kind may have been a folder: unless it has some
        # other file suffix, look again at what held it.
        suffix = os.path.splitext(name)[1]
        if kind_of(name) is None and suffix and not os.path.isdir(path):
            return None
        folder = os.path.dirname(path)
        while not os.path.isdir(folder) and _inside(folder, root.path) and folder != root.path:
            folder = os.path.dirname(folder)
        return folder if os.path.isdir(folder) and _inside(folder, root.path) else None

    def _index_slice(self, mem: Any, paths: list[str], namespace: str, result: Batch) -> None:
        try:
            report = mem.index(*paths, namespace=namespace)
        except Exception as exc:
            reason = f"indexing failed: {type(exc).__name__}: {exc}"
            result.failures += [(p, reason) for p in paths]
            return
        result.indexed += report.files_changed
        result.removed += report.files_removed
        result.unchanged += report.files_unchanged
        result.embedded += report.chunks_embedded
        result.refining += getattr(report, "passages_pending", 0)  # none from an older owner
        result.failures += [(str(p), str(r)) for p, r in report.skipped]


def _inside_any(path: str, roots: Sequence[Root]) -> bool:
    return any(_inside(path, r.path) for r in roots)


# -- the file watcher ------------------------------------------------------------------------
def watch(
    queue: ChangeQueue,
    folders: Sequence[str | os.PathLike[str]],
    stop: threading.Event | None = None,
    ready: threading.Event | None = None,
) -> None:
    """Feed ``queue`` with every change under ``folders`` until ``stop`` is set.

    Uses ``watchfiles`` (the Rust ``notify`` crate: inotify, FSEvents, ReadDirectoryChangesW);
    symlinked folders are not followed into loops. ``ready`` is set once the watches are in
    place. Ctrl-C ends it (``KeyboardInterrupt``).
    """
    import watchfiles

    roots = sorted((_absolute(f) for f in folders), key=len, reverse=True)

    def keep(change: watchfiles.Change, path: str) -> bool:
        # Cheap checks by name only; the queue applies .gitignore and the roots. An ignore file
        # is never indexed, but what it says is: its change is heard.
        root = next((r for r in roots if _inside(path, r)), None)
        if root is None:
            return False
        if exclude.is_ignore_file(path):
            path = os.path.dirname(path)
        return exclude.excluded(path, root) is None

    for changes in watchfiles.watch(
        *roots,
        watch_filter=keep,
        debounce=500,
        step=50,
        stop_event=stop,
        rust_timeout=200,
        yield_on_timeout=True,
    ):
        if ready is not None and not ready.is_set():
            ready.set()
        if changes:
            queue.put_many((path, change == watchfiles.Change.deleted) for change, path in changes)
