"""The built-in notebooks as a person gets them: ``nbmemory notebooks`` copies them, and the copies
run top to bottom unedited in a real kernel (nbclient) with the bundled model, the diagnostics one
on the bundled sample memory, the BEIR one on a small cut of real BEIR collections, and again with
no BEIR data at all (the sample corpus's judged queries). Every chart cell draws offline, nothing
goes to stderr, no network is used, and live search's thresholds and the memory's search log are
as they were.

The kernel is this virtual environment's Python, registered in a temporary prefix; every Jupyter,
IPython and nbmemory folder points into ``tmp_path``. The copy rules of ``nbmemory notebooks`` are
checked here too (no kernel).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nbmemory.jupyter.builtin_notebooks import NOTEBOOKS, cells_digest, copy_all, unchanged
from tests.conftest import SHARED_VECTORS
from tests.notebooks.beir_subset import SHARED_BEIR, cut
from tools import run_notebooks

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
kernelspec = pytest.importorskip("ipykernel.kernelspec")

KERNEL = "nbmemory-test"


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nbmemory.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )


# -- copying ----------------------------------------------------------------------------------------


def test_the_shipped_notebooks_are_clean_and_have_a_parameters_cell() -> None:
    for nb in NOTEBOOKS:
        notebook = nbformat.read(nb.path, as_version=4)
        nbformat.validate(notebook)
        assert not [c for c in notebook.cells if c.cell_type == "code" and (c.outputs or c.execution_count)]
        assert "parameters" in notebook.cells[1].metadata.get("tags", []), nb.file
        # No path of this project's development machines.
        assert "shared/datasets" not in nb.path.read_text(encoding="utf-8"), nb.file


def test_nbmemory_notebooks_copies_and_never_overwrites_a_changed_copy(tmp_path: Path) -> None:
    done = cli("notebooks", str(tmp_path))
    assert done.returncode == 0, done.stderr
    diagnostics, beir = (tmp_path / nb.file for nb in NOTEBOOKS)
    assert "copied" in done.stdout and diagnostics.is_file() and beir.is_file()
    assert unchanged(diagnostics) and unchanged(beir)
    # An older version, unchanged since copied, is updated; an edited copy is kept as it is.
    old = json.loads(beir.read_text())
    old["cells"][0]["source"] = "# an older version"
    old["metadata"]["nbmemory"]["cells"] = cells_digest(old)
    beir.write_text(json.dumps(old))
    edited = diagnostics.read_text().replace("Memory diagnostics", "My own diagnostics")
    diagnostics.write_text(edited)
    again = cli("notebooks", str(tmp_path))
    assert again.returncode == 0, again.stderr
    assert "updated to this version" in again.stdout and "kept as it is" in again.stdout
    assert diagnostics.read_text() == edited
    assert "an older version" not in beir.read_text()
    # A copy that ran (outputs) counts as changed too.
    ran = json.loads(beir.read_text())
    ran["cells"][2]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "hello"}]
    beir.write_text(json.dumps(ran))
    assert [c.action for c in copy_all(tmp_path)] == ["kept", "kept"]
    fresh = cli("notebooks", "--fresh", str(tmp_path))
    assert fresh.returncode == 0 and (tmp_path / "memory_diagnostics-1.ipynb").is_file()
    assert (tmp_path / "beir_evaluation-1.ipynb").is_file()
    missing = cli("notebooks", str(tmp_path / "nope"))
    assert missing.returncode == 1 and "no such folder" in missing.stderr


# -- running them -------------------------------------------------------------------------------------


@pytest.fixture
def jupyter_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    prefix = tmp_path / "jupyter-prefix"
    kernelspec.install(kernel_name=KERNEL, prefix=str(prefix))
    for name, folder in {
        "JUPYTER_PATH": prefix / "share" / "jupyter",
        "JUPYTER_DATA_DIR": tmp_path / "jupyter-data",
        "JUPYTER_RUNTIME_DIR": tmp_path / "jupyter-runtime",
        "JUPYTER_CONFIG_DIR": tmp_path / "jupyter-config",
        "IPYTHONDIR": tmp_path / "ipython",
        "NBMEMORY_HOME": tmp_path / "home",
        "NBMEMORY_CACHE": tmp_path / "cache",
    }.items():
        monkeypatch.setenv(name, str(folder))
    monkeypatch.setenv("NBMEMORY_VECTOR_CACHE", str(SHARED_VECTORS))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("NBMEMORY_BEIR_FETCH", "0")
    monkeypatch.setenv("NBMEMORY_IDLE_SECONDS", "0")
    work = tmp_path / "work"
    work.mkdir()
    assert cli("notebooks", str(work)).returncode == 0
    return work


def execute(path: Path) -> Any:
    nb = run_notebooks.execute(path, kernel=KERNEL)
    assert run_notebooks.check_ran_cleanly(nb) >= 5
    return nb


def thresholds_files(cache: Path) -> list[Path]:
    return (
        sorted((cache / "eval" / "thresholds").glob("*")) if (cache / "eval" / "thresholds").exists() else []
    )


@pytest.mark.integration
@pytest.mark.model
def test_diagnostics_notebook_runs_unedited_on_the_sample_memory(jupyter_env: Path, tmp_path: Path) -> None:
    nb = execute(jupyter_env / "memory_diagnostics.ipynb")
    text = json.dumps(nb.cells[2].outputs)
    assert "showing the bundled sample memory" in text and "does not exist yet" in text
    queries = json.dumps([c.get("outputs", []) for c in nb.cells])
    assert "probe queries made from the memory's items" in queries  # a fresh memory has no search log
    assert "8 judged queries" in queries  # the sample corpus's built-in ones
    assert not (tmp_path / "home" / "memory.duckdb").exists()  # the default memory was not created
    assert thresholds_files(tmp_path / "cache") == []
    # Its searches were not logged: the sample memory's search log is empty.
    from nbmemory import Memory

    with Memory(tmp_path / "home" / "demo.duckdb") as mem:
        assert mem.stats()["searches"] == 0


@pytest.mark.integration
@pytest.mark.model
@pytest.mark.skipif(not SHARED_BEIR.is_dir(), reason=f"no BEIR collections at {SHARED_BEIR}")
def test_beir_notebook_runs_a_subset_then_the_sets_it_is_pointed_at(
    jupyter_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    beir = tmp_path / "beir"
    for name in ("scifact", "nfcorpus"):
        cut(SHARED_BEIR / name, beir, queries=8, docs=80)
    monkeypatch.setenv("NBMEMORY_BEIR_DIR", str(beir))
    monkeypatch.setenv("NBMEMORY_BEIR_SUBSET_QUERIES", "4")
    monkeypatch.setenv("NBMEMORY_BEIR_SUBSET_DOCS", "40")
    nb = execute(jupyter_env / "beir_evaluation.ipynb")
    out = json.dumps([c.get("outputs", []) for c in nb.cells])
    assert "embedding on the CPU" in out or "embedding on the GPU" in out
    assert "scifact: 40 documents, 4 test queries" in out and "scifact: 80 documents, 8 test queries" in out
    assert "of embedding for" in out  # the estimate, said before the embedding starts
    # The estimate and the progress bar covered every text: the harness had none left to embed.
    assert not re.search(r"embedding \d+ texts \(\d+ cached\) on", out)
    assert "not adopted" in out and thresholds_files(tmp_path / "cache") == []


@pytest.mark.integration
@pytest.mark.model
def test_beir_notebook_without_beir_data_says_where_to_put_it_and_runs_on_the_sample(
    jupyter_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NBMEMORY_BEIR_DIR", str(tmp_path / "no-beir-here"))
    nb = execute(jupyter_env / "beir_evaluation.ipynb")
    out = json.dumps([c.get("outputs", []) for c in nb.cells])
    assert "scifact: not found at" in out and "scifact.zip and unzip it" in out
    assert "running on the bundled sample corpus's built-in judged queries instead" in out
    assert "sample-corpus" in out
    assert os.environ["NBMEMORY_BEIR_FETCH"] == "0"


def test_the_run_check_refuses_an_error_stderr_and_a_chart_cell_that_drew_nothing() -> None:
    def notebook(outputs: list[dict[str, Any]], tags: list[str]) -> Any:
        nb = nbformat.v4.new_notebook()
        cell = nbformat.v4.new_code_cell("charts.score_chart(hits)", metadata={"tags": tags})
        cell.outputs = [nbformat.from_dict(o) for o in outputs]
        nb.cells = [cell]
        return nb

    error = {
        "output_type": "error",
        "ename": "ModuleNotFoundError",
        "evalue": "No module named 'pandas'",
        "traceback": [],
    }
    pink = {"output_type": "stream", "name": "stderr", "text": "embedding 1024 texts"}
    for outputs, tags, words in (
        ([error], ["chart"], "No module named 'pandas'"),
        ([pink], ["chart"], "stderr"),
        ([], ["chart"], "drew no chart"),
        ([], [], "no cell is tagged chart"),
    ):
        with pytest.raises(run_notebooks.NotebookCheckFailed, match=words):
            run_notebooks.check_ran_cleanly(notebook(outputs, tags))


def test_adopting_thresholds_changes_live_search_only_when_asked_and_undo_restores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nbmemory.eval import diagnostics
    from nbmemory.search.reject import bundled_thresholds_path, thresholds_for

    monkeypatch.setenv("NBMEMORY_CACHE", str(tmp_path / "cache"))
    shipped = next(bundled_thresholds_path("x").parent.glob("*.json"))
    fingerprint = shipped.stem
    before = thresholds_for(fingerprint)
    assert before is not None
    derived = {
        "model": "m",
        "fingerprint": fingerprint,
        "distance_tiers": {"high": 0.1, "medium": 0.2, "low": 0.3},
    }
    table = diagnostics.proposed_thresholds(derived)
    assert table.columns == ["tier", "in use (shipped)", "derived here"]
    assert thresholds_for(fingerprint) == before  # deriving and showing changed nothing
    path = diagnostics.adopt_thresholds(derived)
    after = thresholds_for(fingerprint)
    assert after is not None and after.tiers["low"] == 0.3
    # The no-answer levels in use are kept: a BEIR run has none of its own.
    assert json.loads(path.read_text())["reject"] == json.loads(shipped.read_text())["reject"]
    assert diagnostics.proposed_thresholds(derived).columns[1] == "in use (adopted by you)"
    diagnostics.adopt_thresholds({**derived, "distance_tiers": {"high": 0.15, "medium": 0.25, "low": 0.35}})
    assert json.loads(path.with_name(path.name + ".previous").read_text())["distance_tiers"]["low"] == 0.3
    assert diagnostics.undo_adopted_thresholds(fingerprint) == path and not path.exists()
    assert thresholds_for(fingerprint) == before
    assert diagnostics.undo_adopted_thresholds(fingerprint) is None


# -- the diagnostics' parts, on a real memory file with a fake embedder ----------------------------


def test_judged_queries_are_matched_by_path_ending_or_id_and_bad_lines_are_named(tmp_path: Path) -> None:
    from nbmemory.errors import BadFileError, NotFoundError
    from nbmemory.eval import memory_diagnostics as md

    good = tmp_path / "judged.jsonl"
    good.write_text('{"query": "vpn", "relevant": ["notes/vpn.md", 7]}\n\n{"query": "db", "relevant": []}\n')
    first, second = md.read_judgments(good)
    hit = type("H", (), {"id": 3, "source": "/home/me/notes/vpn.md"})()
    assert first.relevant(hit) and not second.relevant(hit)
    assert first.relevant(type("H", (), {"id": 7, "source": None})())
    assert not first.relevant(type("H", (), {"id": 3, "source": "/home/me/notes/avpn.md"})())
    for text, words in (
        ('{"query": "x"}\n', "line 1: expected"),
        ('{"query": "x", "relevant": []}\nnot json\n', "line 2 is not JSON"),
    ):
        bad = tmp_path / "bad.jsonl"
        bad.write_text(text)
        with pytest.raises(BadFileError, match=words):
            md.read_judgments(bad)
    with pytest.raises(NotFoundError, match="judged queries file"):
        md.read_judgments(tmp_path / "missing.jsonl")
    with pytest.raises(NotFoundError, match=r"memory file .* not found"):
        md.open_memory(tmp_path / "no-such.duckdb")


def test_the_search_log_is_read_by_its_owner_and_a_client_gets_probes(tmp_path: Path) -> None:
    from nbmemory.embed import FakeEmbedder
    from nbmemory.eval import memory_diagnostics as md
    from nbmemory.remote import connect

    path = tmp_path / "m.duckdb"
    owner = connect(path, embedder=FakeEmbedder(dim=32))
    client = None
    try:
        owner.remember_many(
            ["the staging database is db-stg-12", "kafka lag pages the on-call engineer"],
            headings=["Staging database host", "Kafka lag alerts"],
            sources=["notes/db.md", "notes/kafka.md"],
        )
        owner.search("staging database")
        owner.search("kafka lag")
        mine = md.Opened(owner, path, False, None, "")
        assert md.logged_queries(owner) == ["kafka lag", "staging database"]
        queries = md.queries_to_check(mine, count=10)
        assert queries.filter(queries["origin"] == "search log")["query"].to_list() == [
            "kafka lag",
            "staging database",
        ]
        hits, verdicts = md.run_queries(mine, queries, k=5)
        assert md.logged_queries(owner) == ["kafka lag", "staging database"]  # run_queries logged nothing
        assert set(verdicts["origin"]) == {"search log", "off-topic probe"} and hits.height > 0
        client = connect(path, allow_owner=False)
        assert md.logged_queries(client) is None
        probes = md.queries_to_check(md.Opened(client, path, False, None, ""), count=10)
        assert set(probes.filter(probes["origin"] == "probe from an item")["query"]) == {
            "Staging database host",
            "Kafka lag alerts",
        }
    finally:
        if client is not None:
            client.close()
        owner.close()
