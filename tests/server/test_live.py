"""The server's live indexer: files saved, renamed and deleted through the real Jupyter server's
contents API under an indexed folder are found, moved and gone without any index call."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

from nbmemory.server import ServerState
from nbmemory.server.live import changes_of
from tests.server.test_handlers import call, payload

DEADLINE = 30.0


@pytest.fixture
def nbmemory_watch() -> bool:
    return True


@pytest.fixture
def live_state(nbm_state: ServerState) -> Iterator[ServerState]:
    yield nbm_state
    if nbm_state.live is not None:
        nbm_state.live.close()  # before the memory closes


async def eventually(check: Callable[[], Any], what: str, timeout: float = DEADLINE) -> Any:
    """``await check()``'s first truthy value, polled until the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await check()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.05)


def notebook_model(text: str) -> dict[str, Any]:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(f"# Runbook\n\n{text}")]
    return {"type": "notebook", "format": "json", "content": json.loads(nbformat.writes(nb))}


async def found(jp_fetch: Any, word: str) -> set[str]:
    hits = payload(await call(jp_fetch, "GET", "search", q=word, k="10", chunks="1"))["hits"]
    return {h["path"] for h in hits if word in h["text"]}


async def indexed_root(state: ServerState, root_dir: Path) -> Path:
    folder = root_dir / "notes"
    folder.mkdir()
    (folder / "vpn.md").write_text("# VPN\n\nDeploys need the VPN on.\n")
    await asyncio.get_running_loop().run_in_executor(None, lambda: state.memory().index(folder))
    return folder


async def test_a_notebook_saved_through_the_contents_api_is_found_without_an_index_call(
    jp_fetch: Any, jp_root_dir: Path, live_state: ServerState
) -> None:
    await indexed_root(live_state, jp_root_dir)
    body = json.dumps(notebook_model("the quokkaflux rollback needs two approvals"))
    response = await jp_fetch("api", "contents", "notes", "rollback.ipynb", method="PUT", body=body)
    assert response.code == 201
    await eventually(
        lambda: found_is(jp_fetch, "quokkaflux", {"notes/rollback.ipynb"}), "the saved notebook is found"
    )

    # Renamed in Lab: its hits move.
    rename = json.dumps({"path": "notes/rollback-v2.ipynb"})
    assert (
        await jp_fetch("api", "contents", "notes", "rollback.ipynb", method="PATCH", body=rename)
    ).code == 200
    await eventually(
        lambda: found_is(jp_fetch, "quokkaflux", {"notes/rollback-v2.ipynb"}), "the renamed notebook moved"
    )

    # Deleted in Lab: its hits go.
    assert (await jp_fetch("api", "contents", "notes", "rollback-v2.ipynb", method="DELETE")).code == 204
    await eventually(lambda: found_is(jp_fetch, "quokkaflux", set()), "the deleted notebook is gone")
    assert await found(jp_fetch, "VPN") == {"notes/vpn.md"}


async def found_is(jp_fetch: Any, word: str, expected: set[str]) -> bool:
    return await found(jp_fetch, word) == expected


async def test_a_save_outside_the_roots_is_not_indexed_and_failures_are_shown(
    jp_fetch: Any, jp_root_dir: Path, live_state: ServerState
) -> None:
    await indexed_root(live_state, jp_root_dir)
    outside = json.dumps({"type": "file", "format": "text", "content": "# Out\n\noutsideword\n"})
    assert (await jp_fetch("api", "contents", "outside.md", method="PUT", body=outside)).code == 201
    broken = json.dumps({"type": "file", "format": "text", "content": '{"cells": ['})
    assert (await jp_fetch("api", "contents", "notes", "broken.ipynb", method="PUT", body=broken)).code == 201
    good = json.dumps({"type": "file", "format": "text", "content": "# In\n\ninsideword\n"})
    assert (await jp_fetch("api", "contents", "notes", "inside.md", method="PUT", body=good)).code == 201
    await eventually(lambda: found_is(jp_fetch, "insideword", {"notes/inside.md"}), "the good file is found")

    async def failures() -> list[dict[str, Any]]:
        return payload(await call(jp_fetch, "GET", "live"))["server"]["failures"]

    reported = await eventually(failures, "the broken notebook is reported")
    assert [Path(f["path"]).name for f in reported] == ["broken.ipynb"]
    live = payload(await call(jp_fetch, "GET", "live"))
    assert live["enabled"] is True
    assert [r["path"] for r in live["roots"]] == [str(jp_root_dir / "notes")]
    assert any(w["source"] == "server" for w in live["watchers"])
    stats = payload(await call(jp_fetch, "GET", "stats"))
    assert stats["roots"] == 1 and "broken.ipynb" in " ".join(stats["live"]["failures"])
    assert await found(jp_fetch, "outsideword") == set()


@pytest.fixture
def watch_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBMEMORY_WATCH", "0")


async def test_nbmemory_watch_0_turns_the_listener_off(
    watch_off: None, jp_fetch: Any, jp_root_dir: Path, live_state: ServerState
) -> None:
    assert live_state.live is None and live_state.live_listener is None
    live = payload(await call(jp_fetch, "GET", "live"))
    assert live["enabled"] is False and live["server"] is None


def test_contents_events_become_changes(tmp_path: Path) -> None:
    root = str(tmp_path)
    assert changes_of({"action": "get", "path": "a.md"}, root) == []
    assert changes_of({"action": "save", "path": "n/a.ipynb"}, root) == [
        (str(tmp_path / "n" / "a.ipynb"), False)
    ]
    assert changes_of({"action": "delete", "path": "a.md"}, root) == [(str(tmp_path / "a.md"), True)]
    assert changes_of({"action": "rename", "path": "b.md", "source_path": "a.md"}, root) == [
        (str(tmp_path / "b.md"), False),
        (str(tmp_path / "a.md"), True),
    ]
