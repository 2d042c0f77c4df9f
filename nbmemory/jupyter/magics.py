"""``%mem*`` IPython magics: thin commands over one :class:`~nbmemory.Memory` per kernel.

Load with ``%load_ext nbmemory``. Settings are traitlets on :class:`MemoryMagics`
(``%config MemoryMagics.top_k = 20`` or ``c.MemoryMagics.top_k = 20`` in ``ipython_config.py``);
each magic's docstring is its ``%magic?`` help. User mistakes, and every
:class:`~nbmemory.NbMemoryError`, surface as a :class:`UsageError` (a message, no traceback).

How a magic's line becomes its arguments (and the option specs the magics share) is in
:mod:`nbmemory.jupyter.magic_lines`; the progress bar of ``%memindex`` in a notebook is
:mod:`nbmemory.jupyter.index_widget`.
"""

from __future__ import annotations

import html
import json
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import (
    Magics,
    line_cell_magic,
    line_magic,
    magics_class,
    no_var_expand,
    output_can_be_silenced,
)
from IPython.core.magic_arguments import argument, argument_group, magic_arguments
from IPython.display import display
from traitlets import Bool, CaselessStrEnum, Float, Integer, Unicode, observe, validate

from nbmemory.config import capture_enabled
from nbmemory.jobs import TuneJob
from nbmemory.jupyter.capture import CaptureNotice, CellCapture
from nbmemory.jupyter.display import SearchHits
from nbmemory.jupyter.index_widget import WidgetIndexJob
from nbmemory.jupyter.magic_lines import (
    BUDGET,
    CONTEXT_K,
    CONTEXT_OPTIONS,
    EXPLAIN,
    JSON,
    QUERY_HELP,
    SEARCH_OPTIONS,
    START_KIND,
    START_NS,
    K,
    as_usage_errors,
    checked_k,
    filter_arguments,
    ids_line,
    joined_words,
    parse_line,
    parse_query_line,
    plural,
    split_leading_options,
    without_semicolon,
)
from nbmemory.options import (
    CHUNKS,
    RETRIEVERS,
    TUNE_OPTIONS,
    magic_options,
    owned_memory,
    search_arguments,
    search_payload,
    tune_options,
)
from nbmemory.progress import index_bar
from nbmemory.runtime import published

if TYPE_CHECKING:
    from nbmemory.api import SearchResult
    from nbmemory.jupyter.notebook_context import Links
    from nbmemory.jupyter.widgets import MemoryExplorer
    from nbmemory.memory import Memory
    from nbmemory.remote.shared import SharedMemory

__all__ = [
    "MemoryMagics",
    "load_ipython_extension",
    "unload_ipython_extension",
    "unsaved_cells",
]


@magics_class
class MemoryMagics(Magics):
    """The ``%mem*`` magics. One :class:`~nbmemory.Memory` per kernel, opened on first use."""

    top_k = Integer(10, help="Hits %memsearch, %memrelated and %memcontext use when -k is not given.").tag(
        config=True
    )
    namespace = Unicode(
        None,
        allow_none=True,
        help="Namespace searched and written when --ns is not given. None: search every namespace, "
        "write to $NBMEMORY_NAMESPACE or 'default'.",
    ).tag(config=True)
    home = Unicode(
        None, allow_none=True, help="Folder of the memory file (default $NBMEMORY_HOME or ~/.nbmemory)."
    ).tag(config=True)
    db = Unicode(None, allow_none=True, help="The memory file itself; overrides home.").tag(config=True)
    model = Unicode(
        None,
        allow_none=True,
        help="Sentence-transformers model name or local folder (default $NBMEMORY_MODEL, else the "
        "bundled all-MiniLM-L6-v2).",
    ).tag(config=True)
    explain = Bool(False, help="Show the ranking trace under every %memsearch table.").tag(config=True)
    context_budget = Integer(800, help="Token budget of %memcontext when --budget is not given.").tag(
        config=True
    )
    debounce = Float(0.3, help="Seconds %memexplore waits after the last keystroke before searching.").tag(
        config=True
    )
    progress = CaselessStrEnum(
        ["auto", "widget", "text", "none"],
        default_value="auto",
        help="Progress display of %memindex: a widget in a notebook, text in a terminal (auto).",
    ).tag(config=True)
    server_root = Unicode(
        None,
        allow_none=True,
        help="Jupyter server root folder, for links to hit sources; found from the Jupyter runtime "
        "folder when unset.",
    ).tag(config=True)
    capture = Bool(
        None,
        allow_none=True,
        help="Capture each cell this kernel runs into the memory (%memcapture on|off). None: on "
        "unless NBMEMORY_CAPTURE=0.",
    ).tag(config=True)

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        # Set before the traits: settings given as config (``--MemoryMagics.db=...`` on a
        # kernel's command line) reach _store_changed, which closes what is open, while the
        # traits are set.
        self._memory: Memory | SharedMemory | None = None
        self._owns_memory = False
        # The capture thread opens the memory too: one of them opens it, the other waits.
        self._opening = threading.Lock()
        #: The capture of this kernel's cells (``%memcapture``), started by ``%load_ext``.
        self.cell_capture = CellCapture(shell, lambda: self.memory, lambda: self.namespace, self.memory_path)
        super().__init__(shell=shell, **kwargs)
        self.index_job: WidgetIndexJob | None = None
        #: What the last ``%memforget`` forgot: what ``%memforget --undo`` brings back.
        self.forgotten: list[int] = []
        self.tune_job: TuneJob | None = None
        self._tune_show: Callable[..., None] | None = None
        self.last_result: SearchResult | None = None
        # (time, source) of the cells run in this kernel, newest last.
        self._cells_run: deque[tuple[float, str]] = deque(maxlen=500)

    # -- the kernel's Memory ------------------------------------------------------------------
    @property
    def memory(self) -> Memory | SharedMemory:
        """The kernel's Memory, opened on first use from ``db`` / ``home`` / ``model``.

        Assign a :class:`~nbmemory.Memory` to use that one instead (the magics will not close it).
        """
        if self._memory is None:
            with self._opening:
                if self._memory is None:
                    # connect(): the kernel becomes the memory's owner, or the client of the Jupyter
                    # server / another kernel / a CLI run that owns it; never a lock error.
                    from nbmemory.remote import connect

                    with as_usage_errors():
                        memory = connect(self.db, home=self.home or None, model=self.model)
                    self._memory, self._owns_memory = memory, True
        return self._memory

    @memory.setter
    def memory(self, value: Memory | SharedMemory | None) -> None:
        self.close()
        self._memory = value
        self._owns_memory = False

    def memory_path(self) -> Path | None:
        """The memory file the magics use (or will open), without opening it; None if unknown."""
        if self._memory is not None:
            return Path(self._memory.path)
        from nbmemory.config import Settings
        from nbmemory.errors import NbMemoryError

        try:
            settings = Settings(home=Path(self.home)) if self.home else Settings()
        except NbMemoryError:
            return None
        return settings.override(self.db).db_path

    def close(self) -> None:
        """Close the Memory the magics opened (a Memory assigned from outside is left open)."""
        self.cell_capture.flush()  # the cells already run go to the memory they ran with
        if self._memory is not None and self._owns_memory:
            self._memory.close()
        self._memory = None
        self._owns_memory = False

    @observe("home", "db", "model")
    def _store_changed(self, change: dict[str, Any]) -> None:
        # The next magic opens the file (or model) the new settings name.
        self.close()

    @property
    def capturing(self) -> bool:
        """Whether this kernel captures its cells: ``capture``, else ``NBMEMORY_CAPTURE``."""
        return capture_enabled() if self.capture is None else bool(self.capture)

    @observe("capture")
    def _capture_changed(self, change: dict[str, Any]) -> None:
        if self.capturing:
            self.cell_capture.start()
        else:
            self.cell_capture.stop()

    @validate("top_k", "context_budget")
    def _positive(self, proposal: dict[str, Any]) -> int:
        value = int(proposal["value"])
        if value <= 0:
            raise UsageError(f"MemoryMagics.{proposal['trait'].name} must be greater than 0, got {value}")
        return value

    def _write_ns(self, ns: str | None) -> str | None:
        return ns or self.namespace

    def _search_arguments(self, query: str, args: Any) -> dict[str, Any]:
        """What a searching magic's line asks :meth:`~nbmemory.Memory.search` for, checked."""
        values = {**vars(args), "ns": args.ns or self.namespace}
        with as_usage_errors():
            return search_arguments(query, values, default_k=self.top_k, rrf_k=self.memory.settings.rrf_k)

    def _links(self) -> Links:
        from nbmemory.jupyter.notebook_context import links_for

        return links_for(self.shell, self.server_root)

    def _use_widgets(self) -> bool:
        if self.progress == "auto":
            # A kernel (ZMQInteractiveShell) has a frontend that renders widgets; a terminal does not.
            return getattr(self.shell, "kernel", None) is not None
        return self.progress == "widget"

    def _hit_table(self, result: SearchResult, title: str) -> Any:
        from nbmemory.jupyter.display import HitTable

        return HitTable(result.hits, title=title, links=self._links())

    # -- search -----------------------------------------------------------------------------
    @magic_arguments()
    @argument("query", nargs="*", help=QUERY_HELP)
    @magic_options(K)
    @filter_arguments
    @argument_group("output")
    @magic_options(RETRIEVERS, CHUNKS, EXPLAIN, JSON)
    @output_can_be_silenced
    @line_magic
    @no_var_expand
    def memsearch(self, line: str) -> SearchHits | None:
        """Hybrid (BM25 + vector) search of the memory.

        Returns the hits as one object whose display is the table (escaped HTML in a notebook,
        text in a terminal): score, the rank each retriever gave, the source (notebook hits name
        the notebook and cell), an expandable text, ``+N more in this file`` for grouped hits and
        the weaker matches apart. ``hits.df`` (or ``hits.to_polars()``) is a polars DataFrame,
        iterating gives the hits. ``hits = %memsearch ...`` shows nothing; ``hits`` shows the table.

        Examples::

            %memsearch token rotation -k 5 --ns work --since 30d
            hits = %memsearch "token rotation" --explain
            hits.df.select("score", "location")
            %memsearch git reset --hard HEAD~
            %memsearch -k 3 -- --ns is not an option here

        The line is the query as typed: ``{}`` and ``$`` are not expanded, a pasted command keeps
        its flags, and only the options above count as options (all of them after ``--`` are
        the query too).
        """
        args = parse_query_line(self.memsearch, without_semicolon(line), SEARCH_OPTIONS)
        query = joined_words(args.query, "query", "%memsearch token rotation -k 5")
        arguments = self._search_arguments(query, args)
        with as_usage_errors():
            result = self.memory.search(query, **arguments)
        self.last_result = result
        if args.json:
            payload = search_payload(result, trace=args.explain)
            print(json.dumps(payload, indent=2, default=str, ensure_ascii=False))
            return None
        title = f"{plural(len(result.hits), 'hit')} for {query!r}"
        if result.rejected:
            # The closest few are shown folded under it (SearchHits): none of them is an answer.
            title = f"{result.reason} for {query!r}"
        trace = result.explain(top=arguments["k"]) if args.explain or self.explain else None
        return SearchHits(result, title, links=self._links(), trace=trace)

    @magic_arguments()
    @argument("id", type=int, help="item id")
    @argument("-k", type=int, default=None, help="number of similar items (default: MemoryMagics.top_k)")
    @argument("--ns", help="only this namespace (default: MemoryMagics.namespace, else all)")
    @output_can_be_silenced
    @line_magic
    def memrelated(self, line: str) -> SearchHits:
        """Items most similar to an item, plus those linked to it.

        Returns them as one object shown as a table; ``.df`` is a polars DataFrame.

        Example::

            %memrelated 42 -k 5
        """
        args = parse_line(self.memrelated, without_semicolon(line))
        from nbmemory.api import SearchResult, Trace

        with as_usage_errors():
            hits = self.memory.related(args.id, k=checked_k(args.k, self.top_k), namespace=args.ns or self.namespace)
        result = SearchResult(f"related to #{args.id}", hits, Trace(f"related to #{args.id}"))
        return SearchHits(result, f"{plural(len(hits), 'item')} related to #{args.id}", links=self._links())

    @magic_arguments()
    @argument("query", nargs="*", help="what the prompt is about: " + QUERY_HELP.split(", ", 1)[0])
    @magic_options(BUDGET, CONTEXT_K)
    @filter_arguments
    @line_magic
    @no_var_expand
    def memcontext(self, line: str) -> Any:
        """A token-budgeted context block for an LLM prompt, built from the best hits.

        Each hit comes under a line naming its source. Hits that look like prompt injection
        ("ignore previous instructions", fake role or system markers such as ``<|im_start|>`` or
        ``### System:``, zero-width characters, base64 payloads that decode to instructions) are
        kept out and listed under the block. Tokens are estimated as ``ceil(chars / 4)``.
        Returns a ``ContextBlock``; ``str(block)`` is the text for the prompt.

        Example::

            ctx = %memcontext how do I deploy --budget 800
        """
        args = parse_query_line(self.memcontext, line, CONTEXT_OPTIONS)
        query = joined_words(args.query, "query", '%memcontext "how do I deploy" --budget 800')
        budget = args.budget if args.budget is not None else self.context_budget
        if budget <= 0:
            raise UsageError(f"--budget must be a positive number of tokens, got {budget}")
        from nbmemory.safety import build_context

        arguments = self._search_arguments(query, args)
        with as_usage_errors():
            result = self.memory.search(query, **arguments)
        # Nothing confident to put in a prompt: an empty block that says why.
        return build_context(
            [] if result.rejected else result.hits, budget, query=query, no_answer=result.reason
        )

    # -- writing ----------------------------------------------------------------------------
    @magic_arguments()
    @argument("--tag", action="append", help="tag (repeatable)")
    @argument("--importance", type=float, default=0.5, help="0..1 (default 0.5)")
    @argument("--ns", help="namespace (default: MemoryMagics.namespace, else 'default')")
    @argument("--at", help="when it was said or happened: an ISO 8601 time, e.g. 2023-05-08T13:56")
    @argument("--speaker", help="who said it, e.g. user, assistant or Caroline")
    @argument("--conversation", help="the conversation or session it belongs to")
    @argument("text", nargs="*", help="the text (line form); with %%%%remember the cell body is the text")
    @line_cell_magic
    @no_var_expand
    def remember(self, line: str, cell: str | None = None) -> None:
        """Remember a piece of text; the very next search finds it.

        Options come first; in the line form the rest of the line is the text, kept verbatim.
        Secrets (keys, tokens, passwords) are redacted before anything is stored.

        Examples::

            %remember --tag ops Deploys need the VPN on

            %%remember --tag ops --importance 0.8
            Deploys need the VPN on; staging uses the 10.2 subnet.

            %remember --speaker Caroline --at 2023-05-08T13:56 --conversation s1 I went to the group
        """
        if cell is None:
            options, text = split_leading_options(line)
            args = parse_line(self.remember, options)
        else:
            args = parse_line(self.remember, line)
            if args.text:
                raise UsageError(
                    "with %%remember the cell body is the text: put only options on the first line"
                )
            text = cell
        if not text.strip():
            raise UsageError(
                "nothing to remember: write the text after the options (%remember --tag ops Deploys "
                "need the VPN on) or in the cell body (%%remember)"
            )
        with as_usage_errors():
            item = self.memory.remember(
                text,
                tags=args.tag or (),
                importance=args.importance,
                namespace=self._write_ns(args.ns),
                at=args.at,
                speaker=args.speaker,
                conversation=args.conversation,
            )
        note = " (secrets redacted)" if item.text != text.strip() else ""
        tags = f" tags={item.tags}" if item.tags else ""
        print(f"remembered #{item.id} in namespace {item.namespace!r}{tags}{note}")

    @magic_arguments()
    @argument("ids", nargs="*", type=int, help="item ids")
    @argument("--query", nargs="+", help="forget the top -k hits of this query (shows them unless --yes)")
    @argument("-k", type=int, default=1, help="with --query: how many hits (default 1)")
    @argument("--path", help="forget everything from this file (or glob)")
    @argument("--ns", help="only in this namespace")
    @argument("--yes", action="store_true", help="with --query: really forget")
    @argument(
        "--undo",
        action="store_true",
        help="bring forgotten items back: the ids given, else what the last %%memforget here forgot",
    )
    @line_magic
    def memforget(self, line: str) -> None:
        """Forget items by id, by the top hits of a query, or by source file (a soft delete).

        A forgotten item never shows up in results again; a forgotten file is not re-indexed.
        ``--query`` first shows what would go; add ``--yes`` to forget it. The store keeps what
        is forgotten: ``--undo`` brings it back.

        Examples::

            %memforget 42 43
            %memforget --query "old vpn note" -k 2 --yes
            %memforget --path ~/notes/old.md
            %memforget --undo
            %memforget --undo 42
        """
        args = parse_line(self.memforget, line)
        if args.undo:
            self._restore(args)
            return
        given = sum(bool(x) for x in (args.ids, args.query, args.path))
        if given != 1:
            raise UsageError(
                "give exactly one of: item ids, --query TEXT, or --path FILE (e.g. %memforget 42)"
            )
        query = " ".join(args.query) if args.query else None
        with as_usage_errors():
            if query and not args.yes:
                result = self.memory.search(query, k=checked_k(args.k, 1), namespace=args.ns, log=False)
                display(
                    self._hit_table(result, f"would forget {len(result.hits)} item(s): add --yes to forget")
                )
                return
            ids = self.memory.forget(
                args.ids or None, query=query, k=checked_k(args.k, 1), path=args.path, namespace=args.ns
            )
        if ids:
            self.forgotten = list(ids)
        print(f"forgot {len(ids)} item(s)" + (f": {ids_line(ids)} (undo: %memforget --undo)" if ids else ""))

    def _restore(self, args: Any) -> None:
        if args.query or args.path or args.yes:
            raise UsageError(
                "--undo takes item ids or nothing (e.g. %memforget --undo, %memforget --undo 42)"
            )
        ids = args.ids or self.forgotten
        if not ids:
            raise UsageError(
                "nothing to undo: no %memforget ran in this kernel; give the ids (%memforget --undo 42)"
            )
        with as_usage_errors():
            restored = self.memory.restore(ids)
        if not args.ids:
            self.forgotten = []
        shown = f": {ids_line(restored)}" if restored else " (none of them was forgotten)"
        print(f"restored {len(restored)} item(s){shown}")

    @magic_arguments()
    @argument("id", type=int, help="item id")
    @argument("--text", help="new text (re-embedded and indexed)")
    @argument("--tag", action="append", help="replace the tags (repeatable)")
    @argument("--importance", type=float, help="0..1")
    @argument("--pin", action="store_true", default=None, help="pin the item")
    @argument("--unpin", action="store_true", help="unpin the item")
    @line_magic
    def memupdate(self, line: str) -> None:
        """Change an item's text, tags, importance or pin.

        Example::

            %memupdate 42 --importance 0.9 --pin
        """
        args = parse_line(self.memupdate, line)
        if args.pin and args.unpin:
            raise UsageError("give --pin or --unpin, not both")
        pinned = True if args.pin else (False if args.unpin else None)
        if args.text is None and args.tag is None and args.importance is None and pinned is None:
            raise UsageError("nothing to change: give --text, --tag, --importance, --pin or --unpin")
        with as_usage_errors():
            item = self.memory.update(
                args.id, text=args.text, tags=args.tag, importance=args.importance, pinned=pinned
            )
        print(f"updated #{item.id}: importance={item.importance:g}, pinned={item.pinned}, tags={item.tags}")

    @magic_arguments()
    @argument("src", type=int, help="item id the link starts from")
    @argument("dst", type=int, help="item id the link points to")
    @argument(
        "--type",
        default="related",
        help="similar, related, contradicts, extends, supersedes, caused_by or temporal (default related)",
    )
    @argument("--note", help="free text kept with the link")
    @line_magic
    def memlink(self, line: str) -> None:
        """Record a typed link between two items.

        Example::

            %memlink 42 17 --type supersedes --note "new subnet"
        """
        args = parse_line(self.memlink, line)
        with as_usage_errors():
            self.memory.link(args.src, args.dst, args.type, note=args.note)
        print(f"linked #{args.src} -[{args.type}]-> #{args.dst}")

    @magic_arguments()
    @argument("paths", nargs="*", help="files or folders (default: this notebook)")
    @argument("--ns", help="namespace to index into (default: MemoryMagics.namespace, else 'default')")
    @argument(
        "--background",
        action="store_true",
        help="index in a thread and return at once; the Cancel button stops it",
    )
    @line_magic
    def memindex(self, line: str) -> None:
        """Index files and folders (markdown, notebooks, code, text, PDF, DOCX, HTML) incrementally.

        With no path, indexes this notebook: its saved ``.ipynb`` file when the kernel knows it
        (refused, with a message, while the notebook has unsaved changes: save first), else the
        cells this kernel has run, as ``sessions/kernel-<n>.ipynb`` next to the memory file
        (cell ``i`` is ``In[i]``). One display: the progress bar (files read and embedded), then the
        report in its place. Interrupt the kernel to stop (or, with
        ``--background``, press Cancel): every batch committed so far stays indexed.

        Examples::

            %memindex ~/notes ~/projects --ns work
            %memindex
        """
        args = parse_line(self.memindex, line)
        if self.index_job is not None and not self.index_job.done:
            raise UsageError("an index run is still going: wait for it or press its Cancel button")
        paths = [str(Path(p).expanduser()) for p in args.paths]
        missing = [p for p in paths if not Path(p).exists()]
        if missing:
            # Said once, before any progress bar: a missing path is a mistake, not a skipped file.
            raise UsageError(f"no such file or folder: {', '.join(missing)}")
        note = ""
        if not paths:
            path, note = self._this_notebook()
            paths = [str(path)]
        job = WidgetIndexJob(paths, self._write_ns(args.ns), use_widget=self._use_widgets(), note=note)
        self.index_job = job
        if job.widget is not None:
            if not args.background:
                # The button cannot fire while this cell runs; interrupting the kernel stops it.
                job.cancel_button.layout.display = "none"
            # One display per job: the bar while it runs, then the report in its label.
            display(job.widget)
        if args.background:
            memory = self.memory
            job.start(lambda: memory)
            return
        # Opened inside the run: the time it takes is part of the run's, and the bar says so.
        if job.widget is not None:
            job.run(lambda: self.memory)
            return
        if note:
            print(note)
        if self.progress != "none":
            self._index_with_text_bar(job)
        else:
            job.run(lambda: self.memory)
        if job.report is not None:
            print(job.snapshot["text"])
        print(job.summary().removeprefix(note).lstrip("\n"))

    def _index_with_text_bar(self, job: WidgetIndexJob) -> None:
        inner = job.progress
        with index_bar(True) as bar:

            def progress(done: int, total: int, path: str, snapshot: dict[str, Any] | None = None) -> None:
                inner(done, total, path, snapshot)
                bar(done, total, path, snapshot)

            job.progress = progress  # type: ignore[method-assign]
            job.run(lambda: self.memory)

    def _this_notebook(self) -> tuple[Path, str]:
        """The notebook ``%memindex`` indexes with no path, and a line that says which."""
        from nbmemory.jupyter.notebook_context import current_notebook, history_notebook

        found = current_notebook(self.shell)
        if found is not None:
            if unsaved_cells(found, self._cells_run):
                # The kernel reads the file, not the editor: indexing now would index an old version.
                raise UsageError(
                    f"the notebook has unsaved changes: save it (Ctrl+S) and run %memindex again ({found})"
                )
            return found, f"indexing this notebook: {found}"
        folder = self.memory.path.parent / "sessions"
        snapshot = history_notebook(self.shell, folder)
        return snapshot, f"this kernel's notebook file is unknown: indexing the cells it ran, as {snapshot}"

    def note_cell(self, info: Any) -> None:
        """``pre_run_cell`` hook: remember when each cell's source ran (for the unsaved-changes check)."""
        raw = getattr(info, "raw_cell", None)
        if isinstance(raw, str) and raw.strip():
            self._cells_run.append((time.time(), raw))

    @magic_arguments()
    @magic_options(*TUNE_OPTIONS)
    @argument(
        "--background",
        action="store_true",
        help="tune in a background thread and return its TuneJob at once (the kernel stays free)",
    )
    @line_magic
    def memtune(self, line: str) -> Any:
        """Fine-tune the embedding model on this memory; adopt it only if it is better.

        Mines (query, positive, hard negative) triples where keyword-heavy and vector-heavy search
        disagree, fine-tunes the current model on them, re-embeds the memory with the candidate
        (resumable) and compares the two on held-out queries; the candidate replaces the current
        model only on a real gain, otherwise nothing changes and the report says why. Shows a
        progress widget; returns the report (``report.summary()``). ``nbmemory models`` lists
        the versions. It takes minutes on a CPU (docs/tuning.md says how many).

        With ``--background`` the run goes on in a thread and the magic returns its ``TuneJob``
        at once: the widget follows it, searches and other cells run meanwhile with the current
        model, and ``job.result()`` waits for the report (``job.status()`` says where it is).
        One run at a time per kernel.

        Example::

            report = %memtune --epochs 1
            job = %memtune --background
        """
        args = parse_line(self.memtune, line)
        with as_usage_errors():
            running = self.tune_job
            if running is not None and not running.done:
                raise UsageError(f"a tuning run is already going on ({running.status()}): wait for it")
            options = tune_options(vars(args))
            memory = self.memory
            local = owned_memory(
                memory,
                f"{memory.path} is owned by another process (the Jupyter server or another kernel): "
                "run %memtune there, or `nbmemory tune` once it is closed",
            )
            progress = self._tune_progress()
            if args.background:
                show = self._tune_show
                self.tune_job = TuneJob(
                    lambda tick: local.tune(options, progress=tick),
                    progress,
                    lambda job: self._tune_ended(job, show),
                )
                return self.tune_job
            report = local.tune(options, progress=progress)
        print(report.summary())
        return report

    def _tune_ended(self, job: TuneJob, show: Callable[..., None] | None) -> None:
        """Where a background run ends: its line in its widget, or on stderr in a terminal."""
        if show is not None:
            show("done" if job.state == "done" else "failed", 1.0, job.status())
        else:
            print(f"%memtune: {job.status()}", file=sys.stderr)

    def _tune_progress(self) -> Any:
        """A progress display for %memtune: a widget in a notebook, stderr lines in a terminal."""
        phases = ("mining", "training", "embedding", "gate")
        self._tune_show = None
        if self._use_widgets():
            import ipywidgets as widgets

            bar = widgets.FloatProgress(value=0.0, min=0.0, max=1.0, description="tuning")
            label = widgets.HTML("<small>starting</small>")
            display(widgets.HBox([bar, label]))

            def show(phase: str, fraction: float, text: str = "") -> None:
                done = phases.index(phase) if phase in phases else len(phases)
                bar.value = min(1.0, (done + fraction) / len(phases))
                label.value = f"<small>{html.escape(text or f'{phase} {fraction:.0%}')}</small>"
                if phase in ("done", "failed"):
                    bar.bar_style = "success" if phase == "done" else "danger"

            self._tune_show = show
            return show
        if self.progress == "none":
            return None
        shown: dict[str, int] = {}

        def text(phase: str, fraction: float) -> None:
            step = int(fraction * 4)
            if shown.get(phase) != step:
                shown[phase] = step
                print(f"{phase}: {fraction:.0%}", file=sys.stderr)

        return text

    # -- reading ----------------------------------------------------------------------------
    @magic_arguments()
    @argument("id", type=int, help="item id")
    @argument("--json", action="store_true", help="print the item as JSON")
    @line_magic
    def memget(self, line: str) -> None:
        """Show one item (counts as an access).

        Example::

            %memget 42
        """
        args = parse_line(self.memget, line)
        with as_usage_errors():
            item = self.memory.get(args.id)
        if args.json:
            from dataclasses import asdict

            print(json.dumps(asdict(item), indent=2, default=str, ensure_ascii=False))
            return
        from nbmemory.jupyter.display import ItemView

        display(ItemView(item, links=self._links()))

    @magic_arguments()
    @argument("--json", action="store_true", help="print the figures as JSON")
    @line_magic
    def memstats(self, line: str) -> None:
        """Counts by kind and namespace, file size, model and index state; whether this kernel
        captures the cells it runs; which of the memory's tools agents in this Lab have (Jupyter
        AI), when the kernel's Jupyter server runs them.

        Example::

            %memstats
        """
        args = parse_line(self.memstats, line)
        with as_usage_errors():
            stats = self.memory.stats()
        stats["capture"] = self.cell_capture.status()
        others = [k for k in published(self.memory.path, "capture") if k.get("pid") != os.getpid()]
        if others:
            named = ", ".join(Path(k["notebook"]).name if k.get("notebook") else f"pid {k['pid']}" for k in others)
            stats["capture"] += f"; {len(others)} other kernel(s) capture into this memory: {named}"
        # What agents in this kernel's Lab may do, asked of the Jupyter server that started it.
        from nbmemory.jupyter.agents import agents_line, agents_status

        agents = agents_status()
        if agents_line(agents) is not None:
            stats["agents"] = agents if args.json else agents_line(agents)
        if args.json:
            print(json.dumps(stats, indent=2, default=str))
            return
        from nbmemory.jupyter.display import StatsView
        from nbmemory.progress import refine_line

        if "refine" in stats:
            # "refining: 2,140 of 11,345 passages" while the background refiner works.
            stats["refine"] = refine_line(stats["refine"])

        display(StatsView(stats))

    @magic_arguments()
    @argument("source", choices=["ipython-history"], help="what to import: ipython-history")
    @argument("path", nargs="?", help="the history file (default: this kernel's)")
    @argument("--ns", help="namespace (default: the magics' namespace)")
    @line_magic
    def memimport(self, line: str) -> None:
        """Import IPython's history: every session's inputs and recorded outputs, one item each,
        timed by their session's start; running it again imports only what is new.

        Example::

            %memimport ipython-history
            %memimport ipython-history ~/.ipython/profile_work/history.sqlite
        """
        args = parse_line(self.memimport, line)
        from nbmemory.ingest.history import import_ipython_history

        hist_file = getattr(getattr(self.shell, "history_manager", None), "hist_file", None)
        path = args.path or (str(hist_file) if hist_file and str(hist_file) != ":memory:" else None)
        with as_usage_errors():
            done = import_ipython_history(self.memory, path, namespace=args.ns or self.namespace)
        print(done.summary())

    @magic_arguments()
    @argument(
        "action",
        nargs="?",
        default="status",
        choices=["on", "off", "status", "forget"],
        help="on, off, status (the default) or forget",
    )
    @argument("--notebook", help="with forget: the runs of this notebook (a path or glob)")
    @argument("--this", action="store_true", help="with forget: the runs of this kernel's notebook")
    @argument("--since", help="with forget: runs since then: 2h, 30d or an ISO time")
    @argument("--until", help="with forget: runs until then: 2h, 30d or an ISO time")
    @argument("--all", action="store_true", help="with forget: every captured run")
    @line_magic
    def memcapture(self, line: str) -> None:
        """Capture of the cells this kernel runs: turn it on or off, see it, forget what it stored.

        With the extension loaded, each cell run here becomes an item of kind ``execution``
        (found by ``%memsearch ... --kind execution``): its source, its error and the last lines
        of its traceback, the start and end of its text output (no images, no widget state),
        the notebook and cell, and when it ran. Running an unchanged cell again moves its time
        instead of adding a copy. nbmemory's own cells and outputs are never captured; secrets
        are redacted before anything is stored; nothing leaves this machine. It is on unless
        ``NBMEMORY_CAPTURE=0`` (or ``MemoryMagics.capture = False``); ``%memcapture on`` turns it
        on in this kernel whatever the default. ``forget`` soft-deletes captured runs by
        notebook and time (``%memforget --undo`` brings them back).

        Examples::

            %memcapture off
            %memcapture status
            %memcapture forget --this --since 2h
            %memcapture forget --notebook ~/work/scratch.ipynb
        """
        args = parse_line(self.memcapture, line)
        narrowed = args.notebook or args.this or args.since or args.until or args.all
        if args.action != "forget" and narrowed:
            raise UsageError(
                "--notebook, --this, --since, --until and --all go with forget "
                "(e.g. %memcapture forget --this --since 2h)"
            )
        if args.action == "forget":
            self._forget_captured(args)
            return
        if args.action in ("on", "off"):
            self.capture = args.action == "on"
        print(
            f"capture {self.cell_capture.status()}" + ("" if self.capturing else "; %memcapture on starts it")
        )

    def _forget_captured(self, args: Any) -> None:
        if not (args.notebook or args.this or args.since or args.until or args.all):
            raise UsageError(
                "say which runs to forget: --this, --notebook PATH, --since WHEN, --until WHEN, "
                "or --all (e.g. %memcapture forget --this --since 2h)"
            )
        if args.all and (args.notebook or args.this or args.since or args.until):
            raise UsageError("--all forgets every captured run: give it alone")
        if args.notebook and args.this:
            raise UsageError("give --notebook PATH or --this, not both")
        path = str(Path(args.notebook).expanduser()) if args.notebook else None
        if args.this:
            from nbmemory.jupyter.notebook_context import current_notebook

            found = current_notebook(self.shell)
            if found is None:
                raise UsageError("this kernel's notebook is unknown: give --notebook PATH")
            path = str(found)
        self.cell_capture.flush()  # a cell already run is written before it is forgotten
        with as_usage_errors():
            ids = self.memory.forget(
                kind="execution", path=path, since=args.since, until=args.until, namespace=self.namespace
            )
        if ids:
            self.forgotten = list(ids)
        print(
            f"forgot {plural(len(ids), 'captured run')}"
            + (f": {ids_line(ids)} (undo: %memforget --undo)" if ids else "")
        )

    @magic_arguments()
    @argument("query", nargs="*", help="start with this search, the rest of the line verbatim")
    @magic_options(START_NS, START_KIND)
    @line_magic
    @no_var_expand
    def memexplore(self, line: str) -> MemoryExplorer:
        """The memory explorer widget: search as you type, filter, inspect, forget, pin.

        Results show the score and the rank each retriever gave, an expandable snippet, buttons to
        forget / pin / raise importance, the ranking trace and a diagnostics chart.

        Example::

            %memexplore token rotation --ns work
        """
        args = parse_query_line(self.memexplore, line, (START_NS, START_KIND))
        from nbmemory.jupyter.widgets import MemoryExplorer

        with as_usage_errors():
            return MemoryExplorer(
                self.memory,
                query=args.query,
                namespace=args.ns or self.namespace,
                kinds=list(args.kind or []),
                top_k=self.top_k,
                debounce=self.debounce,
                links=self._links(),
            )

    # Named explicitly: the method cannot be called `memory`, which is the Memory property.
    @line_magic("memory")  # type: ignore[arg-type]
    def memory_magic(self, line: str = "") -> Memory | SharedMemory:
        """The kernel's :class:`~nbmemory.Memory` object, for the Python API.

        Example::

            mem = %memory
            result = mem.search("token rotation", k=5)
        """
        if line.strip():
            raise UsageError(
                "%memory takes no arguments: use %config MemoryMagics.db = '...' to switch files"
            )
        return self.memory


def unsaved_cells(notebook: Path, cells_run: Iterable[tuple[float, str]]) -> list[str]:
    """Sources of cells run after ``notebook`` was last saved that the saved file does not hold.

    The kernel cannot see the editor, but a cell that ran after the last save must be in the
    file if the file is current; one that is not (the cell running ``%memindex`` included) means
    the editor holds changes the file lacks. Cells run before the save are no evidence: they may
    have been edited or deleted since.

    Parameters
    ----------
    notebook:
        The saved ``.ipynb`` file.
    cells_run:
        ``(time.time(), source)`` of each cell the kernel ran.
    """
    try:
        saved_at = notebook.stat().st_mtime
        cells = json.loads(notebook.read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError, AttributeError):
        return []
    saved = set()
    for cell in cells:
        source = cell.get("source", "") if isinstance(cell, dict) else ""
        saved.add(("".join(source) if isinstance(source, list) else str(source)).strip())
    return [source for at, source in cells_run if at > saved_at and source.strip() not in saved]


def load_ipython_extension(ipython: Any) -> None:
    """Register the magics (``%load_ext nbmemory``) and start capturing cells unless it is off."""
    magics = MemoryMagics(ipython)
    ipython.register_magics(magics)
    ipython.events.register("pre_run_cell", magics.note_cell)
    if magics.capturing:
        magics.cell_capture.start()
        display(CaptureNotice(magics.memory_path()))


def unload_ipython_extension(ipython: Any) -> None:
    """Close the Memory the magics opened (``%unload_ext nbmemory``)."""
    magics = ipython.magics_manager.registry.get("MemoryMagics")
    if magics is not None:
        magics.cell_capture.close()
        magics.close()
        with suppress(ValueError):
            ipython.events.unregister("pre_run_cell", magics.note_cell)
