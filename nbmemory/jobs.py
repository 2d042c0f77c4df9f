"""Long runs of the memory's operations, started from any front end: :class:`IndexJob` for
``index`` (the magics, the Jupyter server's REST API) and :class:`TuneJob` for ``tune``.

A job runs in the calling thread or a background one, keeps its progress and its report, can be
cancelled, and tells observers how it goes; the front ends only draw it (a widget, a JSON reply).

A tuning run in a background thread keeps the kernel free while it mines, trains and checks:
``%memtune --background`` starts one and returns its :class:`TuneJob`; searches, writes and other
cells go on meanwhile with the current model. Tuning trains its own copy of the model and stages
the candidate's vectors beside the live ones, so nothing a search reads changes until the gate
adopts the candidate and the swap replaces model and vectors in one step (writes that began with
the old model commit first: see ``ActiveModel.swap`` in :mod:`nbmemory.active_model`).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Executor
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from nbmemory.progress import CANCELLABLE, IndexProgress, done_text

if TYPE_CHECKING:
    from nbmemory.api import MemoryAPI
    from nbmemory.ingest.indexer import IndexReport

__all__ = ["IndexCancelled", "IndexJob", "TuneJob", "error_text"]

#: ``progress(phase, fraction)``, as :func:`nbmemory.tune.run.tune_memory` reports it.
ProgressFn = Callable[[str, float], None]


class TuneJob:
    """One background tuning run.

    Parameters
    ----------
    run:
        Does the tuning, reporting through the progress function it is given, and returns the
        report (``lambda progress: memory.tune(options, progress=progress)``).
    on_progress:
        Also told every ``(phase, fraction)``: a progress bar.
    on_end:
        Called once in the job's thread when the run ends, with the job (``state`` says how).
    """

    def __init__(
        self,
        run: Callable[[ProgressFn], Any],
        on_progress: ProgressFn | None = None,
        on_end: Callable[[TuneJob], None] | None = None,
    ) -> None:
        self.phase = "starting"
        self.fraction = 0.0
        self.state = "running"
        self.report: Any = None
        self.error: BaseException | None = None
        self.started = time.time()
        self.ended: float | None = None
        self._run = run
        self._on_progress = on_progress
        self._on_end = on_end
        self._thread = threading.Thread(target=self._main, name="nbmemory-tune", daemon=True)
        self._thread.start()

    def _progress(self, phase: str, fraction: float) -> None:
        self.phase, self.fraction = phase, fraction
        if self._on_progress is not None:
            self._on_progress(phase, fraction)

    def _main(self) -> None:
        try:
            self.report = self._run(self._progress)
            self.state = "done"
        except BaseException as exc:  # reported through result(); the thread must not die silently
            self.error = exc
            self.state = "failed"
        finally:
            self.ended = time.time()
            if self._on_end is not None:
                self._on_end(self)

    @property
    def done(self) -> bool:
        """Whether the run has ended (adopted, refused or failed)."""
        return not self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds (None: until it ends); whether it has ended."""
        self._thread.join(timeout)
        return self.done

    def result(self, timeout: float | None = None) -> Any:
        """The tuning report, once the run ends; re-raises its error if it failed.

        Raises ``TimeoutError`` when it is still running after ``timeout`` seconds.
        """
        if not self.wait(timeout):
            raise TimeoutError(f"tuning still running after {timeout} s: {self.status()}")
        if self.error is not None:
            raise self.error
        return self.report

    def status(self) -> str:
        """One line: the phase and how far, or how it ended."""
        took = (self.ended or time.time()) - self.started
        if self.state == "running":
            return f"running: {self.phase} {self.fraction:.0%} ({took:.0f} s)"
        if self.state == "failed":
            return f"failed after {took:.0f} s: {type(self.error).__name__}: {self.error}"
        verdict = getattr(self.report, "reason", None) or str(self.report)
        version = getattr(self.report, "version", None)
        return f"finished in {took:.0f} s: {version + ': ' if version else ''}{verdict}"

    def __repr__(self) -> str:
        return f"<TuneJob {self.status()}>"


def error_text(exc: BaseException) -> str:
    """What a job reports of its error: nbmemory's own messages as they are, others with their type."""
    from nbmemory.errors import NbMemoryError

    return str(exc) if isinstance(exc, NbMemoryError) else f"{type(exc).__name__}: {exc}"


class IndexCancelled(Exception):
    """Raised from the indexer's progress callback to stop a run that was cancelled."""


class IndexJob:
    """One ``index`` run: its progress, its report, and a way to stop it.

    Cancelling stops before the next file; every batch the indexer committed stays indexed.

    Parameters
    ----------
    paths, namespace:
        What :meth:`~nbmemory.api.MemoryAPI.index` is given.
    note:
        A line the summary starts with (``%memindex`` says which notebook it indexes).
    on_progress:
        Called with the job after each step of the run (in the job's thread): a progress bar.
        ``job.snapshot`` holds the run's :class:`~nbmemory.progress.IndexProgress` as a dict,
        its line under ``text``.
    on_end:
        Called once with the job when the run ends, however it ends.
    """

    def __init__(
        self,
        paths: list[str],
        namespace: str | None = None,
        *,
        note: str = "",
        on_progress: Callable[[IndexJob], None] | None = None,
        on_end: Callable[[IndexJob], None] | None = None,
    ) -> None:
        self.id = uuid.uuid4().hex[:12]
        self.paths = paths
        self.namespace = namespace
        self.note = note
        self.state = "queued"  # queued, running, done, cancelled, error
        self.files_done = 0
        self.files_total = 0
        self.current: str | None = None
        #: The latest :class:`~nbmemory.progress.IndexProgress` of the run, as a dict.
        self.snapshot: dict[str, Any] = IndexProgress(phase="queued").to_dict()
        self.report: IndexReport | None = None
        self.error: BaseException | None = None
        self.started = time.time()
        self.finished: float | None = None
        self._on_progress = on_progress
        self._on_end = on_end
        self._cancel = threading.Event()
        self._clock = time.perf_counter()
        self._ended = threading.Event()
        self._ended.set()  # nothing is running until run() or start()

    @property
    def cancelled(self) -> bool:
        return self.state == "cancelled"

    @property
    def done(self) -> bool:
        """Whether no run is going on: it ended, or it was never started."""
        return self._ended.is_set()

    def cancel(self) -> None:
        """Stop before the next file (what is committed stays)."""
        self._cancel.set()

    def progress(self, done: int, total: int, path: str, snapshot: dict[str, Any] | None = None) -> None:
        """Indexer callback: record how far it is, and stop here when cancelled (only before
        a batch is written: its passages and the index update are finished, not cut off)."""
        if self._cancel.is_set() and (snapshot is None or snapshot.get("phase") in CANCELLABLE):
            raise IndexCancelled(f"cancelled at {done} of {total} files")
        self.files_done, self.files_total, self.current = done, total, path
        if snapshot is not None:
            self.snapshot = snapshot
        if self._on_progress is not None:
            self._on_progress(self)

    def _show(self, phase: str) -> None:
        """A step the memory does not report: opening it."""
        self.snapshot = IndexProgress(phase=phase, elapsed=time.perf_counter() - self._clock).to_dict()
        if self._on_progress is not None:
            self._on_progress(self)

    def run(self, memory: MemoryAPI | Callable[[], MemoryAPI]) -> IndexReport | None:
        """Index in the calling thread; an interrupt or :meth:`cancel` keeps committed batches.

        ``memory`` is the memory, or a function that opens it (an error opening it is the
        run's error). Returns the report, None when the run was cancelled; re-raises an error.
        """
        self.state = "running"
        self._ended.clear()
        self._clock = time.perf_counter()
        try:
            if self._cancel.is_set():
                raise IndexCancelled("cancelled before it started")
            if not hasattr(memory, "index"):
                self._show("opening the memory")
                memory = memory()
            report = memory.index(*self.paths, namespace=self.namespace, progress=self.progress)
            # The run's time is the wall time of this call, opening the memory included.
            report.seconds = max(report.seconds, time.perf_counter() - self._clock)
            self.report = report
            self.files_done = self.files_total = max(self.files_total, report.files_seen)
            done = IndexProgress.from_dict(self.snapshot)
            done.phase, done.fraction, done.seconds_left, done.elapsed = "done", 1.0, 0.0, report.seconds
            done.final = done_text(report.files_seen, report.chunks_added, report.seconds)
            self.snapshot = done.to_dict()
            self.state = "done"
        except (KeyboardInterrupt, IndexCancelled):
            self.state = "cancelled"
        except BaseException as exc:
            self.error = exc
            self.state = "error"
            raise
        finally:
            self.current = None
            self.finished = time.time()
            self._ended.set()
            if self._on_end is not None:
                self._on_end(self)
        return self.report

    def start(self, open_memory: Callable[[], MemoryAPI], executor: Executor | None = None) -> None:
        """Index in the background: in ``executor`` when given, else in a thread of its own.

        ``open_memory`` gives the memory to index into; it is called in the job's thread.
        """

        def work() -> None:
            # The error is kept on self.error and reported by the front end; a thread has no one to tell.
            with suppress(BaseException):
                self.run(open_memory)

        self._ended.clear()
        if executor is not None:
            executor.submit(work)
        else:
            threading.Thread(target=work, name="nbmemory-index", daemon=True).start()

    def wait(self, timeout: float | None = None) -> IndexReport | None:
        """Block until a background run ends; return its report (None if cancelled or failed)."""
        self._ended.wait(timeout)
        return self.report

    def summary(self) -> str:
        """The one report of the run: what was indexed, the skipped files and why, or why it stopped."""
        if self.error is not None:
            return f"indexing failed: {self.error}"
        if self.cancelled or self.report is None:
            return "indexing stopped: every batch committed before the stop is kept (run %memindex again to finish)"
        lines = [self.note] if self.note else []
        lines.append(self.report.summary())
        lines += [f"skipped {path}: {reason}" for path, reason in self.report.skipped]
        return "\n".join(lines)

    def to_dict(self, relative: Callable[[str | None], str | None] = lambda p: p) -> dict[str, Any]:
        """The job as JSON: ``{id, state, done, total, current, report, error, ...}``, paths
        passed through ``relative`` (the server shows them relative to its root)."""
        import dataclasses

        report: dict[str, Any] | None = None
        if self.report is not None:
            report = dataclasses.asdict(self.report)
            report["summary"] = self.report.summary()
        error = error_text(self.error) if self.error is not None else None
        return {
            "id": self.id,
            "paths": [relative(p) for p in self.paths],
            "namespace": self.namespace,
            # The REST API's states: a cancelled run reports as an error with its reason.
            "state": "error" if self.state == "cancelled" else self.state,
            "done": self.files_done,
            "total": self.files_total,
            "current": relative(self.current) if self.current else None,
            # Phase, counts, rate, time left, fraction and its line (``text``); paths as above.
            "progress": {**self.snapshot, "current": relative(self.snapshot.get("current"))},
            "report": report,
            "error": error if self.state != "cancelled" else "cancelled",
            "started": self.started,
            "finished": self.finished,
        }
