"""The progress display of ``%memindex`` in a notebook.

:class:`WidgetIndexJob` is an index run drawn as an ipywidgets progress bar, with a line that
gives the phase, counts, rate and time left, a Cancel button, and the report in place of the line
when the run ends. (In a terminal ``%memindex`` draws :func:`nbmemory.progress.index_bar`
instead.) ipywidgets is imported only when a widget is drawn.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from nbmemory.jobs import IndexJob
from nbmemory.jupyter.magic_lines import as_usage_errors

if TYPE_CHECKING:
    from nbmemory.api import IndexReport

__all__ = ["BAR_STEPS", "BAR_WORDS", "WidgetIndexJob"]

#: Steps of the notebook's progress bar, and the word beside it for each phase of a run.
BAR_STEPS = 1000
BAR_WORDS = {
    "queued": "starting",
    "opening the memory": "opening",
    "loading the model": "loading",
    "reading files": "reading",
    "embedding chunks": "embedding",
    "embedding passages": "embedding",
    "updating the search index": "updating",
}


class WidgetIndexJob(IndexJob):
    """An :class:`~nbmemory.jobs.IndexJob` drawn in the notebook: a progress bar of the work done,
    a line with the phase, counts, rate and time left, a Cancel button, and the report in place
    of the line when it ends."""

    def __init__(self, paths: list[str], namespace: str | None, use_widget: bool, note: str = "") -> None:
        super().__init__(paths, namespace, note=note, on_progress=self._draw, on_end=self._finish)
        self._bar: Any = None
        self.widget: Any = None
        if use_widget:
            import ipywidgets as widgets

            self._bar = widgets.IntProgress(value=0, min=0, max=BAR_STEPS, description="starting")
            self.label = widgets.HTML(self._line("starting"))
            self.cancel_button = widgets.Button(description="Cancel", icon="stop", button_style="warning")
            self.cancel_button.on_click(lambda _: self.cancel())
            self.widget = widgets.VBox([widgets.HBox([self._bar, self.cancel_button]), self.label])

    def run(self, memory: Any) -> IndexReport | None:
        """Index in the calling thread (:meth:`IndexJob.run`), a user's mistake as a UsageError."""
        with as_usage_errors():
            return super().run(memory)

    def _line(self, text: str) -> str:
        note = f"{html.escape(self.note)}<br>" if self.note else ""
        return f"<small>{note}{html.escape(text)}</small>"

    def _draw(self, job: IndexJob) -> None:
        if self._bar is not None:
            snap = job.snapshot
            self._bar.value = round(BAR_STEPS * snap["fraction"])
            self._bar.description = BAR_WORDS.get(snap["phase"], snap["phase"])
            self.label.value = self._line(snap["text"])

    def _finish(self, job: IndexJob) -> None:
        if self.widget is None:
            return
        self.cancel_button.disabled = True
        if self.report is not None:
            self._bar.value = self._bar.max
            self._bar.bar_style = "success"
            self._bar.description = "done"
            head = f"<b>{html.escape(self.snapshot['text'])}</b>\n"
        else:
            self._bar.bar_style = "danger" if self.error else "warning"
            self._bar.description = "failed" if self.error else "stopped"
            head = ""
        # The report, once: in the widget, not printed again under it.
        self.label.value = (
            f"<pre style='margin:0;white-space:pre-wrap'>{head}{html.escape(self.summary())}</pre>"
        )
