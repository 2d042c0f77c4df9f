"""Progress of long runs: what an ``index`` run has done and has left, and bars on stderr.

An index run's progress has one source, :class:`IndexMeter`: the indexer and the facade count
into it what takes time (files read, chunks embedded, passages embedded), and it hands every
listener the same :class:`IndexProgress` snapshot, as a dict that crosses a process boundary. The
magics, the sidebar (through the REST job) and the command line only draw that snapshot.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields
from typing import Any

__all__ = ["IndexMeter", "IndexProgress", "done_text", "fitted", "index_bar", "stderr_bar"]

#: The phases of an index run, in the order they first come (reading and the two embeddings
#: alternate, one batch of files at a time).
PHASES = (
    "starting",
    "loading the model",
    "reading files",
    "embedding chunks",
    "embedding passages",
    "updating the search index",
    "done",
)
#: What reading, hashing and chunking a file costs, in chunk embeddings: far less than embedding
#: its chunks, but not nothing, so a run of unchanged files still moves the bar.
FILE_WORK = 0.5
#: Phases a cancel may stop: what they do is not written yet (a batch's passages and the index
#: update come after its rows are committed, and finishing them is cheaper than repairing them).
CANCELLABLE = ("starting", "loading the model", "reading files", "embedding chunks")


def done_text(files: int, chunks: int, seconds: float) -> str:
    """The last line of a run: ``done — 53 files, 370 chunks in 23.4 s``."""
    return f"done — {files} file{'' if files == 1 else 's'}, {chunks} chunk{'' if chunks == 1 else 's'} in {seconds:.1f} s"


@dataclass
class IndexProgress:
    """One moment of an index run: counts, rate and time left, and the line that says so.

    ``chunks_total`` and ``passages_total`` count the files read so far; ``fraction`` and
    ``seconds_left`` add an estimate for the files not read yet, from those read.
    """

    phase: str = "starting"
    files_read: int = 0
    files_total: int = 0
    chunks_done: int = 0
    chunks_total: int = 0
    passages_done: int = 0
    passages_total: int = 0
    current: str | None = None
    #: Seconds since the call started.
    elapsed: float = 0.0
    #: Chunks (or passages, while those are embedded) per second of embedding; None until measured.
    rate: float | None = None
    seconds_left: float | None = None
    #: How much of the work that takes time is done, 0 to 1.
    fraction: float = 0.0
    #: Set at the end: the line the run ends with.
    final: str | None = None

    def text(self) -> str:
        """The state in one line, e.g. ``embedding chunks 120/370 · files 53/53 · 12.1 chunks/s · about 25 s left``."""
        if self.final is not None:
            return self.final
        name = self.current.rsplit("/", 1)[-1] if self.current else ""
        if self.phase == "reading files":
            parts = [f"reading files {self.files_read}/{self.files_total}", name]
        elif self.phase == "embedding chunks":
            parts = [f"embedding chunks {self.chunks_done}/{self.chunks_total}"]
            if self.files_read < self.files_total:
                parts.append(f"files {self.files_read}/{self.files_total}")
        elif self.phase == "embedding passages":
            parts = [f"embedding passages {self.passages_done}/{self.passages_total}"]
            if self.files_read < self.files_total:
                parts.append(f"files {self.files_read}/{self.files_total}")
        else:
            # No count to show: the line is drawn once, when the phase begins.
            parts = [f"{self.phase}…"]
        if self.phase in ("embedding chunks", "embedding passages") and self.rate:
            parts.append(f"{self.rate:.1f} {self.phase.split()[1]}/s")
        if self.seconds_left is not None and self.phase in (
            "reading files",
            "embedding chunks",
            "embedding passages",
        ):
            parts.append(f"about {_duration(self.seconds_left)} left")
        return " · ".join(p for p in parts if p)

    def to_dict(self) -> dict[str, Any]:
        """The snapshot as JSON, with its line under ``text``."""
        return {**asdict(self), "text": self.text()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IndexProgress:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{max(1, round(seconds))} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


#: ``listener(files finished, files total, path, snapshot)``: the indexer's callback. The first
#: three are what earlier versions passed (a file counts as finished once its chunks are
#: embedded and written); the snapshot is :meth:`IndexProgress.to_dict`.
Listener = Callable[[int, int, str, dict[str, Any]], None]


class IndexMeter:
    """Counts one index run's work as it goes and hands a listener a snapshot after each step.

    Parameters
    ----------
    listener:
        Called with ``(files finished, files total, path, snapshot)`` after every change.
    clock:
        Seconds, monotonic (tests pass a fake one).
    started:
        When the call began on ``clock``: the elapsed time and the rates count from here, so
        loading the model and the index update at the end are part of the run's time.
    """

    def __init__(
        self,
        listener: Listener | None = None,
        clock: Callable[[], float] = time.perf_counter,
        started: float | None = None,
    ) -> None:
        self._listener = listener
        self._clock = clock
        self.started = clock() if started is None else started
        self.state = IndexProgress()
        self.files_finished = 0
        #: Chunks and passages that went through the model (not reused), for the rates.
        self.chunks_embedded = 0
        self.passages_embedded = 0
        self._spent = {"embedding chunks": 0.0, "embedding passages": 0.0}
        self._since = self.started

    # -- what the indexer and the facade tell it ---------------------------------------------
    def phase(self, name: str) -> None:
        """Enter a phase (time spent embedding counts towards that phase's rate)."""
        self._enter(name)
        self._emit()

    def _enter(self, name: str) -> None:
        now = self._clock()
        if self.state.phase in self._spent:
            self._spent[self.state.phase] += now - self._since
        self._since = now
        self.state.phase = name

    def reading(self, read: int, total: int, path: str, finished: int) -> None:
        """Reading file number ``read`` of ``total`` now; ``finished`` are embedded and written."""
        self.state.files_read, self.state.files_total, self.state.current = read, total, path
        self.files_finished = finished
        if self.state.phase != "reading files":
            self.phase("reading files")
        else:
            self._emit()

    def planned(self, chunks: int, passages: int) -> None:
        """A file was read: ``chunks`` rows to write and ``passages`` windows in them."""
        self.state.chunks_total += chunks
        self.state.passages_total += passages

    def reused(self, chunks: int) -> None:
        """Chunks that need no embedding: kept, or a stored vector of the same text reused."""
        self.state.chunks_done += chunks

    def chunks_step(self, count: int, finished: int | None = None, path: str | None = None) -> None:
        """``count`` chunks were embedded; ``finished`` files are done in proportion."""
        self.chunks_embedded += count
        self.state.chunks_done += count
        if finished is not None:
            self.files_finished = finished
        if path is not None:
            self.state.current = path
        self._emit()

    def passages_found(self, planned: int, todo: int) -> None:
        """Of ``planned`` windows counted while reading, ``todo`` need embedding (the others are
        stored already, or were pooled from the chunks' own pass)."""
        self.state.passages_total -= planned - todo

    def passages_step(self, count: int) -> None:
        self.passages_embedded += count
        self.state.passages_done += count
        self._emit()

    def finish(self, files: int, chunks: int, seconds: float) -> None:
        """The run ended after ``seconds`` (the wall time of the whole call)."""
        self.files_finished = self.state.files_read = self.state.files_total = max(
            self.state.files_total, files
        )
        self._enter("done")
        self.state.final = done_text(files, chunks, seconds)
        self.state.elapsed = seconds
        self._emit()

    # -- what it tells ----------------------------------------------------------------------
    def _rate(self, phase: str, count: int) -> float | None:
        spent = self._spent[phase] + (self._clock() - self._since if self.state.phase == phase else 0.0)
        return count / spent if count and spent > 0 else None

    def snapshot(self) -> IndexProgress:
        """The state now: elapsed time, rate, time left and fraction worked out."""
        s = self.state
        if s.final is None:
            s.elapsed = self._clock() - self.started
        chunk_rate = self._rate("embedding chunks", self.chunks_embedded)
        passage_rate = self._rate("embedding passages", self.passages_embedded) or chunk_rate
        s.rate = passage_rate if s.phase == "embedding passages" else chunk_rate
        # Files not read yet are expected to hold as much work per file as those read.
        scale = s.files_total / s.files_read if 0 < s.files_read < s.files_total else 1.0
        chunks = max(s.chunks_total * scale, s.chunks_done)
        passages = max(s.passages_total * scale, s.passages_done)
        work = FILE_WORK * s.files_total + chunks + passages
        if s.phase == "done":
            s.fraction = 1.0
        elif work:
            s.fraction = min(1.0, (FILE_WORK * s.files_read + s.chunks_done + s.passages_done) / work)
        else:
            s.fraction = 0.0
        if s.phase == "done" or chunk_rate is None or passage_rate is None:
            s.seconds_left = None if s.phase != "done" else 0.0
        else:
            s.seconds_left = (chunks - s.chunks_done) / chunk_rate + (
                passages - s.passages_done
            ) / passage_rate
        return s

    def _emit(self) -> None:
        if self._listener is None:
            return
        snap = self.snapshot()
        self._listener(self.files_finished, snap.files_total, snap.current or "", snap.to_dict())


def fitted(callback: Callable[..., None]) -> Callable[..., None]:
    """``callback`` called with no more positional arguments than it takes: a progress callback
    written for ``(done, total, path)`` keeps working when a snapshot is passed after them."""
    try:
        params = list(inspect.signature(callback).parameters.values())
    except (TypeError, ValueError):
        return callback
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return callback
    most = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)

    def call(*args: Any) -> None:
        callback(*args[:most])

    return call


@contextlib.contextmanager
def stderr_bar(desc: str, enabled: bool) -> Iterator[Callable[..., None]]:
    """A ``progress(done, total, *_)`` callback drawing a bar on stderr; silent when not ``enabled``."""
    from tqdm.auto import tqdm

    bar = tqdm(total=0, desc=desc, disable=not enabled, file=sys.stderr, leave=False)

    def progress(done: int, total: int, *_: object) -> None:
        bar.total, bar.n = total, done
        bar.refresh()

    try:
        yield progress
    finally:
        bar.close()


@contextlib.contextmanager
def index_bar(enabled: bool) -> Iterator[Callable[..., None]]:
    """An index run's listener drawing its snapshot on stderr: a bar of the work done, then the
    line (phase, counts, rate, time left); silent when not ``enabled``."""
    from tqdm.auto import tqdm

    bar = tqdm(
        total=1000,
        disable=not enabled,
        file=sys.stderr,
        leave=False,
        bar_format="{percentage:3.0f}%|{bar:20}| {desc}",
    )

    def progress(done: int, total: int, path: str = "", snapshot: dict[str, Any] | None = None) -> None:
        if snapshot is None:
            bar.n = round(1000 * done / total) if total else 0
            bar.set_description_str(f"files {done}/{total}", refresh=False)
        else:
            bar.n = round(1000 * snapshot["fraction"])
            bar.set_description_str(snapshot["text"], refresh=False)
        bar.refresh()

    try:
        yield progress
    finally:
        bar.close()


def refine_line(refine: dict[str, int] | None) -> str:
    """``Memory.stats()["refine"]`` in words: ``refining: 2,140 of 11,345 passages`` while the
    background refiner works, else how many passages the memory holds."""
    done, total = (refine or {}).get("done", 0), (refine or {}).get("total", 0)
    if total > done:
        return f"refining: {done:,} of {total:,} passages"
    return f"passages: {total:,}, complete"
