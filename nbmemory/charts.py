"""Altair's renderer set for charts drawn with no network: the notebooks' charts
(:mod:`nbmemory.jupyter.plots`) and the evaluation notebooks' (:mod:`nbmemory.eval.diagnostics`)
share it, so it sits below both."""

from __future__ import annotations

import altair as alt

EMBED_OPTIONS = {"renderer": "svg"}


def use_offline_charts() -> None:
    """Draw Altair charts as interactive ``JupyterChart`` widgets with no network access.

    Altair's default renderer writes HTML that loads vega from a CDN: offline the output is empty.
    The ``jupyter`` renderer in offline mode draws the chart in an anywidget whose JavaScript
    vl-convert bundles locally, in JupyterLab and classic Notebook alike. A renderer the user
    enabled (``alt.renderers.enable("svg")``, ...) is left as it is.
    """
    if alt.renderers.active == "default":
        # SVG in the page (vega-embed's default is a canvas): sharp when zoomed, marks in the DOM.
        alt.renderers.enable("jupyter", offline=True, embed_options=EMBED_OPTIONS)
