"""``/nbmemory/notebooks``: the built-in notebooks the Lab launcher lists, and a fresh copy of one.

``GET`` lists them (``{"notebooks": [{name, title, file}, ...]}``); ``POST {"name", "dir"}``
copies one into ``dir`` (relative to the server's root, ``""`` for the root) under a name no file
has yet and answers 201 ``{"path"}``, relative to the root, for the launcher to open. Nothing of
the memory is opened.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import tornado.web
from jupyter_server.base.handlers import APIHandler
from tornado.ioloop import IOLoop

from nbmemory.errors import NbMemoryError
from nbmemory.jupyter.builtin_notebooks import NOTEBOOKS, builtin, fresh_copy

MAX_DIR_CHARS = 4096


def _fail(status: int, message: str) -> tornado.web.HTTPError:
    # No args: tornado would %-format log_message, and a message may hold a '%'.
    return tornado.web.HTTPError(status, message.replace("%", "%%"))


class NotebooksHandler(APIHandler):
    """List the built-in notebooks, or copy one into a folder under the server's root."""

    def _reply(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps(data, ensure_ascii=False))

    @property
    def root(self) -> Path:
        return Path(self.settings["nbmemory"].root_dir)

    @tornado.web.authenticated
    async def get(self) -> None:
        self._reply({"notebooks": [{"name": nb.name, "title": nb.title, "file": nb.file} for nb in NOTEBOOKS]})

    @tornado.web.authenticated
    async def post(self) -> None:
        try:
            body = self.get_json_body()
        except tornado.web.HTTPError as exc:
            raise _fail(400, "the request body is not valid JSON") from exc
        if not isinstance(body, dict):
            raise _fail(400, 'the request body must be a JSON object: {"name": ..., "dir": ...}')
        name, folder = body.get("name"), body.get("dir", "")
        if not isinstance(name, str):
            known = ", ".join(repr(nb.name) for nb in NOTEBOOKS)
            raise _fail(400, f"name must be one of {known}")
        try:
            builtin(name)
        except NbMemoryError as exc:
            raise _fail(400, str(exc)) from exc
        target = self._folder(folder)
        path = await IOLoop.current().run_in_executor(None, fresh_copy, name, target)
        self._reply({"path": path.relative_to(self.root).as_posix()}, status=201)

    def _folder(self, folder: Any) -> Path:
        """``folder`` resolved under the root; 400 outside it (or not a string), 404 when missing."""
        if folder is None:
            folder = ""
        if not isinstance(folder, str) or len(folder) > MAX_DIR_CHARS or "\x00" in folder:
            raise _fail(400, f"dir must be a folder path relative to the server's root, got {folder!r}")
        root = self.root.resolve()
        raw = Path(folder)
        if raw.is_absolute():
            raise _fail(400, f"dir {folder!r} is not relative to the server's root")
        target = (root / raw).resolve()
        if target != root and root not in target.parents:
            raise _fail(400, f"dir {folder!r} is outside the server's root")
        if not target.is_dir():
            why = "not a folder" if target.exists() else "no such folder"
            raise _fail(404, f"dir {folder!r}: {why} under the server's root")
        return target
