"""Both built-in notebooks execute end to end on a tiny slice, so they never rot.

The kernel is this virtual environment's Python, registered in a temporary prefix; every Jupyter
and IPython folder points into ``tmp_path`` (nothing is written to the home folder).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
kernelspec = pytest.importorskip("ipykernel.kernelspec")

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
KERNEL = "nbmemory-test"
# Each test executes a notebook in a real kernel.
pytestmark = pytest.mark.integration


@pytest.fixture
def jupyter_env(tmp_path: Path, tiny_beir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    prefix = tmp_path / "jupyter-prefix"
    kernelspec.install(kernel_name=KERNEL, prefix=str(prefix))
    for name, folder in {
        "JUPYTER_PATH": prefix / "share" / "jupyter",
        "JUPYTER_DATA_DIR": tmp_path / "jupyter-data",
        "JUPYTER_RUNTIME_DIR": tmp_path / "jupyter-runtime",
        "JUPYTER_CONFIG_DIR": tmp_path / "jupyter-config",
        "IPYTHONDIR": tmp_path / "ipython",
    }.items():
        monkeypatch.setenv(name, str(folder))
    monkeypatch.setenv("NBMEMORY_EVAL_DATA", str(tiny_beir))
    monkeypatch.setenv("NBMEMORY_EVAL_MODEL", "fake")
    monkeypatch.setenv("NBMEMORY_EVAL_LIMIT", "4")
    monkeypatch.setenv("NBMEMORY_THRESHOLDS_OUT", str(tmp_path / "thresholds.json"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


def _execute(name: str) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert any("parameters" in c.metadata.get("tags", []) for c in nb.cells), "no parameters cell"
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name=KERNEL, resources={"metadata": {"path": str(NOTEBOOKS)}}
    )
    client.execute()
    return nb


def _outputs(nb: nbformat.NotebookNode) -> list[dict[str, object]]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def _charts(nb: nbformat.NotebookNode) -> list[dict[str, object]]:
    """Chart outputs drawn offline: JupyterChart widgets whose spec has marks, and no CDN script."""
    for o in _outputs(nb):
        html = str(o.get("data", {}).get("text/html", ""))
        assert "vegaEmbed" not in html and "cdn.jsdelivr" not in html, "a chart loads vega from a CDN"
    # nbclient keeps each widget's last state in the notebook's metadata.
    states = (
        nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    )
    charts = []
    for o in _outputs(nb):
        view = o.get("data", {}).get("application/vnd.jupyter.widget-view+json")
        spec = states.get(view["model_id"], {}).get("state", {}).get("spec") if view else None
        if spec and (
            "mark" in spec or "layer" in spec or "hconcat" in spec or "vconcat" in spec or "spec" in spec
        ):
            charts.append(o)
    return charts


def test_beir_evaluation_notebook(jupyter_env: Path) -> None:
    nb = _execute("beir_evaluation.ipynb")
    outputs = _outputs(nb)
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert len(_charts(nb)) >= 3  # NDCG bars, wins/losses, per-query deltas


def test_relevance_distance_notebook(jupyter_env: Path) -> None:
    nb = _execute("relevance_distance_diagnostics.ipynb")
    assert len(_charts(nb)) >= 3
    thresholds = json.loads((jupyter_env / "thresholds.json").read_text(encoding="utf-8"))
    assert thresholds["fingerprint"] == "fake:eval:64"
    assert set(thresholds["distance_tiers"]) == {"high", "medium", "low"}
    assert "vector_sim_below" in thresholds["reject"]
