"""One notebook cell, one number: the command line (text and ``--json``), REST and MCP name a
notebook hit's cell as JupyterLab, the table, the sidebar and the explorer do, counting from 1.
``cell_index`` keeps counting from 0; ``cell_number`` is the cell as Lab numbers it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest

from nbmemory import Memory
from nbmemory.cli import main
from nbmemory.embed import FakeEmbedder
from nbmemory.mcp import MemoryTools, Policy
from tests.server.test_handlers import call, payload, wait_job

# The token cell is the notebook's second: Lab's status bar says "Cell 2/3" on it.
CELLS = [
    nbformat.v4.new_markdown_cell("# Deploy notes"),
    nbformat.v4.new_code_cell("rotate_tokens(every='30d')  # token rotation schedule"),
    nbformat.v4.new_code_cell("print('vpn required for staging deploys')"),
]
QUERY = "token rotation schedule"


def write_notebook(path: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = CELLS
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def test_cli_and_mcp_name_the_cell_as_lab_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    notebook = write_notebook(tmp_path / "notes" / "deploy.ipynb")
    monkeypatch.setenv("NBMEMORY_IDLE_SECONDS", "0")
    monkeypatch.setenv("NBMEMORY_RUNTIME_DIR", str(tmp_path / "run"))
    cli = sys.modules["nbmemory.cli.main"]
    real = cli._memory  # type: ignore[attr-defined]
    monkeypatch.setattr(cli, "_memory", lambda args, **kw: real(args, embedder=FakeEmbedder(dim=32), **kw))
    home = ["-q", "--home", str(tmp_path / "home")]

    def run(*args: str) -> str:
        capsys.readouterr()
        assert main([*home, *args]) == 0
        return capsys.readouterr().out

    run("index", str(notebook))
    text = run("search", QUERY, "--kind", "notebook", "-k", "1")
    assert f"{notebook}#cell 2  (" in text.splitlines()[0], text
    hit = json.loads(run("search", QUERY, "--kind", "notebook", "-k", "1", "--json"))["hits"][0]
    assert "rotate_tokens" in hit["text"]
    assert hit["location"] == f"{notebook}#cell 2"
    assert hit["cell_index"] == 1 and hit["cell_number"] == 2
    assert run("get", str(hit["id"])).startswith(f"#{hit['id']} {notebook}#cell 2 ")
    item = json.loads(run("get", str(hit["id"]), "--json"))
    assert item["location"] == f"{notebook}#cell 2" and item["cell_number"] == 2

    path = tmp_path / "home" / "memory.duckdb"
    tools = MemoryTools(lambda: Memory(path, embedder=FakeEmbedder(dim=32)), Policy())  # type: ignore[arg-type,return-value]
    try:
        found = tools.search(QUERY, k=1, kind=["notebook"])["hits"][0]
        assert found["location"] == f"{notebook}#cell 2" and found["cell_number"] == 2
        got = tools.get(found["id"])
        assert got["location"] == f"{notebook}#cell 2" and got["cell_number"] == 2
        forget = tools.forget(query=QUERY, k=1)  # a dry run: the candidates it names
        assert forget["candidates"][0]["location"] == f"{notebook}#cell 2"
    finally:
        tools.close()


async def test_rest_names_the_cell_as_lab_does(jp_fetch: Any, jp_root_dir: Path) -> None:
    write_notebook(jp_root_dir / "notes" / "deploy.ipynb")
    job = payload(await call(jp_fetch, "POST", "index", body={"path": "notes/deploy.ipynb"}))
    assert (await wait_job(jp_fetch, job["id"]))["state"] == "done"
    hit = payload(await call(jp_fetch, "GET", "search", q=QUERY, kind="notebook", k="1"))["hits"][0]
    assert "rotate_tokens" in hit["text"]
    assert hit["location"].endswith("notes/deploy.ipynb#cell 2")
    assert hit["cell_index"] == 1 and hit["cell_number"] == 2
    item = payload(await call(jp_fetch, "GET", "items", str(hit["id"])))
    assert item["location"] == hit["location"] and item["cell_number"] == 2
