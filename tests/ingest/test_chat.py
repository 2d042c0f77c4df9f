"""JupyterLab chats (``.chat`` files): one item per message with its sender and time, kept
current by the live feed; a half-written chat is skipped by name. Real DuckDB files and the real
watcher; a counting fake embedder (plumbing)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from nbmemory import Memory
from nbmemory.embed import FakeEmbedder
from nbmemory.live import ChangeQueue, watch
from tests.conftest import CountingEmbedder
from tests.test_live import DEADLINE, eventually

SENT = 1767261600.0  # 2026-01-01 10:00:00 UTC


def chat(*messages: dict[str, Any]) -> str:
    return json.dumps(
        {
            "messages": list(messages),
            "users": {
                "u-ada": {"username": "u-ada", "name": "Ada L", "display_name": "Ada Lovelace"},
                "jupyternaut": {
                    "username": "jupyternaut",
                    "name": "Jupyternaut",
                    "display_name": "Jupyternaut",
                },
            },
            "metadata": {"id": "c1"},
            "attachments": {},
        }
    )


def message(n: int, sender: Any, body: str, **extra: Any) -> dict[str, Any]:
    return {"type": "msg", "id": f"m{n}", "time": SENT + 60 * n, "sender": sender, "body": body, **extra}


TEAM = chat(
    message(0, "u-ada", "How do I rotate the quokka credentials?"),
    message(1, "jupyternaut", "Run the quokka-rotate job, then restart the gateway."),
    message(2, "u-ada", "this was a typo", deleted=True),
    message(3, {"username": "bob", "display_name": "Bob Stone"}, "Thanks, the gateway is back."),
)


@pytest.fixture
def counting() -> CountingEmbedder:
    return CountingEmbedder(FakeEmbedder(dim=32))


@pytest.fixture
def chats(tmp_path: Path) -> Path:
    folder = tmp_path / "chats"
    folder.mkdir()
    (folder / "team.chat").write_text(TEAM)
    return folder


@pytest.fixture
def memory(tmp_path: Path, counting: CountingEmbedder, chats: Path) -> Iterator[Memory]:
    with Memory(tmp_path / "m.duckdb", embedder=counting) as mem:  # type: ignore[arg-type]
        mem.index(chats)
        yield mem


def found(mem: Memory, word: str) -> list[Any]:
    return [h for h in mem.search(word, k=10, kind="chat", log=False).hits if word in h.text]


def test_a_chat_is_indexed_one_item_per_message_with_sender_and_time(memory: Memory, chats: Path) -> None:
    path = str(chats / "team.chat")
    hit = found(memory, "quokka-rotate")[0]
    assert (hit.kind, hit.source, hit.conversation) == ("chat", path, path)
    assert hit.speaker == "Jupyternaut"
    assert hit.event_at == datetime(2026, 1, 1, 10, 1)
    assert hit.cell_index == 1 and hit.cell_id == "m1"
    # Its location names the message, not a cell; it has no cell number.
    assert hit.location == f"{path}#message 2" and hit.to_dict()["cell_number"] is None
    assert memory.get(hit.id).location == f"{path}#message 2"
    # A sender given as a user object; the deleted message is left out.
    assert found(memory, "Thanks")[0].speaker == "Bob Stone"
    assert found(memory, "typo") == []
    rows = memory.db.fetchall("SELECT speaker FROM chunks WHERE kind = 'chat' ORDER BY ordinal")
    assert [r[0] for r in rows] == ["Ada Lovelace", "Jupyternaut", "Bob Stone"]
    # The hit is labelled with the chat and the message.
    trace = memory.search("quokka-rotate", k=3, kind="chat").trace
    assert "team.chat, message 2 (Jupyternaut)" in trace.labels.values()


def test_an_edited_chat_embeds_only_the_changed_message(
    memory: Memory, chats: Path, counting: CountingEmbedder
) -> None:
    counting.texts.clear()
    edited = json.loads(TEAM)
    edited["messages"][1]["body"] = "Run the quokka-rotate-v2 job instead."
    edited["messages"][1]["edited"] = True
    edited["messages"].append(message(4, "u-ada", "Noted, wombat schedule updated."))
    (chats / "team.chat").write_text(json.dumps(edited))
    report = memory.index(chats)
    assert report.chunks_embedded == 2 and report.chunks_kept == 2
    assert len(counting.texts) == 2
    assert [h.text for h in found(memory, "quokka-rotate")] == ["Run the quokka-rotate-v2 job instead."]
    assert found(memory, "wombat")[0].speaker == "Ada Lovelace"


def test_a_half_written_chat_is_skipped_by_name_and_nothing_is_lost(memory: Memory, chats: Path) -> None:
    (chats / "team.chat").write_text(TEAM[: len(TEAM) // 2])
    (chats / "empty.chat").write_text("")  # a new chat, nothing said yet
    report = memory.index(chats)
    assert [(Path(p).name, why.split(" (")[0]) for p, why in report.skipped] == [
        ("team.chat", "not valid chat JSON")
    ]
    assert found(memory, "quokka-rotate")[0].speaker == "Jupyternaut"


def test_the_live_feed_picks_up_a_chat_edit(memory: Memory, chats: Path) -> None:
    queue = ChangeQueue(memory, quiet=0.1)
    stop, ready = threading.Event(), threading.Event()
    thread = threading.Thread(target=watch, args=(queue, [chats], stop, ready), daemon=True)
    thread.start()
    try:
        assert ready.wait(DEADLINE), "the watcher did not start"
        new = json.loads(TEAM)
        new["messages"].append(message(5, "jupyternaut", "The platypus cache was cleared."))
        (chats / "team.chat").write_text(json.dumps(new))
        eventually(lambda: found(memory, "platypus"), what="the new message is found")
        assert found(memory, "platypus")[0].speaker == "Jupyternaut"
    finally:
        stop.set()
        thread.join(DEADLINE)
        queue.close()
