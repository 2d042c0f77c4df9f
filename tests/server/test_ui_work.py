"""The sidebar's state lines, the built-in notebooks' launcher items and chat hits, in a real
JupyterLab driven in Debian's Chromium (the harness of :mod:`tests.server.test_ui`).

The Lab's root holds the deploy notebook, a note and a jupyterlab-chat ``.chat`` file (no
jupyterlab-chat here: it opens with Lab's default factory, the text editor). A real kernel runs
``%load_ext nbmemory`` and ``%memcapture on``: the capture line names its notebook. The settings
editor's ``captureAllKernels`` reaches the server. Where a test needs a server that lacks an
endpoint, stats that say passages are being added or a team memory is attached, or a team's
hits, the page's requests for them are answered by the test (``page.route``): the only way to
show this server as one it is not. Screenshots go to ``$NBMEMORY_SHOTS`` (default
``/tmp/shots-fe``), looked at, not compared.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import time
import urllib.error
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import nbformat
import pytest

from tests.server.test_chat import CHAT
from tests.server.test_ui import (  # noqa: F401 (the two jp_ fixtures override pytest-jupyter's)
    CHROMIUM,
    CHROMIUM_ARGS,
    Lab,
    jp_asyncio_loop,
    jp_server_cleanup,
    lab_page,
    running_lab,
    search,
    sync_api,
    write_root,
)
from tests.server.test_ui_lab import run_all, visible_notebook, wait_in_output

pytestmark = pytest.mark.ui

SHOTS = Path(os.environ.get("NBMEMORY_SHOTS", "/tmp/shots-fe"))
# nbmemory's own cell (its magics) is not captured; the next one is, and names the notebook.
CAPTURE_CELLS = ["%load_ext nbmemory\n%memcapture on", "print('walrus ledger ' + str(6 * 7))"]


def fill_root(root: Path) -> None:
    write_root(root)
    (root / "notes").mkdir()
    # Written as jupyterlab-chat writes it, one key a line: the message has a line of its own.
    (root / "notes" / "build.chat").write_text(json.dumps(CHAT, indent=1))


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with contextlib.ExitStack() as stack:
        # The test session turns capture off and makes passages inline; this Lab's server and
        # kernels run as a person's do: every new kernel may capture when the setting says so,
        # and an index's passages are made in the background after it (the refining line).
        with pytest.MonkeyPatch.context() as env:
            env.delenv("NBMEMORY_CAPTURE", raising=False)
            env.delenv("NBMEMORY_REFINE", raising=False)
            lab = stack.enter_context(running_lab(tmp_path_factory.mktemp("labwork"), fill_root))
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nb.cells = [nbformat.v4.new_code_cell(source) for source in CAPTURE_CELLS]
        (lab.root / "work").mkdir()
        nbformat.write(nb, lab.root / "work" / "capture.ipynb")
        yield lab


@pytest.fixture(scope="module")
def page(lab: Lab) -> Iterator[Any]:
    SHOTS.mkdir(parents=True, exist_ok=True)
    with lab_page(lab) as page:
        page.requests = []  # type: ignore[attr-defined]

        def record(request: Any) -> None:
            if "/nbmemory/" in request.url:
                body = request.post_data_buffer
                page.requests.append(  # type: ignore[attr-defined]
                    (request.method, request.url.split("?")[0], body.decode() if body else None)
                )

        page.on("request", record)
        yield page


def has_endpoint(lab: Lab, path: str) -> bool:
    try:
        lab.api("GET", path)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return False
        raise
    return True


def eventually(check: Callable[[], Any], what: str, page: Any = None, seconds: float = 60) -> Any:
    """``check()``'s first true answer, asked every 200 ms; fails naming ``what`` and the last answer.

    With ``page``, the waits are the page's: Playwright hands the page's events (requests seen)
    to their listeners only while it is called.
    """
    deadline = time.monotonic() + seconds
    answer = None
    while time.monotonic() < deadline:
        answer = check()
        if answer:
            return answer
        if page is None:
            time.sleep(0.2)
        else:
            page.wait_for_timeout(200)
    raise AssertionError(f"{what}: not within {seconds:.0f} s (last: {answer!r})")


def show_sidebar(page: Any) -> None:
    """Bring the Memory sidebar forward (another test may have left the settings or a notebook on top)."""
    if not page.locator(".jp-nbmemory-query").is_visible():
        page.locator('.lm-TabBar-tab[data-id="nbmemory-sidebar"]').click()
    page.locator(".jp-nbmemory-query").wait_for(state="visible")


def sidebar_shot(page: Any, name: str) -> None:
    page.locator(".jp-nbmemory-panel").screenshot(path=str(SHOTS / name))


def puts(page: Any, endpoint: str) -> list[Any]:
    """The bodies the page PUT to ``/nbmemory/<endpoint>``, in order."""
    return [
        json.loads(body or "null")
        for method, url, body in page.requests  # type: ignore[attr-defined]
        if method == "PUT" and url.endswith(f"/nbmemory/{endpoint}")
    ]


def test_chat_hit_opens_the_chat_at_its_message(page: Any, lab: Lab) -> None:
    show_sidebar(page)
    hits = search(page, "narwhalq fixture")
    first = hits.first
    assert first.get_attribute("data-path") == "notes/build.chat"
    location = first.locator(".jp-nbmemory-location")
    assert location.inner_text() == "build.chat, message 2 (Jupyternaut)"
    location.click()
    # No jupyterlab-chat: the text editor, its cursor on the line of the message's id.
    source = (lab.root / "notes" / "build.chat").read_text()
    line = source[: source.index('"id": "a2"')].count("\n") + 1
    assert line > 1
    status = page.locator(".jp-StatusBar-Widget", has_text=re.compile(r"Ln \d+, Col \d+"))
    sync_api.expect(status.first).to_contain_text(f"Ln {line}, Col 1", timeout=30_000)
    current = page.locator(".lm-TabBar-tab.lm-mod-current", has_text="build.chat")
    assert current.count() >= 1
    editor = page.locator(".jp-FileEditor:not(.lm-mod-hidden)")
    sync_api.expect(editor.locator(".cm-line", has_text="narwhalq").first).to_be_visible()
    assert page.locator(".Toastify__toast--error").count() == 0
    assert page.locator(".jp-nbmemory-status.jp-mod-error").count() == 0


def test_launcher_item_opens_a_fresh_copy_of_the_diagnostics_notebook(page: Any, lab: Lab) -> None:
    if not has_endpoint(lab, "notebooks"):
        pytest.skip("the server has no /nbmemory/notebooks endpoint yet (#51, helper 'notebooks')")
    listed = {nb["name"]: nb for nb in lab.api("GET", "notebooks")["notebooks"]}
    assert {"diagnostics", "beir"} <= set(listed)
    # The file browser's folder is where the copy goes.
    page.evaluate(
        "async () => { await window.jupyterapp.commands.execute('filebrowser:go-to-path', {path: 'work/'}); }"
    )
    page.evaluate("async () => { await window.jupyterapp.commands.execute('launcher:create'); }")
    launcher = page.locator(".jp-Launcher:visible")
    section = launcher.locator(".jp-Launcher-section", has_text="Memory")
    card = section.locator(".jp-LauncherCard", has_text="Memory diagnostics")
    card.wait_for(state="visible")
    assert section.locator(".jp-LauncherCard", has_text="BEIR evaluation").count() == 1
    page.screenshot(path=str(SHOTS / "launcher-memory.png"))
    card.click()
    name = listed["diagnostics"]["file"]
    tab = page.locator(".lm-TabBar-tab.lm-mod-current", has_text=name)
    tab.wait_for(state="visible")
    copy = lab.root / "work" / name
    assert copy.is_file()
    # The copy is the built-in notebook: its first cell is in the panel.
    first = nbformat.read(copy, as_version=4).cells[0].source.splitlines()[0].lstrip("# ")
    sync_api.expect(visible_notebook(page).locator(".jp-Cell").first).to_contain_text(first)
    # The palette command opens another copy, under a new name, next to the first.
    page.evaluate(
        "async () => { await window.jupyterapp.commands.execute('nbmemory:open-diagnostics-notebook'); }"
    )
    second = name.replace(".ipynb", "-1.ipynb")
    page.locator(".lm-TabBar-tab.lm-mod-current", has_text=second).wait_for(state="visible")
    assert (lab.root / "work" / second).is_file()
    labels = page.evaluate(
        "() => ['nbmemory:open-diagnostics-notebook', 'nbmemory:open-beir-notebook']"
        ".map(id => window.jupyterapp.commands.label(id))"
    )
    assert labels == ["Memory diagnostics", "BEIR evaluation"]
    # The kernel question of the opened copies is not this test's: no kernel.
    for _ in range(2):
        no_kernel = page.locator(".jp-Dialog button", has_text="No Kernel")
        if no_kernel.count():
            no_kernel.first.click()
            no_kernel.first.wait_for(state="detached")


def test_capture_line_names_the_kernel_that_captures(page: Any, lab: Lab) -> None:
    show_sidebar(page)
    line = page.locator(".jp-nbmemory-capture")
    if not has_endpoint(lab, "capture"):
        # A server without the endpoint: the line is hidden, the sidebar works on.
        assert line.is_hidden()
        pytest.skip("the server has no /nbmemory/capture endpoint yet (#48, the lead)")
    sync_api.expect(line).to_have_text(re.compile(r"^Capture: "), timeout=30_000)
    before = lab.api("GET", "capture")
    assert before["kernels"] == [], before
    sync_api.expect(line).to_contain_text("off")
    path = "work/capture.ipynb"
    page.evaluate(
        f"async () => {{ await window.jupyterapp.commands.execute('docmanager:open', {{path: '{path}'}}); }}"
    )
    notebook = visible_notebook(page)
    notebook.locator(".jp-Cell").first.wait_for(state="visible")
    run_all(page, path)
    wait_in_output(page, lab, notebook.locator(".jp-OutputArea", has_text="walrus ledger 42"))
    # Listed once it captures; its notebook is known from the first cell it hands over.
    kernels = eventually(
        lambda: [k for k in lab.api("GET", "capture")["kernels"] if k["runs"] > 0],
        "the server lists the capturing kernel with a run",
    )
    assert [k["notebook"] for k in kernels] == [path], kernels
    # The sidebar asks again while it shows: the kernel's notebook is named.
    sync_api.expect(line).to_have_text(
        re.compile(r"^Capture: on in 1 kernel \(capture\.ipynb\)"), timeout=30_000
    )
    assert "pid" in (line.get_attribute("title") or "")
    sidebar_shot(page, "sidebar-capture.png")


def test_the_capture_setting_reaches_the_server(page: Any, lab: Lab) -> None:
    if not has_endpoint(lab, "capture"):
        pytest.skip("the server has no /nbmemory/capture endpoint yet (#48, the lead)")
    # Loaded with the setting unset: the page sent nothing, the server's default stands.
    assert puts(page, "capture") == []
    assert lab.api("GET", "capture")["server_wide"] is False
    page.evaluate(
        "async () => { await window.jupyterapp.commands.execute('settingeditor:open', {query: 'Capture cells'}); }"
    )
    box = page.get_by_role("checkbox", name="Capture cells of every kernel")
    box.wait_for(state="visible")
    assert not box.is_checked()
    box.check()
    eventually(lambda: lab.api("GET", "capture")["server_wide"] is True, "server_wide on after the setting")
    eventually(
        lambda: puts(page, "capture")[-1:] == [{"server_wide": True}], "the page PUT the setting", page
    )
    line = page.locator(".jp-nbmemory-capture")
    sync_api.expect(line).to_contain_text("new kernels are captured", timeout=30_000)
    sidebar_shot(page, "sidebar-capture-server-wide.png")
    box.uncheck()
    eventually(lambda: lab.api("GET", "capture")["server_wide"] is False, "server_wide off after the setting")
    sync_api.expect(line).not_to_contain_text("new kernels are captured", timeout=30_000)
    # Set by the user, the setting wins over the server's state on the next load.
    box.check()
    eventually(lambda: lab.api("GET", "capture")["server_wide"] is True, "server_wide on again")
    lab.api("PUT", "capture", {"server_wide": False})
    page.reload()
    page.locator("#jupyterlab-splash").wait_for(state="detached")
    eventually(lambda: lab.api("GET", "capture")["server_wide"] is True, "the user's setting applied on load")
    # Left as the server starts: the other tests' kernels are not this test's.
    box = page.get_by_role("checkbox", name="Capture cells of every kernel")
    page.evaluate(
        "async () => { await window.jupyterapp.commands.execute('settingeditor:open', {query: 'Capture cells'}); }"
    )
    box.uncheck()
    eventually(lambda: lab.api("GET", "capture")["server_wide"] is False, "server_wide off at the end")
    # Set back to the schema's default, it is not sent on load: the server's own state stands
    # (Lab saves every field once one changes; a server configured otherwise keeps its setting).
    # (The settings form saves a change more than once: let its last save land first.)
    page.wait_for_timeout(2_000)
    lab.api("PUT", "capture", {"server_wide": True})
    seen = len(page.requests)  # type: ignore[attr-defined]
    page.reload()
    page.locator("#jupyterlab-splash").wait_for(state="detached")
    asked = lambda: [  # noqa: E731
        (method, url) for method, url, _ in page.requests[seen:] if url.split("?")[0].endswith("/nbmemory/capture")
    ]
    # The sidebar reads the capture state once the settings are applied: by then a PUT was sent or not.
    eventually(lambda: any(method == "GET" for method, _ in asked()), "the reloaded page read capture", page)
    assert [method for method, _ in asked()].count("PUT") == 0, page.requests[seen:]
    assert lab.api("GET", "capture")["server_wide"] is True
    lab.api("PUT", "capture", {"server_wide": False})
    page.locator(".lm-TabBar-tab[data-id='nbmemory-sidebar']").wait_for(state="visible")
    show_sidebar(page)


def test_agents_line_follows_the_server(page: Any, lab: Lab) -> None:
    show_sidebar(page)
    line = page.locator(".jp-nbmemory-agents")
    if not has_endpoint(lab, "agents"):
        assert line.is_hidden()
        pytest.skip("the server has no /nbmemory/agents endpoint yet (#49, helper 'ai')")
    state = lab.api("GET", "agents")
    if not state["installed"]:
        asked = lambda: any(s == 200 and u.split("?")[0].endswith("/agents") for s, u in page.answers)  # noqa: E731
        eventually(asked, "the sidebar asked for the agents", page, seconds=15)
        page.wait_for_timeout(500)
        assert line.is_hidden()
        return
    expected = "Agents: off" if state["mode"] == "off" else "Agents in this Lab: " + state["tools"][0]
    sync_api.expect(line).to_contain_text(expected, timeout=30_000)
    if state["mode"] == "read-only":
        sync_api.expect(line).to_contain_text("(read-only)")
    sidebar_shot(page, "sidebar-agents.png")


def answering(page: Any, answer: Callable[[], tuple[int, Any]]) -> Callable[[Any], None]:
    """A route handler that answers with ``answer()`` and notes ``(method, endpoint)`` in
    ``page.asked``."""

    def fulfil(route: Any) -> None:
        page.asked.append((route.request.method, route.request.url.split("?")[0].rsplit("/", 1)[-1]))
        status, body = answer()
        route.fulfill(status=status, content_type="application/json", body=json.dumps(body))

    return fulfil


def test_the_agent_tools_setting_reaches_the_server(page: Any, lab: Lab) -> None:
    state = lab.api("GET", "agents") if has_endpoint(lab, "agents") else None
    if state is None or not state["installed"]:
        pytest.skip("no agents' tools in this server to set (#49: the endpoint, or jupyter-server-mcp)")
    assert state["mode"] == "on"
    page.evaluate(
        "async () => { await window.jupyterapp.commands.execute('settingeditor:open', {query: 'Memory tools'}); }"
    )
    # The form's select has the title as a heading, not a label: found by the setting's name.
    select = page.locator(".jp-SettingsPanel select[id$='_agentTools']")
    select.wait_for(state="visible")
    select.select_option(label="read-only")
    after = eventually(
        lambda: (s := lab.api("GET", "agents"))["mode"] == "read-only" and s,
        "read-only after the setting",
        page,
    )
    assert "search" in after["tools"] and "remember" not in after["tools"], after
    eventually(lambda: puts(page, "agents")[-1:] == [{"mode": "read-only"}], "the page PUT the mode", page)
    show_sidebar(page)
    line = page.locator(".jp-nbmemory-agents")
    sync_api.expect(line).to_contain_text("(read-only)", timeout=30_000)
    assert "remember" not in line.inner_text()
    sidebar_shot(page, "sidebar-agents-read-only.png")
    page.evaluate(
        "async () => { await window.jupyterapp.commands.execute('settingeditor:open', {query: 'Memory tools'}); }"
    )
    select.select_option(label="on")
    eventually(lambda: lab.api("GET", "agents")["mode"] == "on", "on again after the setting", page)
    show_sidebar(page)
    sync_api.expect(line).not_to_contain_text("(read-only)", timeout=30_000)


@pytest.fixture
def routed_page(page: Any, lab: Lab) -> Iterator[Callable[[dict[str, Callable[[], tuple[int, Any]]]], Any]]:
    """A page of its own on ``lab`` (in the module page's browser: one Playwright a process)
    whose requests for the named endpoints are answered by the test (``{endpoint: () -> (status,
    body)}``), the rest by the server."""
    context = page.context.browser.new_context(viewport={"width": 1400, "height": 900})

    def open_page(answers: dict[str, Callable[[], tuple[int, Any]]]) -> Any:
        page = context.new_page()
        page.asked = []  # type: ignore[attr-defined]
        for endpoint, answer in answers.items():
            page.route(re.compile(rf".*/nbmemory/{endpoint}(\?.*)?$"), answering(page, answer))
        page.set_default_timeout(60_000)
        # A workspace of its own: not the layout the module's page left.
        page.goto(f"{lab.url}/lab/workspaces/routed-{secrets.token_hex(4)}?token={lab.token}")
        page.locator(".jp-Launcher").first.wait_for(state="visible")
        page.locator("#jupyterlab-splash").wait_for(state="detached")
        show_sidebar(page)
        return page

    yield open_page
    context.close()


def test_a_server_without_the_new_endpoints_hides_their_lines(routed_page: Any, lab: Lab) -> None:
    missing = (404, {"message": "Not Found"})
    page = routed_page({name: lambda: missing for name in ("capture", "agents", "notebooks")})
    # Asked (a question, or the PUT of a setting the user saved), then not again: this server
    # has none of them.
    eventually(
        lambda: {"capture", "agents", "notebooks"} <= {name for _, name in page.asked},
        "the sidebar asked for each endpoint",
        page,
    )
    page.wait_for_timeout(1_000)  # the answers of the first round
    first = list(page.asked)
    page.wait_for_timeout(6_000)  # past one turn of the state's poll
    assert page.asked == first, page.asked
    for name in ("capture", "agents", "refine"):
        assert page.locator(f".jp-nbmemory-{name}").is_hidden(), name
    assert page.locator(".jp-nbmemory-state").is_hidden()
    # No launcher items for notebooks the server cannot copy; the sidebar searches as before.
    assert page.locator(".jp-Launcher .jp-LauncherCard", has_text="Memory diagnostics").count() == 0
    assert search(page, "token rotation schedule").count() >= 1


def test_agents_line_hidden_when_the_tools_are_not_installed(routed_page: Any, lab: Lab) -> None:
    page = routed_page(
        {"agents": lambda: (200, {"installed": False, "mode": "on", "tools": [], "url": None})}
    )
    eventually(lambda: ("GET", "agents") in page.asked, "the sidebar asked for the agents", page)
    page.wait_for_timeout(500)
    assert page.locator(".jp-nbmemory-agents").is_hidden()


def test_capture_line_says_when_the_environment_turns_it_off(routed_page: Any, lab: Lab) -> None:
    # This Lab's server runs without NBMEMORY_CAPTURE=0: its answer, as one with it gives.
    state = {"server_wide": True, "env_off": True, "kernels": []}
    page = routed_page({"capture": lambda: (200, state)})
    line = page.locator(".jp-nbmemory-capture")
    sync_api.expect(line).to_have_text("Capture: off · NBMEMORY_CAPTURE=0 turns it off", timeout=30_000)
    assert "NBMEMORY_CAPTURE=0" in (line.get_attribute("title") or "")


def test_refining_line_counts_passages_until_they_are_all_there(routed_page: Any, lab: Lab) -> None:
    real = lab.api("GET", "stats")
    steps = iter([(2140, 11345), (2140, 11345), (9001, 11345)])

    def stats() -> tuple[int, Any]:
        done, total = next(steps, (11345, 11345))
        return 200, {**real, "refine": {"done": done, "total": total}}

    page = routed_page({"stats": stats})
    line = page.locator(".jp-nbmemory-refine")
    sync_api.expect(line).to_have_text("refining: 2,140 of 11,345 passages", timeout=30_000)
    sidebar_shot(page, "sidebar-refining.png")
    sync_api.expect(line).to_have_text("refining: 9,001 of 11,345 passages", timeout=30_000)
    # All there: the line hides and the sidebar stops asking.
    line.wait_for(state="hidden", timeout=30_000)
    asked = len(page.asked)
    page.wait_for_timeout(7_000)  # two turns of the refinement's poll
    assert len(page.asked) == asked, page.asked


def write_prose(folder: Path, files: int = 12, sections: int = 5, sentences: int = 20) -> None:
    """Notes whose sections are prose of many sentences: each chunk has passages to make, more
    of them than the refiner makes in the moment between the run's end and the first look."""
    folder.mkdir()
    # A word of this run in every sentence: no vector of an earlier run's cache fits them.
    run = secrets.token_hex(4)
    for i in range(files):
        parts = []
        for j in range(sections):
            prose = " ".join(
                f"Ledger {i}.{j} step {n} of run {run}: reconcile the walrus account and note what moved."
                for n in range(sentences)
            )
            parts.append(f"## Section {j}\n\n{prose}\n")
        (folder / f"ledger-{i:02d}.md").write_text(f"# Ledger {i}\n\n" + "\n".join(parts))


def test_refining_line_follows_a_real_index_until_its_passages_are_made(page: Any, lab: Lab) -> None:
    show_sidebar(page)
    if "refine" not in lab.api("GET", "stats"):
        pytest.skip("the server's stats say nothing of refinement yet (#50, helper 'index')")
    write_prose(lab.root / "ledgers")
    line = page.locator(".jp-nbmemory-refine")
    page.locator(".jp-nbmemory-index-path").fill("ledgers")
    page.locator(".jp-nbmemory-index-button").click()
    status = page.locator(".jp-nbmemory-index-status")
    sync_api.expect(status).to_contain_text("done", timeout=300_000)
    refine = lab.api("GET", "stats")["refine"]
    if refine["done"] >= refine["total"]:
        pytest.skip(
            f"the passages were all made before the first look ({refine}; the run: {status.inner_text()!r}):"
            " no refinement to show"
        )
    # The sidebar asks when its run ends: the line counts the server's passages.
    total = f"{refine['total']:,}"
    sync_api.expect(line).to_have_text(re.compile(rf"^refining: [\d,]+ of {total} passages$"), timeout=30_000)
    sidebar_shot(page, "sidebar-refining-real.png")
    # ... and hides once the server has them all.
    line.wait_for(state="hidden", timeout=600_000)
    final = lab.api("GET", "stats")["refine"]
    assert final["done"] == final["total"] >= refine["total"], final


#: A team memory as ``Memory.stats()["team"]`` says it (this Lab's server has none attached).
TEAM = {
    "catalog": "postgres:dbname=lab host=db",
    "data_path": "/shared/lab-memory",
    "items": 1234,
    "snapshot": 57,
    "unreachable": None,
}
TEAM_LINE = "team: postgres:dbname=lab host=db · 1,234 items · snapshot 57"
UNREACHABLE = "could not connect to server: Connection refused"


@pytest.mark.parametrize(
    ("team", "expected"),
    [
        (None, None),
        (TEAM, TEAM_LINE),
        (
            {**TEAM, "unreachable": UNREACHABLE},
            f"team unreachable: {UNREACHABLE} — searching this machine's copy (snapshot 57)",
        ),
    ],
    ids=["no team", "team", "unreachable"],
)
def test_team_line_says_the_team_memory_from_the_stats(
    routed_page: Any, lab: Lab, team: dict[str, Any] | None, expected: str | None
) -> None:
    real = lab.api("GET", "stats")
    assert "team" not in real, real
    page = routed_page({"stats": lambda: (200, real if team is None else {**real, "team": team})})
    line = page.locator(".jp-nbmemory-team")
    if expected is None:
        eventually(lambda: ("GET", "stats") in page.asked, "the sidebar asked for the stats", page)
        page.wait_for_timeout(500)
        assert line.is_hidden()
        return
    sync_api.expect(line).to_have_text(expected, timeout=30_000)
    assert "Data folder: /shared/lab-memory" in (line.get_attribute("title") or "")
    warned = "jp-mod-warn" in (line.get_attribute("class") or "")
    assert warned == bool(team and team["unreachable"])
    if warned:
        sidebar_shot(page, "sidebar-team-unreachable.png")


def test_team_line_follows_the_catalog_back_after_a_search(routed_page: Any, lab: Lab) -> None:
    # Passages all made: no refinement's poll asks the stats again, only a search may.
    real = {**lab.api("GET", "stats"), "refine": {"done": 5, "total": 5}}
    answers = iter([{**TEAM, "unreachable": UNREACHABLE}])
    page = routed_page({"stats": lambda: (200, {**real, "team": next(answers, TEAM)})})
    line = page.locator(".jp-nbmemory-team")
    sync_api.expect(line).to_contain_text("team unreachable", timeout=30_000)
    page.wait_for_timeout(3_500)  # past the least time between two asks
    sync_api.expect(line).to_contain_text("team unreachable")
    search(page, "token rotation schedule")
    sync_api.expect(line).to_have_text(TEAM_LINE, timeout=30_000)
    assert "jp-mod-warn" not in (line.get_attribute("class") or "")


def test_a_team_hit_has_a_team_badge_and_a_team_namespace_is_searched_as_typed(
    routed_page: Any, lab: Lab
) -> None:
    real = lab.api("GET", "search?q=token+rotation+schedule")
    assert real["hits"], real
    # Team items' ids start at 2**50: still exact in JavaScript.
    team_id = 2**50 + 7
    hits = [
        {**real["hits"][0], "id": team_id, "store": "team", "namespace": "team:runbooks"},
        *({**hit, "store": "personal"} for hit in real["hits"]),
    ]
    page = routed_page({"search": lambda: (200, {**real, "hits": hits})})
    searched: list[str] = []
    page.on("request", lambda r: searched.append(r.url) if "/nbmemory/search" in r.url else None)
    page.locator(".jp-nbmemory-namespace").fill("team:runbooks")
    rows = search(page, "token rotation schedule")
    assert parse_qs(urlsplit(searched[-1]).query)["ns"] == ["team:runbooks"]
    assert rows.count() == len(hits)
    badges = page.locator(".jp-nbmemory-hit .jp-nbmemory-store-team")
    assert badges.count() == 1 and badges.inner_text() == "team"
    team_row = rows.first
    assert team_row.get_attribute("data-id") == str(team_id)
    assert team_row.locator(".jp-nbmemory-store-team").count() == 1
    # The row is otherwise a row like the others: its location, ranks, snippet and actions.
    assert (
        team_row.locator(".jp-nbmemory-location").inner_text()
        == rows.nth(1).locator(".jp-nbmemory-location").inner_text()
    )
    assert "team:runbooks" in team_row.locator(".jp-nbmemory-ranks").inner_text()
    assert team_row.locator(".jp-nbmemory-actions button").count() == 3
    sidebar_shot(page, "sidebar-team-hit.png")
