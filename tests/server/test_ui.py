"""The Memory sidebar in a real JupyterLab, driven with Playwright in Debian's Chromium.

Starts ``jupyter lab`` on a random port with a token, a temporary root (a notebook and a
markdown note) and a temporary ``NBMEMORY_HOME``; the server owns the memory and embeds with the
real bundled model. Skipped, with the reason, when ``/usr/bin/chromium`` or Playwright is missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import pytest

import nbmemory
from tests.conftest import SHARED_VECTORS

pytestmark = pytest.mark.ui

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
LABEXTENSION = Path(nbmemory.__file__).parent / "labextension"
#: Seconds a server has to stop on SIGTERM before it is sent SIGABRT.
STOP_WAIT = 10
XSS = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>"]

if not CHROMIUM.exists():
    pytest.skip(
        "UI tests need Debian's Chromium at /usr/bin/chromium (apt-get install -y chromium)",
        allow_module_level=True,
    )
sync_api = pytest.importorskip("playwright.sync_api", reason="UI tests need the playwright package")


@pytest.fixture
def jp_asyncio_loop() -> None:
    """Overrides pytest-jupyter's autouse event loop: Playwright's sync API runs its own."""
    return None


@pytest.fixture
def jp_server_cleanup() -> None:
    """Overrides pytest-jupyter's autouse cleanup: this module starts no in-process server."""
    return None


@dataclass
class Lab:
    url: str
    token: str
    root: Path

    def api(self, method: str, path: str, body: Any = None) -> Any:
        request = urllib.request.Request(
            f"{self.url}/nbmemory/{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.loads(response.read())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def deploy_cells() -> list[Any]:
    """The deploy runbook notebook's cells, which the UI tests search and open."""
    return [
        nbformat.v4.new_markdown_cell("# Deploy runbook\n\nSteps we follow for every release."),
        nbformat.v4.new_code_cell("import pandas as pd\nframe = pd.read_csv('releases.csv')"),
        nbformat.v4.new_markdown_cell("## Checks\n\nLook at the dashboards before and after."),
        nbformat.v4.new_code_cell("rotate_tokens(every='30d')  # token rotation schedule for the API keys"),
        nbformat.v4.new_code_cell("print('staging deploys need the VPN on')"),
    ]


def write_root(root: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [*deploy_cells(), nbformat.v4.new_code_cell("scratch = 'notes typed here'")]
    nbformat.write(nb, root / "deploy.ipynb")
    (root / "notes.md").write_text(
        "# Team notes\n\n## Databases\n\nThe analytics warehouse is DuckDB; backups run nightly.\n"
    )


@contextlib.contextmanager
def running_lab(base: Path, fill: Callable[[Path], None], vectors: Path | None = SHARED_VECTORS) -> Iterator[Lab]:
    """``jupyter lab`` on a free port with its root under ``base`` (filled by ``fill``), the root
    indexed and two hostile memories stored. Its server and kernels read document vectors from
    ``vectors`` (``NBMEMORY_VECTOR_CACHE``; None: every text embedded by the model)."""
    root = base / "root"
    root.mkdir()
    fill(root)
    # The extension is loaded from this checkout whatever is installed in the environment.
    extensions = base / "labextensions"
    extensions.mkdir()
    (extensions / "nbmemory").symlink_to(LABEXTENSION)
    token = secrets.token_hex(16)
    port = free_port()
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "NBMEMORY_HOME": str(base / "home"),
        "NBMEMORY_RUNTIME_DIR": str(base / "run"),
        "JUPYTER_CONFIG_DIR": str(base / "config"),
        "JUPYTER_RUNTIME_DIR": str(base / "jruntime"),
        "JUPYTERLAB_SETTINGS_DIR": str(base / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
        # A server that does not stop on SIGTERM is sent SIGABRT below: its threads' stacks land
        # in lab.log, so what held it is on record. (The Lab of test_ui_lab.py, after its tuning
        # run and page reloads, is held by an idle AnyIO worker thread, not by nbmemory's threads,
        # which are daemons; a server that stops does so in 1-4 s.)
        "PYTHONFAULTHANDLER": "1",
        "NBMEMORY_VECTOR_CACHE": str(vectors or ""),
    }
    # No news pop-up over the screenshots (and no fetch of the news feed).
    notification = (
        base / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    )
    notification.parent.mkdir(parents=True)
    notification.write_text(json.dumps({"fetchNews": "false"}))
    log = (base / "lab.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--ServerApp.jpserver_extensions={'nbmemory': True}",
            f"--LabApp.extra_labextensions_path={extensions}",
            "--LabApp.news_url=",
            # window.jupyterapp: tests run Lab commands directly.
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            # No network: no PyPI extension manager.
            "--LabApp.extension_manager=readonly",
            *(["--allow-root"] if os.getuid() == 0 else []),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=root,
    )
    lab = Lab(f"http://127.0.0.1:{port}", token, root)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                lab.api("GET", "index/none")
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("jupyter lab did not start:\n" + (base / "lab.log").read_text()[-4000:])
            time.sleep(0.5)
        # Index the root and store two hostile memories through the REST API.
        job = lab.api("POST", "index", {"paths": ["."]})
        while job["state"] in ("queued", "running"):
            time.sleep(0.5)
            job = lab.api("GET", f"index/{job['id']}")
        assert job["state"] == "done", job
        for text in XSS:
            lab.api("POST", "remember", {"text": text})
        yield lab
    finally:
        proc.terminate()
        try:
            proc.wait(STOP_WAIT)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
            print(f"jupyter lab did not stop within {STOP_WAIT} s of SIGTERM: its stacks are in {base / 'lab.log'}")
        log.close()


@contextlib.contextmanager
def lab_page(lab: Lab) -> Iterator[Any]:
    """A Chromium page on ``lab``, settled, with the Memory sidebar open."""
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        page.dialogs = []  # type: ignore[attr-defined]

        def answer(dialog: Any) -> None:
            # A reload with a notebook unsaved asks before leaving; dismissing it cancels the
            # reload. Any other dialog (alert, confirm) is page content: recorded and dismissed.
            if dialog.type == "beforeunload":
                dialog.accept()
            else:
                page.dialogs.append(dialog.message)  # type: ignore[attr-defined]
                dialog.dismiss()

        page.on("dialog", answer)
        # What the page asked of nbmemory's server, with the status (a 404 logs in the console).
        page.answers = []  # type: ignore[attr-defined]
        page.on(
            "response",
            lambda r: page.answers.append((r.status, r.url)) if "/nbmemory/" in r.url else None,  # type: ignore[attr-defined]
        )
        page.set_default_timeout(60_000)
        page.goto(f"{lab.url}/lab?token={lab.token}")
        # Wait until Lab has settled (the launcher takes focus when it opens).
        page.locator(".jp-Launcher").first.wait_for(state="visible")
        page.locator("#jupyterlab-splash").wait_for(state="detached")
        page.locator('.lm-TabBar-tab[data-id="nbmemory-sidebar"]').click()
        page.locator(".jp-nbmemory-query").wait_for(state="visible")
        yield page
        context.close()
        browser.close()


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with running_lab(tmp_path_factory.mktemp("lab"), write_root) as lab:
        yield lab


@pytest.fixture(scope="module")
def page(lab: Lab) -> Iterator[Any]:
    with lab_page(lab) as page:
        yield page


def search(page: Any, query: str) -> Any:
    box = page.locator(".jp-nbmemory-query")
    box.fill("")
    box.type(query, delay=20)  # keystrokes: the live, debounced search
    # The panel marks its results with the query they answer; wait for this query's.
    results = page.locator(".jp-nbmemory-results")
    status = page.locator(".jp-nbmemory-status")
    deadline = time.monotonic() + 60
    while results.get_attribute("data-query") != query:
        assert time.monotonic() < deadline, (
            f"no results for {query!r}; status: {status.inner_text()!r}, "
            f"answered: {results.get_attribute('data-query')!r}, box: {box.input_value()!r}"
        )
        page.wait_for_timeout(100)
    assert "jp-mod-error" not in (status.get_attribute("class") or ""), status.inner_text()
    return page.locator(".jp-nbmemory-hit")


def test_loading_the_page_asks_nothing_the_server_refuses(page: Any) -> None:
    # The sidebar asks for the server's tuning run on every load: none yet is an answer, not a 404.
    deadline = time.monotonic() + 30
    while not any(url.split("?")[0].endswith("/nbmemory/tune") for _, url in page.answers):
        assert time.monotonic() < deadline, page.answers
        page.wait_for_timeout(100)
    assert [(status, url) for status, url in page.answers if status >= 400] == []


def test_search_shows_results_with_ranks(page: Any) -> None:
    hits = search(page, "token rotation schedule")
    first = hits.first
    assert first.get_attribute("data-path") == "deploy.ipynb"
    assert first.get_attribute("data-cell-index") == "3"
    ranks = first.locator(".jp-nbmemory-ranks").inner_text()
    assert "bm25 #" in ranks and "vector #" in ranks
    # Cells count from 1 in what users read, as in JupyterLab's status bar.
    assert first.locator(".jp-nbmemory-location").inner_text() == "deploy.ipynb, cell 4"


def test_clicking_a_notebook_hit_opens_it_at_the_cell(page: Any) -> None:
    hits = search(page, "token rotation schedule")
    hits.first.locator(".jp-nbmemory-location").click()
    active = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell.jp-mod-active")
    sync_api.expect(active).to_contain_text("rotate_tokens", timeout=30_000)
    assert active.count() == 1
    # The notebook names no kernel: Lab asks for one; this test needs none.
    no_kernel = page.locator(".jp-Dialog button", has_text="No Kernel")
    no_kernel.wait_for(state="visible", timeout=30_000)
    no_kernel.click()
    no_kernel.wait_for(state="detached")
    assert page.locator(".lm-TabBar-tab.lm-mod-current", has_text="deploy.ipynb").count() >= 1


def test_remember_selection_then_search_finds_it(page: Any) -> None:
    # The notebook is open (previous test); type new text in the last cell and select it.
    editor = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").last.locator(".cm-content")
    editor.click()
    page.keyboard.press("Control+End")
    page.keyboard.type("\nquokka deploys need the blue vault key", delay=10)
    page.keyboard.press("Control+a")
    page.keyboard.press("Control+Shift+c")
    palette = page.locator(".lm-CommandPalette-input")
    palette.fill("Remember selection")
    page.locator(".lm-CommandPalette-item", has_text="Remember selection").first.click()
    page.locator(".Toastify__toast", has_text="Remembered #").wait_for(state="visible")

    hits = search(page, "quokka vault key")
    first = hits.first
    # The memory records the notebook and cell the selection came from.
    assert first.locator(".jp-nbmemory-location").inner_text() == "deploy.ipynb"
    assert first.get_attribute("data-path") == "deploy.ipynb"
    assert first.locator(".jp-nbmemory-heading").inner_text() == "deploy.ipynb, cell 6"
    assert "quokka deploys need the blue vault key" in first.locator(".jp-nbmemory-snippet").inner_text()


def test_stored_markup_renders_as_text(page: Any) -> None:
    hits = search(page, "alert(1)")
    texts = [hits.nth(i).locator(".jp-nbmemory-snippet").inner_text() for i in range(hits.count())]
    for text in XSS:
        assert text in texts
    results = page.locator(".jp-nbmemory-results")
    assert results.locator("script").count() == 0 and results.locator("img").count() == 0
    page.wait_for_timeout(500)
    assert page.dialogs == []  # type: ignore[attr-defined]
