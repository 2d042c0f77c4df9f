"""Links and the sidebar in a real JupyterLab: hits open in this Lab at their line or cell.

Uses the harness of :mod:`tests.server.test_ui` (Debian Chromium, a real ``jupyter lab``, offline)
with a root that holds a long markdown note, a notebook, and a notebook that runs ``%memsearch``
in a real kernel. Screenshots go to ``docs/screenshots/``.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import nbformat
import pytest

from tests.server.test_ui import (  # noqa: F401 (the two jp_ fixtures override pytest-jupyter's)
    SCREENSHOTS,
    Lab,
    deploy_cells,
    jp_asyncio_loop,
    jp_server_cleanup,
    lab_page,
    running_lab,
    search,
    sync_api,
)
from tests.tune.conftest import FOLDERS, SAMPLE

pytestmark = pytest.mark.ui

# The note's target section sits far below line 1, so "opened at line 1" cannot pass for it.
FILLER = "".join(
    f"## Topic {i}\n\nRoutine item {i} about office plants and lunch menus.\n\n" for i in range(40)
)
NOTE = (
    "# Runbook\n\n"
    + FILLER
    + "## Pelican failover\n\nWhen the pelican cluster fails over, drain the queue and page the on-call.\n"
)
SEARCH_CELL = "%load_ext nbmemory\n%memsearch pelican cluster failover drain queue -k 3"
NOTEBOOK_CELL = "%memsearch rotate tokens schedule --kind notebook -k 1"
EXPLORER_CELL = "%load_ext nbmemory\n%memexplore pelican cluster failover"


def fill_root(root: Path) -> None:
    (root / "runbook.md").write_text(NOTE)
    nb = nbformat.v4.new_notebook()
    nb.cells = deploy_cells()
    nbformat.write(nb, root / "deploy.ipynb")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with running_lab(tmp_path_factory.mktemp("lablinks"), fill_root) as lab:
        # Written after indexing: the notebook that runs the searches is not in the memory.
        searching = nbformat.v4.new_notebook()
        searching.metadata["kernelspec"] = {
            "name": "python3",
            "display_name": "Python 3",
            "language": "python",
        }
        searching.cells = [nbformat.v4.new_code_cell(SEARCH_CELL), nbformat.v4.new_code_cell(NOTEBOOK_CELL)]
        (lab.root / "work").mkdir()
        nbformat.write(searching, lab.root / "work" / "search.ipynb")
        searching.cells = [nbformat.v4.new_code_cell(EXPLORER_CELL)]
        nbformat.write(searching, lab.root / "work" / "explore.ipynb")
        yield lab


@pytest.fixture(scope="module")
def page(lab: Lab) -> Iterator[Any]:
    with lab_page(lab) as page:
        yield page


def visible_notebook(page: Any) -> Any:
    return page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")


def open_search_notebook(page: Any, lab: Lab) -> Any:
    """Open work/search.ipynb, run its cells in a real kernel, return the notebook panel."""
    path = "work/search.ipynb"
    page.evaluate(f"() => window.jupyterapp.commands.execute('docmanager:open', {{path: '{path}'}})")
    notebook = visible_notebook(page)
    notebook.locator(".jp-Cell").first.wait_for(state="visible")
    if notebook.locator("a.nbmemory-loc").count() < 2:
        run_all(page, path)
    wait_in_output(page, lab, notebook.locator(".jp-Cell").nth(1).locator("a.nbmemory-loc"))
    return notebook


# The state of the current notebook's own kernel: "idle" once it is connected and can run.
KERNEL_STATE = """(path) => {
    const panel = window.jupyterapp.shell.currentWidget;
    if (!panel || !panel.context || panel.context.path !== path) return 'another tab is current';
    const kernel = panel.sessionContext?.session?.kernel;
    if (!kernel) return 'no kernel yet';
    return kernel.connectionStatus === 'connected' ? kernel.status : kernel.connectionStatus;
}"""


def run_all(page: Any, path: str) -> None:
    """Run every cell of the notebook at ``path`` (the current tab) once its kernel is idle.

    Lab starts the kernel a notebook names when it opens it, at a moment that depends on the
    load, and asks which kernel only when none is chosen; a run asked for before the kernel is
    connected can be dropped, and opening one notebook can start and stop a kernel for another.
    So: answer the kernel question when it comes, wait until this notebook's own kernel is
    connected and idle, run, and ask again every 15 s until the first cell is queued or run (its
    prompt shows ``*`` or a number)."""
    run = "() => { void window.jupyterapp.commands.execute('notebook:run-all-cells'); }"
    select = page.locator(".jp-Dialog button", has_text="Select")
    prompt = visible_notebook(page).locator(".jp-Cell").first.locator(".jp-InputPrompt")
    state = ""
    for _ in range(480):  # a hang guard of 2 minutes, in steps of 250 ms
        if select.is_visible():
            select.click()
            select.wait_for(state="detached")
        state = page.evaluate(KERNEL_STATE, path)
        if state == "idle":
            break
        page.wait_for_timeout(250)
    else:
        raise AssertionError(f"the kernel of {path} is not ready after 2 minutes: {state}")
    page.evaluate(run)
    for step in range(1, 481):
        if re.search(r"\[[*0-9]+\]", prompt.inner_text()):
            return
        if step % 60 == 0:
            page.evaluate(run)
        page.wait_for_timeout(250)
    raise AssertionError(
        f"Lab did not run the first cell of {path}: kernel {page.evaluate(KERNEL_STATE, path)}"
    )


def wait_in_output(page: Any, lab: Lab, target: Any, timeout_ms: int = 180_000) -> None:
    """Wait for ``target`` in the visible notebook; on a timeout, fail with what the page showed
    (tab, prompts, outputs, dialogs, kernel status) and the end of the Lab server's log, which
    holds the kernels' stderr."""
    try:
        target.wait_for(timeout=timeout_ms)
    except sync_api.TimeoutError:
        notebook = visible_notebook(page)
        shown = {
            "tab": page.locator(".lm-TabBar-tab.lm-mod-current").all_inner_texts(),
            "prompts": notebook.locator(".jp-InputPrompt").all_inner_texts(),
            "outputs": [text[:2000] for text in notebook.locator(".jp-OutputArea").all_inner_texts()],
            "dialogs": page.locator(".jp-Dialog").all_inner_texts(),
            "kernel": page.locator(".jp-Notebook-ExecutionIndicator, .jp-KernelStatus").all_inner_texts(),
            "page dialogs": page.dialogs,
        }
        log = (lab.root.parent / "lab.log").read_text(errors="replace")[-6000:]
        raise AssertionError(
            f"not shown in {timeout_ms / 1000:.0f} s: {shown}\nlab.log ends:\n{log}"
        ) from None


def show_sidebar_after_reload(page: Any) -> None:
    """Open the Memory sidebar on a reloaded page, answering Lab's kernel questions on the way.

    The reload restores the open notebooks; ``deploy.ipynb`` was opened with no kernel, so Lab
    may ask again which kernel it wants, at a moment that depends on the load. The question
    covers the page and takes the click meant for the sidebar's tab: answer "No Kernel". Any
    other dialog fails the test with its text.
    """
    button = page.locator(".jp-nbmemory-tune-button")
    tab = page.locator('.lm-TabBar-tab[data-id="nbmemory-sidebar"]')
    dialog = page.locator(".jp-Dialog")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if dialog.count():
            no_kernel = dialog.locator("button", has_text="No Kernel")
            assert no_kernel.count(), f"unexpected dialog after the reload: {dialog.first.inner_text()!r}"
            no_kernel.first.click()
            dialog.first.wait_for(state="detached")
        elif button.is_visible():
            return
        else:
            # A dialog that comes first takes the click; the next turn answers it.
            with contextlib.suppress(sync_api.TimeoutError):
                tab.click(timeout=5_000)
        page.wait_for_timeout(200)
    raise AssertionError("the Memory sidebar did not open after the reload")


def line_on_screen(page: Any, line: int, text: str) -> None:
    """The text editor's cursor is on ``line`` (status bar) and that line is in view."""
    status = page.locator(".jp-StatusBar-Widget", has_text=re.compile(r"Ln \d+, Col \d+"))
    sync_api.expect(status.first).to_contain_text(f"Ln {line}, Col 1", timeout=30_000)
    editor = page.locator(".jp-FileEditor:not(.lm-mod-hidden)")
    shown = editor.locator(".cm-line", has_text=text).first
    shown.wait_for(state="visible")
    page.wait_for_timeout(300)  # let the scroll settle
    box, view = shown.bounding_box(), editor.bounding_box()
    assert box is not None and view is not None
    assert view["y"] <= box["y"] and box["y"] + box["height"] <= view["y"] + view["height"]


def test_markdown_link_in_memsearch_table_opens_in_this_lab_at_the_line(page: Any, lab: Lab) -> None:
    expected = lab.api("GET", "search?q=pelican+cluster+failover+drain+queue&k=3")["hits"][0]
    assert expected["path"] == "runbook.md" and expected["line_start"] > 40
    target_line = NOTE.splitlines()[expected["line_start"] - 1]

    notebook = open_search_notebook(page, lab)
    link = notebook.locator("a.nbmemory-loc[data-nbmemory-open='runbook.md']").first
    # The table names the line range, not just the file.
    assert f"runbook.md:{expected['line_start']}" in link.inner_text()
    pages_before = len(page.context.pages)
    # A mark on this window: a page load (a new Lab) would wipe it.
    page.evaluate("() => { window.nbmemoryMark = 'same lab'; }")
    link.click()

    line_on_screen(page, expected["line_start"], target_line)
    # Same Lab: no new tab or window, the page was not loaded again, the file is the current tab.
    assert len(page.context.pages) == pages_before
    assert page.evaluate("() => window.nbmemoryMark") == "same lab"
    assert page.locator(".lm-TabBar-tab.lm-mod-current", has_text="runbook.md").count() >= 1
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "hit-at-line.png"))


def test_notebook_link_in_memsearch_table_activates_the_cell(page: Any, lab: Lab) -> None:
    notebook = open_search_notebook(page, lab)
    link = notebook.locator(".jp-Cell").nth(1).locator("a.nbmemory-loc[data-nbmemory-open='deploy.ipynb']")
    label = link.inner_text()
    # The notebook with its folder (the kernel runs in work/, the notebook is in the root).
    match = re.fullmatch(r"/\S+/deploy\.ipynb, cell (\d+)", label)
    assert match, label
    link.click()

    deploy = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
    active = deploy.locator(".jp-Cell.jp-mod-active")
    sync_api.expect(active).to_contain_text("rotate_tokens", timeout=30_000)
    no_kernel = page.locator(".jp-Dialog button", has_text="No Kernel")
    no_kernel.wait_for(state="visible", timeout=30_000)
    no_kernel.click()
    no_kernel.wait_for(state="detached")
    assert page.locator(".lm-TabBar-tab.lm-mod-current", has_text="deploy.ipynb").count() >= 1
    # The label counts cells from 1: it names the active cell's position in the notebook.
    position = deploy.locator(".jp-Cell").evaluate_all(
        "(cells) => cells.findIndex(c => c.classList.contains('jp-mod-active')) + 1"
    )
    assert position == int(match.group(1)) == 4
    # ... and the same number as JupyterLab's status bar ("Cell 4/5").
    cell_status = page.get_by_role("contentinfo").get_by_role("button", name=re.compile(r"^Cell \d+\x2f\d+$"))
    sync_api.expect(cell_status).to_have_text(re.compile(rf"^Cell {position}/\d+$"))


def test_explorer_link_opens_in_this_lab_at_the_line(page: Any, lab: Lab) -> None:
    expected = lab.api("GET", "search?q=pelican+cluster+failover&k=1")["hits"][0]
    page.evaluate(
        "async () => { await window.jupyterapp.commands.execute('docmanager:open', {path: 'work/explore.ipynb'}); }"
    )
    notebook = visible_notebook(page)
    notebook.locator(".jp-Cell").first.wait_for(state="visible")
    run_all(page, "work/explore.ipynb")
    link = notebook.locator(".jp-OutputArea a.nbmemory-loc[data-nbmemory-open='runbook.md']").first
    wait_in_output(page, lab, link)
    # The widget's href is a whole new Lab in a new browser tab; the click must open the file here.
    assert link.get_attribute("target") == "_blank"
    pages_before = len(page.context.pages)
    page.evaluate("() => { window.nbmemoryMark = 'same lab'; }")
    link.click()
    line_on_screen(page, expected["line_start"], NOTE.splitlines()[expected["line_start"] - 1])
    page.wait_for_timeout(500)
    assert len(page.context.pages) == pages_before
    assert page.evaluate("() => window.nbmemoryMark") == "same lab"


def test_sidebar_shows_the_location_at_its_default_width(page: Any) -> None:
    hits = search(page, "pelican cluster failover")
    first = hits.first
    location = first.locator(".jp-nbmemory-location")
    assert re.fullmatch(r"runbook\.md, lines? \d+(–\d+)?", location.inner_text()), location.inner_text()
    assert location.get_attribute("title") == "runbook.md"
    # Not clipped: the text fits its box, and the box lies inside the sidebar.
    fits = location.evaluate("e => e.scrollWidth <= e.clientWidth && e.scrollHeight <= e.clientHeight")
    assert fits
    panel = page.locator(".jp-nbmemory-panel").bounding_box()
    box = location.bounding_box()
    assert panel is not None and box is not None
    assert panel["x"] <= box["x"] and box["x"] + box["width"] <= panel["x"] + panel["width"]
    # The namespace box shows its whole placeholder.
    namespace = page.locator(".jp-nbmemory-namespace")
    width = namespace.evaluate(
        "e => { const c = document.createElement('canvas').getContext('2d'); const s = getComputedStyle(e);"
        " c.font = s.font; return [c.measureText(e.placeholder).width,"
        " e.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight)]; }"
    )
    assert width[0] < width[1], width

    # Notebook hits name their cell from 1; the explain trace wraps instead of being cut off.
    page.locator(".jp-nbmemory-explain-toggle input").check()
    hits = search(page, "token rotation schedule")
    assert hits.first.locator(".jp-nbmemory-location").inner_text() == "deploy.ipynb, cell 4"
    explain = page.locator(".jp-nbmemory-explain")
    explain.wait_for(state="visible")
    assert explain.evaluate("e => e.scrollWidth <= e.clientWidth")
    page.wait_for_timeout(300)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "sidebar.png"))
    page.locator(".jp-nbmemory-explain-toggle input").uncheck()


def test_sidebar_opens_a_markdown_hit_at_its_line(page: Any, lab: Lab) -> None:
    expected = lab.api("GET", "search?q=pelican+cluster+failover&k=1")["hits"][0]
    # Away from the note first, so the click has to bring it back at the line.
    page.evaluate(
        "async () => { await window.jupyterapp.commands.execute('docmanager:open', {path: 'deploy.ipynb'}); }"
    )
    hits = search(page, "pelican cluster failover")
    hits.first.locator(".jp-nbmemory-location").click()
    line_on_screen(page, expected["line_start"], NOTE.splitlines()[expected["line_start"] - 1])


def test_sidebar_opens_a_notebook_hit_at_its_cell(page: Any) -> None:
    hits = search(page, "token rotation schedule")
    hits.first.locator(".jp-nbmemory-location").click()
    active = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell.jp-mod-active")
    sync_api.expect(active).to_contain_text("rotate_tokens", timeout=30_000)
    page.wait_for_timeout(500)  # let the scroll settle before the screenshot
    page.screenshot(path=str(SCREENSHOTS / "hit-at-cell.png"))


def test_search_memory_command_focuses_the_search_box(page: Any) -> None:
    # Focus is in the notebook (previous test); run the command from the palette.
    cell = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").first
    cell.click()
    page.keyboard.press("Control+Shift+c")
    page.locator(".lm-CommandPalette-input").fill("Search memory")
    page.locator(".lm-CommandPalette-itemLabel", has_text=re.compile(r"^Search memory$")).first.click()
    sync_api.expect(page.locator(".jp-nbmemory-query")).to_be_focused(timeout=10_000)
    page.keyboard.type("typed")
    assert page.locator(".jp-nbmemory-query").input_value().endswith("typed")


def test_remember_cell_records_the_notebook_and_cell(page: Any, lab: Lab) -> None:
    notebook = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
    notebook.locator(".jp-Cell").nth(4).click()
    page.keyboard.press("Escape")
    page.keyboard.press("Control+Shift+c")
    page.locator(".lm-CommandPalette-input").fill("Remember cell")
    page.locator(".lm-CommandPalette-item", has_text="Remember cell").first.click()
    toast = page.locator(".Toastify__toast", has_text="Remembered #").last
    toast.wait_for(state="visible")
    item_id = int(re.search(r"#(\d+)", toast.inner_text()).group(1))  # type: ignore[union-attr]
    item = lab.api("GET", f"items/{item_id}")
    assert item["path"] == "deploy.ipynb" and item["heading"] == "deploy.ipynb, cell 5"
    assert "staging deploys need the VPN on" in item["text"]


def test_tune_model_button_follows_the_run_to_its_end(page: Any) -> None:
    button = page.locator(".jp-nbmemory-tune-button")
    status = page.locator(".jp-nbmemory-tune-status")
    button.click()
    # Disabled while the run goes on (a poll a second: at least one second).
    sync_api.expect(button).to_be_disabled(timeout=5_000)
    sync_api.expect(status).to_contain_text("Tuning", timeout=5_000)
    sync_api.expect(button).to_be_enabled(timeout=540_000)
    line = status.inner_text()
    # This root is small: the server refuses to tune it and says why. Should it ever be big
    # enough, the run ends with the gate's verdict; either way the line is the server's answer.
    if "failed" in line:
        assert re.fullmatch(r"Tuning failed: this memory is too small to tune: .+", line), line
        assert "jp-mod-error" in (status.get_attribute("class") or "")
        assert (status.get_attribute("title") or "").startswith("failed after ")
    else:
        assert re.match(r"(Adopted v\d+: adopt: |keep the current model: )", line), line
        assert (status.get_attribute("title") or "").startswith("finished in ")


def test_tune_options_are_sent_and_a_bad_one_is_refused(page: Any) -> None:
    button = page.locator(".jp-nbmemory-tune-button")
    status = page.locator(".jp-nbmemory-tune-status")
    toggle = page.locator(".jp-nbmemory-tune-options-toggle")
    form = page.locator(".jp-nbmemory-tune-options")
    # Collapsed until asked for.
    assert form.is_hidden() and toggle.get_attribute("aria-expanded") == "false"
    toggle.click()
    sync_api.expect(form).to_be_visible()
    assert toggle.get_attribute("aria-expanded") == "true"
    sources = form.locator(".jp-nbmemory-tune-query-source option").evaluate_all(
        "(os) => os.map(o => o.value)"
    )
    assert sources == ["", "title", "first_sentence", "log"]

    # The server checks the values: its 400 message is the status line, and nothing runs.
    page.get_by_label("max steps").fill("-1")
    button.click()
    sync_api.expect(status).to_have_text("Tuning not started: max_steps must be at least 0, got -1")
    assert "jp-mod-error" in (status.get_attribute("class") or "")
    sync_api.expect(button).to_be_enabled()
    page.wait_for_timeout(300)
    page.screenshot(path=str(SCREENSHOTS / "tune-options.png"))

    # Filled boxes are sent by their TUNE_OPTIONS names; empty ones are left to the defaults.
    page.get_by_label("max steps").fill("1")
    page.get_by_label("query source").select_option("first_sentence")
    with page.expect_request(
        lambda r: r.method == "POST" and urlsplit(r.url).path.endswith("/nbmemory/tune")
    ) as sent:
        button.click()
    assert sent.value.post_data_json == {"max_steps": 1, "query_source": "first_sentence"}
    sync_api.expect(button).to_be_disabled(timeout=5_000)
    sync_api.expect(button).to_be_enabled(timeout=540_000)
    assert "not started" not in status.inner_text()
    page.get_by_label("max steps").fill("")
    page.get_by_label("query source").select_option("")
    toggle.click()
    sync_api.expect(form).to_be_hidden()


def test_tune_run_going_on_is_followed_again_after_a_page_reload(page: Any, lab: Lab) -> None:
    # Last in this module: it adds the sample notes, enough to tune for a while.
    for folder in FOLDERS:
        shutil.copytree(SAMPLE / folder, lab.root / "sample" / folder)
    job = lab.api("POST", "index", {"paths": ["sample"]})
    while job["state"] in ("queued", "running"):
        time.sleep(0.5)
        job = lab.api("GET", f"index/{job['id']}")
    assert job["state"] == "done", job
    # Started outside this page (another tab); min_gain 1: the gate keeps the current model.
    run = lab.api(
        "POST",
        "tune",
        {
            "max_steps": 30,
            "max_triples": 240,
            "batch_size": 8,
            "min_gain": 1,
            "query_source": "title,first_sentence",
        },
    )
    assert run["state"] == "running"

    # The run keeps a core busy: the page may take a while to load, so its own timeouts are long.
    page.reload(wait_until="domcontentloaded", timeout=180_000)
    page.locator("#jupyterlab-splash").wait_for(state="detached", timeout=180_000)
    show_sidebar_after_reload(page)
    button = page.locator(".jp-nbmemory-tune-button")
    status = page.locator(".jp-nbmemory-tune-status")
    # The new page asks the server, disables the button and follows the run with its line.
    sync_api.expect(status).to_have_text(
        re.compile(r"^Tuning: (starting|mining|training|embedding|gate) \d+%$"), timeout=60_000
    )
    sync_api.expect(button).to_be_disabled()
    assert (status.get_attribute("title") or "").startswith("running: ")
    assert lab.api("GET", "tune")["job"] == run["job"]
    sync_api.expect(button).to_be_enabled(timeout=540_000)
    line = status.inner_text()
    assert line.startswith("keep the current model: "), line
    assert lab.api("GET", f"tune/{run['job']}")["state"] == "done"

    # Once it has ended, a new page shows how.
    page.reload(wait_until="domcontentloaded", timeout=180_000)
    page.locator("#jupyterlab-splash").wait_for(state="detached", timeout=180_000)
    sync_api.expect(status).to_have_text(line)
    sync_api.expect(button).to_be_enabled()
