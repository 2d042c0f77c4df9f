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


def test_the_search_table_shows_the_newest_run_of_each_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    import tools.docs_pages as docs_pages

    def run(day: str, sizes: dict[str, float]) -> dict[str, object]:
        times = {"p50": 1.0, "p95": 2.0}

        def size(work: float) -> dict[str, object]:
            return {
                "nbmemory_search_ms": {"search_work_precomputed_query_vector": {"p50": work, "p95": 2 * work},
                                       "e2e": times, "stages_p50_precomputed_query_vector": {"vector": work}},
                "sqlite_search_ms": {"retrieval_precomputed_query_vector": times, "e2e": times},
                "work_ratio_precomputed_p50": 0.5, "e2e_ratio_p50": 0.5, "loadavg_at_search": [0.5, 0.5, 0.5],
            }  # fmt: skip

        return {"started_utc": f"{day}T00:00:00+00:00", "machine": {"cpu_count": 2},
                "settings": {"measured_queries": 200, "k": 10, "synthetic_passages": True},
                "sizes": {n: size(work) for n, work in sizes.items()}}  # fmt: skip

    (tmp_path / "search.json").write_text(json.dumps(run("2026-11-26", {"10000": 7.25, "50000": 18.5})))
    (tmp_path / "search-50k.json").write_text(json.dumps(run("2026-11-28", {"50000": 9.75})))
    monkeypatch.setattr(docs_pages, "RESULTS", tmp_path)
    pages: dict[str, str | bytes] = {}
    table = docs_pages.search_section(pages)
    rows = [line for line in table.splitlines() if line.startswith("| 10,000") or line.startswith("| 50,000")]
    assert [row.split("|")[1].strip() for row in rows] == ["10,000", "50,000"]
    assert "**7.25**" in rows[0] and "`search.json`, 2026-11-26" in rows[0]
    assert "**9.75**" in rows[1] and "`search-50k.json`, 2026-11-28" in rows[1] and "18.5" not in rows[1]
    assert str(pages["benchmarks/search-stages.svg"]).lstrip().startswith("<svg")
