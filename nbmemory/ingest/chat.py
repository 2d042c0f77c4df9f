"""Chats of JupyterLab (jupyterlab-chat ``.chat`` files, which Jupyter AI v3 writes): one chunk
per message, with who sent it and when.

A ``.chat`` file is JSON: ``messages`` (each ``type``, ``id``, ``time`` in epoch seconds,
``sender`` as a user id or a user object, ``body``, optional ``deleted`` and ``edited``),
``users`` (by id: ``username``, ``name``, ``display_name``), ``metadata`` and ``attachments``.
Deleted messages are left out; a message longer than the chunk size is cut like plain text.
A new, empty chat file has no messages.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from nbmemory.errors import BadFileError
from nbmemory.ingest.text import chunk_plain
from nbmemory.ingest.types import ChunkDraft


def _name(user: Any) -> str | None:
    if not isinstance(user, dict):
        return None
    for key in ("display_name", "name", "username"):
        value = user.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def sender_name(sender: Any, users: dict[str, Any]) -> str | None:
    """The sender's display name: through ``users`` for an id, from the object itself otherwise."""
    if isinstance(sender, str):
        return _name(users.get(sender)) or sender or None
    if isinstance(sender, dict):
        username = sender.get("username")
        return _name(sender) or (_name(users.get(username)) if isinstance(username, str) else None)
    return None


def _sent_at(value: Any) -> datetime | None:
    """A message's ``time`` (epoch seconds) as naive UTC; None when it is not a plausible time."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return datetime.fromtimestamp(float(value), UTC).replace(tzinfo=None)
    except (OverflowError, OSError, ValueError):
        return None


def chunk_chat(path: str, text: str, max_chars: int) -> list[ChunkDraft]:
    """The messages of the chat in ``text``: one chunk each (more for a long one), in order.

    Raises
    ------
    BadFileError
        Not valid JSON (a half-written file), or JSON that is not a chat.
    """
    if not text.strip():
        return []
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadFileError(
            path, f"not valid chat JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}): half-written?"
        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("messages", []), list):
        raise BadFileError(path, "not a chat: expected a JSON object with a 'messages' list")
    listed = doc.get("users")
    users: dict[str, Any] = listed if isinstance(listed, dict) else {}
    chat = os.path.basename(path)
    drafts: list[ChunkDraft] = []
    number = 0
    for message in doc.get("messages", []):
        if not isinstance(message, dict) or message.get("type", "msg") != "msg" or message.get("deleted"):
            continue
        body = message.get("body")
        if not isinstance(body, str) or not body.strip():
            continue
        speaker = sender_name(message.get("sender"), users)
        at = _sent_at(message.get("time"))
        msg_id = message.get("id") if isinstance(message.get("id"), str) else None
        heading = f"{chat} > {speaker}" if speaker else chat
        for piece in chunk_plain(body, max_chars, heading=heading):
            drafts.append(
                replace(
                    piece,
                    kind="chat",
                    heading=heading,
                    line_start=None,
                    line_end=None,
                    cell_id=msg_id,
                    cell_index=number,
                    event_at=at,
                    speaker=speaker,
                    conversation=path,
                )
            )
        number += 1
    return drafts
