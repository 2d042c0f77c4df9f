"""The documentation site: `make docs` builds it offline with every warning an error and every
internal link and anchor resolved; its generated pages come from the code and bench/results."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.docs_pages import generate, rst_to_markdown

REPO = Path(__file__).resolve().parents[1]


def test_numpy_docstrings_become_markdown() -> None:
    doc = """Search.

    Parameters
    ----------
    query : str
        What to look for, see :meth:`Memory.search` and ``k``.
    """
    assert (
        rst_to_markdown(doc)
        == "Search.\n\n**Parameters**\n\n- `query` (str): What to look for, see `search` and `k`.\n"
    )


def test_generated_pages_cover_every_front_end() -> None:
    pages = generate()
    from nbmemory.api import API_METHODS
    from nbmemory.cli.main import build_parser

    assert all(f"## `{name}`" in pages["reference/api.md"] for name in API_METHODS)
    assert (
        "## `%memsearch`" in pages["reference/magics.md"]
        and "## `%%remember`" in pages["reference/magics.md"]
    )
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert all(f"## `nbmemory {name}`" in pages["reference/cli.md"] for name in commands)
    assert "## `search`" in pages["reference/mcp.md"] and '"properties"' in pages["reference/mcp.md"]
    assert str(pages["benchmarks/search-stages.svg"]).lstrip().startswith("<svg")


@pytest.mark.integration
def test_site_builds_strict(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "reference" / "mcp.html").is_file()
    assert (tmp_path / "site" / "benchmarks" / "results.html").is_file()
