"""A JupyterLab chat (``.chat``, as jupyterlab-chat and Jupyter AI v3 save it) written through the
real Jupyter server's contents API under an indexed folder is found by a message's text, with its
sender, without an index call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nbmemory.server import ServerState
from tests.server.test_handlers import call, payload
from tests.server.test_live import eventually, indexed_root, live_state, nbmemory_watch  # noqa: F401

CHAT = {
    "messages": [
        {"type": "msg", "id": "a1", "time": 1767261600.0, "sender": "u-ada", "body": "Why is the build red?"},
        {
            "type": "msg",
            "id": "a2",
            "time": 1767261660.5,
            "sender": "jupyternaut",
            "body": "The narwhalq fixture pins an old schema; bump it to v3.",
        },
    ],
    "users": {
        "u-ada": {"username": "u-ada", "name": "Ada", "display_name": "Ada Lovelace"},
        "jupyternaut": {"username": "jupyternaut", "name": "Jupyternaut", "display_name": "Jupyternaut"},
    },
    "metadata": {},
    "attachments": {},
}


async def chat_hits(jp_fetch: Any, word: str) -> list[dict[str, Any]]:
    hits = payload(await call(jp_fetch, "GET", "search", q=word, k="10", chunks="1"))["hits"]
    return [h for h in hits if word in h["text"]]


async def test_a_chat_saved_through_the_contents_api_is_found_with_its_sender(
    jp_fetch: Any,
    jp_root_dir: Path,
    live_state: ServerState,  # noqa: F811
) -> None:
    await indexed_root(live_state, jp_root_dir)
    body = json.dumps({"type": "file", "format": "text", "content": json.dumps(CHAT)})
    response = await jp_fetch("api", "contents", "notes", "build.chat", method="PUT", body=body)
    assert response.code == 201
    hits = await eventually(lambda: chat_hits(jp_fetch, "narwhalq"), "the saved chat is found")
    assert hits[0]["path"] == "notes/build.chat"
    assert hits[0]["speaker"] == "Jupyternaut"
    assert hits[0]["kind"] == "chat"
