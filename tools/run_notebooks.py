"""Run copies of the built-in notebooks top to bottom, unedited, in a real kernel (nbclient), and
check what a person would see: no error, nothing on stderr, and every chart cell (tagged ``chart``)
drawn offline as a JupyterChart with marks, a title and its one-line reading. Run with the Python
of the environment under test:

    <venv>/bin/python tools/run_notebooks.py FOLDER [NOTEBOOK ...]

FOLDER holds the copies (``nbmemory notebooks FOLDER``); each runs with FOLDER as its working
folder, and its executed form is written beside it as ``<name>.executed.ipynb``. The kernel is
this Python's, registered in ``FOLDER/.kernel``. Settings come from the environment
(``NBMEMORY_BEIR_DIR``, ``NBMEMORY_BEIR_FETCH=0``, ...), so the notebooks themselves are not edited.
Exits 1 when a check fails.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

KERNEL = "nbmemory-check"


class NotebookCheckFailed(Exception):
    pass


def outputs(nb: Any) -> list[dict[str, Any]]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def text(nb: Any) -> str:
    """Every output of the notebook as one JSON text, for checks that look for a sentence."""
    return json.dumps([c.get("outputs", []) for c in nb.cells])


def check_ran_cleanly(nb: Any) -> int:
    """Raise :class:`NotebookCheckFailed` unless the executed notebook ran as a person should see
    it; returns the number of charts drawn."""
    found = outputs(nb)
    errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in found if o.get("output_type") == "error"]
    if errors:
        raise NotebookCheckFailed(f"a cell failed: {errors[0]}")
    stderr = [o["text"] for o in found if o.get("name") == "stderr"]
    if stderr:
        raise NotebookCheckFailed(f"a cell wrote to stderr (shown like an error): {stderr[0][:300]!r}")
    for o in found:
        html = str(o.get("data", {}).get("text/html", ""))
        if "vegaEmbed" in html or "cdn.jsdelivr" in html:
            raise NotebookCheckFailed("a chart loads vega from a CDN: it does not draw offline")
    # nbclient keeps each widget's last state in the notebook's metadata.
    states = (
        nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    )
    charts = [c for c in nb.cells if "chart" in c.metadata.get("tags", [])]
    if not charts:
        raise NotebookCheckFailed("no cell is tagged chart")
    for cell in charts:
        views = [
            o["data"]["application/vnd.jupyter.widget-view+json"]["model_id"]
            for o in cell.get("outputs", [])
            if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
        ]
        specs = [states.get(v, {}).get("state", {}).get("spec") for v in views]
        spec = json.dumps(specs[0]) if specs and specs[0] else ""
        if '"mark"' not in spec:
            raise NotebookCheckFailed(f"chart cell {cell.get('id')} drew no chart")
        for needed in ('"title"', '"subtitle"'):
            if needed not in spec:
                raise NotebookCheckFailed(f"chart cell {cell.get('id')} has no {needed.strip(chr(34))}")
    return len(charts)


def execute(path: Path, kernel: str = KERNEL, timeout: int = 900) -> Any:
    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=timeout, kernel_name=kernel, resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()
    nbformat.write(nb, path.with_name(path.stem + ".executed.ipynb"))
    return nb


def main(argv: list[str]) -> int:
    import os

    from ipykernel import kernelspec

    folder = Path(argv[0]).resolve()
    names = argv[1:] or ["memory_diagnostics.ipynb", "beir_evaluation.ipynb"]
    prefix = folder / ".kernel"
    kernelspec.install(kernel_name=KERNEL, prefix=str(prefix))
    os.environ["JUPYTER_PATH"] = str(prefix / "share" / "jupyter")
    for name in names:
        try:
            nb = execute(folder / name)
            charts = check_ran_cleanly(nb)
        except NotebookCheckFailed as failed:
            print(f"{name}: FAILED: {failed}", flush=True)
            return 1
        lines = [
            line for o in outputs(nb) if o.get("name") == "stdout" for line in str(o["text"]).splitlines()
        ]
        said = [line for line in lines if "sample memory" in line or "sample corpus" in line]
        print(f"{name}: ran top to bottom, {charts} chart cells drew" + (f"; {said[0]}" if said else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
