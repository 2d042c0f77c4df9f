"""The sidebar's index progress and the Undo after a forget, in a real JupyterLab.

Uses the harness of :mod:`tests.server.test_ui` (Debian Chromium, a real ``jupyter lab``, offline,
the bundled model). A folder of notes written after the lab started is indexed from the sidebar's
Index row: the line under the bar must change while the chunks and passages are embedded, and say
``done — ...`` at the end. Screenshots go to ``$NBMEMORY_SHOTS`` (default ``/tmp/shots``).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.test_ui import (  # noqa: F401 (the two jp_ fixtures override pytest-jupyter's)
    Lab,
    jp_asyncio_loop,
    jp_server_cleanup,
    lab_page,
    running_lab,
    search,
    sync_api,
    write_root,
)

pytestmark = pytest.mark.ui

SHOTS = Path(os.environ.get("NBMEMORY_SHOTS", "/tmp/shots"))
FILES = 16
SECTIONS = 5
TOPICS = [
    "kafka consumer lag",
    "staging VPN gateway",
    "nightly DuckDB backups",
    "token rotation",
    "pager rota",
]


def write_corpus(folder: Path) -> None:
    """Notes whose sections are prose of several sentences: each chunk has passages to embed too."""
    folder.mkdir()
    for i in range(FILES):
        sections = []
        for j in range(SECTIONS):
            topic = TOPICS[(i + j) % len(TOPICS)]
            prose = " ".join(
                f"Runbook {i}.{j} step {n}: check the {topic} dashboard and write down what changed."
                for n in range(7)
            )
            sections.append(f"## Section {j} about {topic}\n\n{prose}\n")
        (folder / f"runbook-{i:02d}.md").write_text(f"# Runbook {i}\n\n" + "\n".join(sections))


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    # No shared vectors: the progress shown is the model's own, text after text.
    with running_lab(tmp_path_factory.mktemp("labprogress"), write_root, vectors=None) as lab:
        # Written after the lab indexed its root: the sidebar indexes it.
        write_corpus(lab.root / "corpus")
        yield lab


@pytest.fixture(scope="module")
def page(lab: Lab) -> Iterator[Any]:
    SHOTS.mkdir(parents=True, exist_ok=True)
    with lab_page(lab) as page:
        yield page


def test_index_from_the_sidebar_shows_progress_then_done(page: Any) -> None:
    status = page.locator(".jp-nbmemory-index-status")
    bar = page.locator(".jp-nbmemory-index-bar")
    page.locator(".jp-nbmemory-index-path").fill("corpus")
    page.locator(".jp-nbmemory-index-button").click()
    seen: list[str] = []
    shot = False
    deadline = time.monotonic() + 540
    while status.get_attribute("data-phase") != "done":
        assert time.monotonic() < deadline, f"the run did not end; lines seen: {seen}"
        assert status.get_attribute("data-phase") != "error", status.inner_text()
        line = status.inner_text()
        if not seen or seen[-1] != line:
            seen.append(line)
        if not shot and line.startswith("embedding") and "left" in line:
            page.locator("#nbmemory-sidebar").screenshot(path=str(SHOTS / "index-progress.png"))
            shot = True
        page.wait_for_timeout(100)
    final = status.inner_text()
    page.locator("#nbmemory-sidebar").screenshot(path=str(SHOTS / "index-done.png"))
    embedding = [line for line in seen if line.startswith("embedding")]
    # The line moves while the model works: counts, rate and time left, chunks then passages.
    assert len(embedding) >= 3, seen
    assert any(
        re.match(r"embedding chunks \d+/\d+ · .*chunks/s · about .+ left", line) for line in embedding
    ), seen
    assert any(line.startswith("embedding passages") for line in embedding), seen
    assert re.fullmatch(rf"done — {FILES} files, {FILES * SECTIONS} chunks in \d+\.\d s", final), final
    assert bar.evaluate("b => b.value") == 1
    assert page.locator(".jp-nbmemory-index-button").is_enabled()


def test_forget_then_undo_brings_the_hit_back(page: Any, lab: Lab) -> None:
    lab.api("POST", "remember", {"text": "The pelican failover drill runs every second Tuesday."})
    query = "pelican failover drill"
    hits = search(page, query)
    first = hits.first
    item_id = first.get_attribute("data-id")
    first.locator(".jp-nbmemory-forget").click()
    undo_row = page.locator(f".jp-nbmemory-undo-row[data-id='{item_id}']")
    sync_api.expect(undo_row).to_be_visible(timeout=10_000)
    sync_api.expect(undo_row).to_contain_text(f"Forgot #{item_id} · (remembered)")
    assert page.locator(f".jp-nbmemory-hit[data-id='{item_id}']").count() == 0
    page.locator("#nbmemory-sidebar").screenshot(path=str(SHOTS / "forget-undo.png"))
    # Forgotten in the server too: a search there misses it.
    assert item_id not in [str(h["id"]) for h in lab.api("GET", "search?q=pelican+failover+drill")["hits"]]
    undo_row.locator(".jp-nbmemory-undo").click()
    status = page.locator(".jp-nbmemory-status")
    sync_api.expect(status).to_contain_text(f"Restored #{item_id}", timeout=30_000)
    sync_api.expect(undo_row).to_have_count(0)
    # A new search finds it again.
    hits = search(page, "pelican drill every second Tuesday")
    assert item_id in [hits.nth(i).get_attribute("data-id") for i in range(hits.count())]
    page.locator("#nbmemory-sidebar").screenshot(path=str(SHOTS / "forget-undone.png"))
