"""A tuning run in a background thread: the kernel stays free while it mines, trains and checks.

``%memtune --background`` starts one and returns its :class:`TuneJob`; searches, writes and other
cells go on meanwhile with the current model. Tuning trains its own copy of the model and stages
the candidate's vectors beside the live ones, so nothing a search reads changes until the gate
adopts the candidate and the swap replaces model and vectors in one step (writes that began with
the old model commit first: see ``Memory._swap``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

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
