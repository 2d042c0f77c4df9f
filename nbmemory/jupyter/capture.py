"""Each cell a kernel runs, captured into the memory (``%memcapture``).

The kernel's part is kept small, because it is paid on every cell: a ``pre_run_cell`` hook
notes the time and starts keeping what the cell prints and displays (the first and last
characters of it, and how many there were: :class:`_Kept`), and a ``post_run_cell`` hook puts
the source, the cell, the error and that text on a queue. Everything else happens on a thread
of its own (:class:`CellCapture`): leaving out nbmemory's own cells and outputs
(:mod:`nbmemory.own_output`), formatting the traceback, finding the notebook and the cell's
position in it, and handing the runs to the memory's owner (:meth:`~nbmemory.Memory.capture`),
which redacts, embeds and writes them in one transaction. The kernel never opens the memory
file itself while another process owns it: it uses the magics' memory (:func:`nbmemory.remote.connect`).

What is kept of the output: text written to ``sys.stdout`` / ``sys.stderr`` and the
``text/plain`` form of what is displayed, in order; no images, no widget state, nothing nbmemory
rendered itself (outputs it marks, printed hit tables). A kernel killed with runs still on the
queue loses those runs; nothing stored before is touched (each batch is one transaction in the
owner).
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import json
import os
import queue
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nbmemory.own_output import calls_magic, is_rendered, mimebundle, without_printed, without_setup
from nbmemory.runtime import publish, status_folder

__all__ = ["CaptureNotice", "CellCapture"]

#: What the kernel keeps of a cell's output: its first ``HEAD`` and last ``TAIL`` characters
#: (the owner keeps at most 2,000, start and end: :data:`nbmemory.executions.OUTPUT_CHARS`).
HEAD = 1_500
TAIL = 500
#: Runs waiting beyond this many are dropped (and counted): the owner has stopped answering.
MAX_WAITING = 1_000
#: Runs handed to the owner in one call when several are waiting.
BATCH = 64
#: The thread does its share while no cell runs and none ended this recently (the kernel is
#: still sending the cell's reply), or once a run has waited :data:`MAX_DEFER` seconds: its
#: Python work would otherwise hold the interpreter lock while the cell or the next one runs.
SETTLE = 0.02
MAX_DEFER = 0.5
_WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
_STOP = object()
# The modules that run a cell: their frames head every traceback of a cell.
_RUNNER = ("IPython.", "ipykernel.")
# An expression that only names a value (``hits``, ``result[0]``, ``mem.last``).
_SHOWING = (ast.Module, ast.Expr, ast.Name, ast.Attribute, ast.Subscript, ast.Constant, ast.Load)


class _Kept:
    """What one cell printed and displayed: the first :data:`HEAD` characters, the last
    :data:`TAIL` after them, how many in all, and whether nbmemory rendered any of it."""

    __slots__ = ("active", "head", "own", "room", "tail", "total")

    def __init__(self) -> None:
        self.active = False
        self.reset()

    def reset(self) -> None:
        self.head: list[str] = []
        self.room = HEAD
        self.tail = ""
        self.total = 0
        self.own = False

    def add(self, text: str) -> None:
        self.total += len(text)
        if self.room > 0:
            piece = text[: self.room]
            self.head.append(piece)
            self.room -= len(piece)
            text = text[len(piece) :]
            if not text:
                return
        self.tail = (self.tail + text[-TAIL:])[-TAIL:]

    def text(self) -> tuple[str, int]:
        """The kept text (``…`` where the middle was left out) and the length of all of it."""
        head = "".join(self.head)
        kept = len(head) + len(self.tail)
        if not self.tail:
            return head, self.total
        gap = "\n…\n" if self.total > kept else ""
        return head + gap + self.tail, self.total


@dataclass
class _Run:
    started: float
    ended: float
    source: str
    cell_id: str | None
    error: BaseException | None
    output: str
    output_chars: int
    own_output: bool
    session: str | None


class CellCapture:
    """The capture of one kernel: its hooks, its queue and the thread that empties it.

    Parameters
    ----------
    shell:
        The IPython shell whose cells are captured.
    memory:
        Returns the memory to write to (the magics' memory, opened on first use).
    namespace:
        Returns the namespace to write to (None: the memory's default).
    """

    def __init__(
        self,
        shell: Any,
        memory: Callable[[], Any],
        namespace: Callable[[], str | None] = lambda: None,
        memory_path: Callable[[], Path | None] = lambda: None,
    ) -> None:
        self.shell = shell
        self._memory = memory
        self._namespace = namespace
        self._memory_path = memory_path
        # Where this kernel says it captures (the Jupyter server's sidebar lists such kernels).
        self._status_file: Path | None = None
        self._since: str | None = None
        self._last_notebook: str | None = None
        self.enabled = False
        self._kept = _Kept()
        self._started: float | None = None
        self._running = False
        self._ended_at = 0.0
        self._cell_id: str | None = None
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._waiting = 0
        self._busy = False
        self._lock = threading.Lock()
        self._undo: list[Callable[[], None]] = []
        self._teed: list[tuple[Any, Callable[..., Any], Any]] = []
        self._notebooks: dict[str | None, str | None] = {}
        self._cells: dict[str, tuple[int, dict[str, int]]] = {}
        self._exit_hook = False
        #: What this kernel's capture did: cells stored, left out (nbmemory's own, empty),
        #: dropped (the queue was full), failed (the owner refused or could not be reached).
        self.counts = {"captured": 0, "skipped": 0, "dropped": 0, "failed": 0}
        self.last_error: str | None = None
        self.last_id: int | None = None

    # -- on and off -------------------------------------------------------------------------
    def start(self) -> None:
        """Capture the cells run from now on."""
        if self.enabled:
            return
        self._watch_displays()
        self.shell.events.register("pre_run_cell", self.pre_run_cell)
        self.shell.events.register("post_run_cell", self.post_run_cell)
        self.enabled = True
        self._since = datetime.now(UTC).isoformat(timespec="seconds")
        self._publish()

    def stop(self, wait: float = 2.0) -> None:
        """Capture no more cells; those already queued are written (waiting up to ``wait`` s)."""
        if self.enabled:
            for name, hook in (("pre_run_cell", self.pre_run_cell), ("post_run_cell", self.post_run_cell)):
                with contextlib.suppress(ValueError):
                    self.shell.events.unregister(name, hook)
            for undo in reversed(self._undo):
                undo()
            self._undo = []
            self._untee_cell()
            self.enabled = False
            self._running = False
            self._kept.active = False
        self.flush(wait)
        if self._status_file is not None:
            with contextlib.suppress(OSError):
                self._status_file.unlink()
            self._status_file = None

    def close(self) -> None:
        """Stop, write what is queued, and end the thread."""
        self.stop()
        thread = self._thread
        if thread is not None:
            self._queue.put(_STOP)
            thread.join(timeout=2.0)
            self._thread = None
        if self._exit_hook:
            atexit.unregister(self.flush)
            self._exit_hook = False

    def flush(self, timeout: float = 2.0) -> bool:
        """Wait until every queued run is written (or ``timeout`` seconds); whether they were."""
        deadline = time.monotonic() + timeout
        while self._waiting or self._busy:
            if time.monotonic() > deadline or self._thread is None or not self._thread.is_alive():
                return False
            time.sleep(0.01)
        return True

    def status(self) -> str:
        """One line: on or off in this kernel, and what it did (``on in this kernel (pid 4242): ...``)."""
        counts = self.counts
        done = f"{counts['captured']} cells captured, {counts['skipped']} left out (nbmemory's own or empty)"
        extra = [f"{counts[k]} {k}" for k in ("dropped", "failed") if counts[k]]
        if self._waiting:
            extra.append(f"{self._waiting} waiting")
        state = "on" if self.enabled else "off"
        line = f"{state} in this kernel (pid {os.getpid()}): {', '.join([done, *extra])}"
        if self.last_error:
            line += f"; last error: {self.last_error}"
        return line

    # -- the hooks (in the cell's thread: keep them small) ----------------------------------
    def pre_run_cell(self, info: Any) -> None:
        """``pre_run_cell``: note the time and keep what the cell writes from now on."""
        if getattr(info, "silent", False):
            self._started = None
            return
        self._running = True
        self._started = time.time()
        self._cell_id = getattr(info, "cell_id", None)
        kept = self._kept
        kept.reset()
        kept.active = True
        self._tee_cell()

    def post_run_cell(self, result: Any) -> None:
        """``post_run_cell``: queue the run for the capture thread."""
        kept = self._kept
        kept.active = False
        self._running = False
        self._ended_at = ended = time.monotonic()
        self._untee_cell()
        started, self._started = self._started, None
        if started is None or not self.enabled:
            return
        info = getattr(result, "info", None)
        source = getattr(info, "raw_cell", None)
        if not isinstance(source, str) or not source.strip():
            return
        if self._waiting >= MAX_WAITING:
            self.counts["dropped"] += 1
            return
        output, chars = kept.text()
        session = self.shell.user_ns.get("__session__")
        run = _Run(
            started,
            ended,
            source,
            self._cell_id,
            result.error_in_exec or result.error_before_exec,
            output,
            chars,
            kept.own,
            session if isinstance(session, str) else None,
        )
        with self._lock:
            self._waiting += 1
        self._queue.put(run)
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._work, name="nbmemory-capture", daemon=True)
            self._thread.start()

    def _tee_cell(self) -> None:
        """Keep a copy of what the cell writes to stdout and stderr, until :meth:`_untee_cell`.

        Wrapped for the one cell, not once for all: IPython (9) puts its own wrapper on the
        streams for each cell and puts back, when the cell ends, the method it found.
        """
        import sys

        kept = self._kept
        for stream in (sys.stdout, sys.stderr):
            if stream is None or any(stream is s for s, _, _ in self._teed):
                continue
            write = stream.write

            def tee_write(text: Any, *args: Any, _write: Any = write, **kwargs: Any) -> Any:
                if kept.active and isinstance(text, str):
                    kept.add(text)
                return _write(text, *args, **kwargs)

            own = vars(stream).get("write") if hasattr(stream, "__dict__") else None
            try:
                setattr(stream, "write", tee_write)  # noqa: B010 (a method of a typed stream)
            except (AttributeError, TypeError):
                continue  # a C-level stream (terminal IPython): what it prints is not kept
            self._teed.append((stream, tee_write, own))

    def _untee_cell(self) -> None:
        for stream, tee_write, own in self._teed:
            if vars(stream).get("write") is tee_write:
                if own is None:
                    delattr(stream, "write")
                else:
                    setattr(stream, "write", own)  # noqa: B010
        self._teed = []

    def _wrap(self, owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        """Replace ``owner.name`` by ``make(original)`` until :meth:`stop` (left alone when the
        object takes no attribute: a C-level stream)."""
        original = getattr(owner, name, None)
        if original is None:
            return
        wrapper = make(original)
        try:
            setattr(owner, name, wrapper)
        except (AttributeError, TypeError):
            return

        def undo() -> None:
            # Only ours: whatever wrapped it since keeps its wrapper (ours then does nothing).
            if vars(owner).get(name) is wrapper:
                delattr(owner, name)

        self._undo.append(undo)

    def _watch_displays(self) -> None:
        """Keep a copy of what is displayed while a cell runs (its printed text: :meth:`_tee_cell`),
        and none of a traceback it shows."""
        kept = self._kept

        def paused(show: Callable[..., Any]) -> Callable[..., Any]:
            # A traceback is kept as the error (its last lines), not as what the cell printed; an
            # ``Out[3]:`` prompt is not kept either.
            def show_paused(*args: Any, **kwargs: Any) -> Any:
                active, kept.active = kept.active, False
                try:
                    return show(*args, **kwargs)
                finally:
                    kept.active = active

            return show_paused

        self._wrap(self.shell, "showtraceback", paused)
        self._wrap(self.shell, "showsyntaxerror", paused)

        def seen(data: Any, metadata: Any) -> None:
            if not kept.active:
                return
            if is_rendered(metadata):
                kept.own = True
            elif isinstance(data, dict) and _WIDGET_MIME not in data:
                text = data.get("text/plain")
                if isinstance(text, str):
                    kept.add(text + "\n")

        # A value or a display is kept as its text/plain (not what rendering it printed: the
        # ``Out[3]:`` prompt, a rendered object's text, in a terminal).
        def result(write_format_data: Callable[..., Any]) -> Callable[..., Any]:
            def write_result(format_dict: Any, md_dict: Any = None) -> Any:
                seen(format_dict, md_dict)
                active, kept.active = kept.active, False
                try:
                    return write_format_data(format_dict, md_dict)
                finally:
                    kept.active = active

            return write_result

        def displayed(publish: Callable[..., Any]) -> Callable[..., Any]:
            def publish_display(data: Any = None, metadata: Any = None, *args: Any, **kwargs: Any) -> Any:
                seen(data, metadata)
                active, kept.active = kept.active, False
                try:
                    return publish(data, metadata, *args, **kwargs)
                finally:
                    kept.active = active

            return publish_display

        self._wrap(getattr(self.shell, "displayhook", None), "write_output_prompt", paused)
        self._wrap(getattr(self.shell, "displayhook", None), "write_format_data", result)
        self._wrap(getattr(self.shell, "display_pub", None), "publish", displayed)

    # -- the capture thread -----------------------------------------------------------------
    def _work(self) -> None:
        while True:
            first = self._queue.get()
            if first is _STOP:
                return
            deadline = first.ended + MAX_DEFER
            self._wait_idle(deadline)
            batch = [first]
            while len(batch) < BATCH:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is _STOP:
                    self._queue.put(_STOP)
                    break
                batch.append(more)
            self._busy = True
            try:
                with self._lock:
                    self._waiting -= len(batch)
                self._write(batch, deadline)
            finally:
                self._busy = False

    def _wait_idle(self, deadline: float) -> None:
        """Until no cell runs and the last one ended :data:`SETTLE` seconds ago, or ``deadline``."""
        while True:
            now = time.monotonic()
            if now >= deadline:
                return
            if not self._running:
                settled = self._ended_at + SETTLE - now
                if settled <= 0:
                    return
                time.sleep(min(settled, deadline - now))
            else:
                time.sleep(min(0.005, deadline - now))

    def _write(self, batch: list[_Run], deadline: float) -> None:
        runs = []
        for run in batch:
            # A cell may have started meanwhile: the next run waits for it (up to the deadline).
            self._wait_idle(deadline)
            try:
                payload = self._payload(run)
            except Exception as exc:  # a run that cannot be read is left out, never the kernel's problem
                self.last_error = f"{type(exc).__name__}: {exc}"
                payload = None
            if payload is None:
                self.counts["skipped"] += 1
            else:
                runs.append(payload)
        if not runs:
            return
        try:
            memory = self._memory()
            self._exit_flush()
            ids = memory.capture(runs, namespace=self._namespace())
        except Exception as exc:  # the owner refused or is gone: said by %memcapture status
            self.counts["failed"] += len(runs)
            self.last_error = f"{type(exc).__name__}: {exc}"
            return
        self.counts["captured"] += len(runs)
        self.last_id = ids[-1] if ids else self.last_id
        self.last_error = None
        self._last_notebook = runs[-1].get("notebook", self._last_notebook)
        self._publish()

    def _publish(self) -> None:
        """Say that this kernel captures, into which notebook it last did, and how many cells."""
        if not self.enabled:
            return
        path = self._memory_path()
        file = None if path is None else status_folder(path, "capture") / f"kernel-{os.getpid()}.json"
        if file != self._status_file and self._status_file is not None:
            with contextlib.suppress(OSError):
                self._status_file.unlink()  # the kernel now writes to another memory
        self._status_file = file
        if file is None:
            return
        publish(
            file,
            {
                "pid": os.getpid(),
                "kernel_id": _kernel_id(),
                "notebook": self._last_notebook,
                "since": self._since,
                "runs": self.counts["captured"],
            },
        )

    def _exit_flush(self) -> None:
        # Registered once the memory is open: exit hooks run last first, so the queue is
        # written before the memory's own exit hook closes it.
        if not self._exit_hook:
            atexit.register(self.flush)
            self._exit_hook = True

    def _payload(self, run: _Run) -> dict[str, Any] | None:
        """What :meth:`~nbmemory.Memory.capture` gets for one run; None for a run left out."""
        if calls_magic(run.source):
            return None  # %memsearch and the rest, with what they showed
        code = without_setup(run.source)
        if not code.strip():
            return None  # %load_ext nbmemory alone
        output = without_printed(run.output) if run.output else ""
        if run.own_output and not output.strip() and _only_shows(code):
            return None  # `hits` alone: a cell that shows what nbmemory returned
        payload: dict[str, Any] = {
            "source": code,
            "at": datetime.fromtimestamp(run.started, UTC).replace(tzinfo=None),
        }
        notebook = self._notebook(run.session)
        if notebook is not None:
            payload["notebook"] = notebook
        if run.cell_id:
            payload["cell_id"] = run.cell_id
            index = self._cell_index(notebook, run.cell_id) if notebook else None
            if index is not None:
                payload["cell_index"] = index
        if output.strip():
            payload["output"] = output
            if run.output_chars > len(run.output):
                payload["output_chars"] = run.output_chars
        if run.error is not None:
            payload.update(_error(run.error))
        return payload

    def _notebook(self, session: str | None) -> str | None:
        """The saved notebook of this kernel, found once per session name."""
        if session not in self._notebooks:
            from nbmemory.jupyter.notebook_context import current_notebook

            found = current_notebook(self.shell)
            self._notebooks[session] = None if found is None else str(found)
        return self._notebooks[session]

    def _cell_index(self, notebook: str, cell_id: str) -> int | None:
        """The position of cell ``cell_id`` in the saved ``notebook`` (None: not saved there yet)."""
        try:
            mtime = Path(notebook).stat().st_mtime_ns
        except OSError:
            return None
        cached = self._cells.get(notebook)
        if cached is None or cached[0] != mtime:
            try:
                cells = json.loads(Path(notebook).read_text(encoding="utf-8")).get("cells", [])
                ids = {
                    c["id"]: i
                    for i, c in enumerate(cells)
                    if isinstance(c, dict) and isinstance(c.get("id"), str)
                }
            except (OSError, ValueError, AttributeError):
                ids = {}
            cached = (mtime, ids)
            self._cells[notebook] = cached
        return cached[1].get(cell_id)


def _kernel_id() -> str | None:
    """This kernel's id, as the Jupyter server knows it (from its connection file's name)."""
    try:
        from ipykernel.connect import get_connection_file

        name = Path(get_connection_file()).stem
    except Exception:  # not an ipykernel, or no connection file: the pid is enough
        return None
    return name.removeprefix("kernel-") if name.startswith("kernel-") else None


def _only_shows(source: str) -> bool:
    """Whether a cell is one expression that only names a value (no call, no assignment)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    return len(tree.body) == 1 and all(isinstance(node, _SHOWING) for node in ast.walk(tree))


def _error(error: BaseException) -> dict[str, str]:
    """A failed run's ``error`` line and the last lines of its traceback, from the cell's own
    frames on (IPython's frames that ran the cell are left out)."""
    tb = error.__traceback__
    while tb is not None and str(tb.tb_frame.f_globals.get("__name__", "")).startswith(_RUNNER):
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(error), error, tb)).rstrip()
    first = traceback.format_exception_only(type(error), error)[-1].strip()
    return {"error": first, "traceback": "\n".join(text.splitlines()[-12:])}


class CaptureNotice:
    """The line ``%load_ext nbmemory`` shows when capture is on (marked as nbmemory's own output)."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = path

    def __repr__(self) -> str:
        where = f"in {self.path}" if self.path is not None else "in the memory"
        return (
            f"nbmemory: each cell run in this kernel is remembered {where} (on this machine only); "
            "%memcapture off stops it, NBMEMORY_CAPTURE=0 turns it off for every kernel"
        )

    def _repr_mimebundle_(
        self, include: Any = None, exclude: Any = None
    ) -> tuple[dict[str, str], dict[str, Any]]:
        return mimebundle(self, "CaptureNotice")
