"""Capture of executed cells in a real kernel (nbclient), found from another process.

The test process owns the memory (``connect`` with a fake embedder, so that embedding costs
nothing) and the kernel is its client, as a kernel is of the Jupyter server's memory. Cells carry
their cell id in the request's metadata, as JupyterLab sends it, and the kernel knows its
notebook from ``JPY_SESSION_NAME``, as the Jupyter server tells it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nbformat
import pytest

from nbmemory.embed import FakeEmbedder
from nbmemory.remote import connect
from nbmemory.remote.shared import SharedMemory

pytestmark = pytest.mark.integration

KERNEL = "nbmemory-test"
#: The wait-up-to of the issue: a run is found by a search this long after its cell finished.
FOUND_WITHIN = 2.0


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A kernelspec for this venv's Python and every Jupyter, IPython and nbmemory folder in
    ``tmp_path`` (nothing is written to ~), capture on."""
    from ipykernel import kernelspec

    prefix = tmp_path / "jupyter"
    kernelspec.install(kernel_name=KERNEL, prefix=str(prefix))
    for name, folder in {
        "JUPYTER_PATH": prefix / "share" / "jupyter",
        "JUPYTER_DATA_DIR": tmp_path / "jupyter-data",
        "JUPYTER_RUNTIME_DIR": tmp_path / "jupyter-runtime",
        "JUPYTER_CONFIG_DIR": tmp_path / "jupyter-config",
        "IPYTHONDIR": tmp_path / "ipython",
        "NBMEMORY_HOME": tmp_path / "home",
    }.items():
        monkeypatch.setenv(name, str(folder))
    monkeypatch.setenv("NBMEMORY_CAPTURE", "1")
    return tmp_path / "home"


@pytest.fixture
def owner(home: Path) -> Iterator[SharedMemory]:
    """The memory's owner, in this process: the kernel becomes its client."""
    memory = connect(home / "memory.duckdb", embedder=FakeEmbedder(dim=32))
    yield memory
    memory.close()


class Notebook:
    """A saved notebook run cell by cell in a live kernel, each request carrying its cell's id."""

    def __init__(self, path: Path, sources: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
        from nbclient import NotebookClient

        self.path = path
        self.nb = nbformat.v4.new_notebook()
        self.nb.cells = [nbformat.v4.new_code_cell(source) for source in sources]
        nbformat.write(self.nb, path)
        # What the Jupyter server tells a kernel about its notebook.
        monkeypatch.setenv("JPY_SESSION_NAME", str(path))
        self.client = NotebookClient(
            self.nb,
            kernel_name=KERNEL,
            timeout=120,
            allow_errors=True,
            resources={"metadata": {"path": str(path.parent)}},
        )
        self._cell_id: str | None = None

    def __enter__(self) -> Notebook:
        self._kernel = self.client.setup_kernel()
        self._kernel.__enter__()
        session = self.client.kc.session
        message = session.msg

        # JupyterLab puts the cell's id in the execute request's metadata; nbclient does not.
        def with_cell_id(
            msg_type: str, content: Any = None, parent: Any = None, header: Any = None, metadata: Any = None
        ) -> Any:
            if msg_type == "execute_request" and self._cell_id is not None:
                metadata = {**(metadata or {}), "cellId": self._cell_id}
            return message(msg_type, content, parent, header, metadata)

        session.msg = with_cell_id
        return self

    def __exit__(self, *exc: object) -> None:
        self._kernel.__exit__(*exc)

    def run(self, index: int) -> Any:
        """Run cell ``index``; its outputs."""
        cell = self.nb.cells[index]
        self._cell_id = cell.id
        self.client.execute_cell(cell, index)
        return cell.outputs

    def cell(self, index: int) -> Any:
        return self.nb.cells[index]


def wait_for(find: Callable[[], Any], seconds: float) -> Any:
    """``find()`` until it gives something or ``seconds`` have passed; what it gave last."""
    deadline = time.monotonic() + seconds
    while True:
        found = find()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def utc_now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def executions(memory: SharedMemory, query: str) -> list[Any]:
    return [h for h in memory.search(query, k=10, kind="execution").hits if query.split()[0] in h.text]


def test_a_failed_cell_is_found_from_another_process_and_a_rerun_moves_it(
    owner: SharedMemory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = 'raise ValueError("zorblax-quux failed")'
    with Notebook(tmp_path / "analysis.ipynb", ["%load_ext nbmemory", "x = 1", failing], monkeypatch) as nb:
        notice = str(nb.run(0))
        assert "remembered in" in notice and "%memcapture off" in notice
        nb.run(1)
        before = utc_now()
        outputs = nb.run(2)
        finished = utc_now()
        assert outputs[-1]["ename"] == "ValueError"
        hits = wait_for(lambda: executions(owner, "zorblax-quux failed"), FOUND_WITHIN)
        assert len(hits) == 1, "the failed cell was not found within 2 s of its end"
        hit = hits[0]
        assert hit.kind == "execution" and hit.heading == "failed: ValueError: zorblax-quux failed"
        assert hit.text.startswith(failing) and "# Error: ValueError: zorblax-quux failed" in hit.text
        assert (hit.source, hit.cell_id, hit.cell_index) == (str(nb.path), nb.cell(2).id, 2)
        assert hit.location == f"{nb.path}#cell 3"
        assert before <= hit.event_at <= finished

        for _ in range(20):
            last = utc_now()
            nb.run(2)
        moved = wait_for(
            lambda: [h for h in executions(owner, "zorblax-quux failed") if h.event_at >= last], 10.0
        )
        assert moved, "the last run's time was not recorded"
    rows = owner.memory.db.fetchall(
        "SELECT id, event_at FROM chunks WHERE kind = 'execution' AND deleted_at IS NULL AND text LIKE ?",
        [f"{failing}%"],
    )
    assert [r[0] for r in rows] == [hit.id], "21 runs of one cell are one item"
    assert rows[0][1] >= last


def test_nbmemory_cells_secrets_big_output_and_the_switch(
    owner: SharedMemory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "ghp_" + "Zq7Xw2Lp9Kd4Mv8Nb3Hc6Jf1Rt5Ys0Ua2Ie7"
    cells = [
        "%load_ext nbmemory",
        "%memsearch zorblax quux glimmerquart",
        f'token = "{secret}"\nprint("glimmerquart token set")',
        'print("bigoutputword")\nprint("A" * 5_000_000)',
        "%memcapture off",
        'print("offword zyxwvut")',
        "%memcapture on",
        'print("onword qqqxyz")',
        "%memcapture status",
    ]
    with Notebook(tmp_path / "scratch.ipynb", cells, monkeypatch) as nb:
        for i in range(len(cells)):
            nb.run(i)
        status = "".join(o.get("text", "") for o in nb.cell(8).outputs)
        assert "capture on in this kernel" in status
        assert wait_for(lambda: executions(owner, "onword qqqxyz"), 10.0), "the cell after `on` was captured"

    db = owner.memory.db
    stored = [str(t) for (t,) in db.fetchall("SELECT text FROM chunks WHERE kind = 'execution'")]
    assert not [t for t in stored if "%mem" in t], "nbmemory's own cells are not captured"
    assert not [t for t in stored if "offword" in t], "%memcapture off stopped capture"
    token = [t for t in stored if "glimmerquart token set" in t]
    assert len(token) == 1 and secret not in token[0] and "[REDACTED:github-token]" in token[0]
    big = [t for t in stored if t.startswith('print("bigoutputword")')]
    assert len(big) == 1 and len(big[0]) < 5_000
    assert "bigoutputword" in big[0] and re.search(
        r"\[output truncated: 5,000,01\d characters in all", big[0]
    )


def test_nbmemory_capture_0_keeps_it_off(
    owner: SharedMemory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NBMEMORY_CAPTURE", "0")
    cells = ["%load_ext nbmemory", 'print("quietword plonk")', "%memcapture status"]
    with Notebook(tmp_path / "quiet.ipynb", cells, monkeypatch) as nb:
        notice = str(nb.run(0))
        nb.run(1)
        status = "".join(o.get("text", "") for o in nb.run(2))
    assert "remembered in" not in notice
    assert "capture off in this kernel" in status
    assert owner.memory.db.fetchall("SELECT count(*) FROM chunks WHERE kind = 'execution'") == [(0,)]
