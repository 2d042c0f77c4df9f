"""REST handlers under ``/nbmemory/``: JSON in, JSON out, every verb authenticated.

Blocking nbmemory calls run in the state's thread pool. User mistakes answer 4xx with
``{"message": ...}``: 400 for a bad argument or an :class:`~nbmemory.NbMemoryError`, 403 for a
path outside the server's root, 404 for an unknown item or job, 409 for a second tuning run.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tornado.web
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado.ioloop import IOLoop

from nbmemory.errors import NbMemoryError, NotFoundError
from nbmemory.forget_source import forget_source
from nbmemory.items import cell_number
from nbmemory.jobs import IndexJob, TuneJob, error_text
from nbmemory.options import (
    MAX_NAME,
    MAX_RESULTS,
    TUNE_OPTIONS,
    filter_options,
    hit_payload,
    link_outside,
    local_memory,
    owned_memory,
    query_sources,
    score_scale,
    search_arguments,
    search_payload,
    to_jsonable,
    tune_options,
)
from nbmemory.search.prefix import expand_last_word
from nbmemory.server.agents import AgentsHandler
from nbmemory.server.capture import KernelCapture, capturing_kernels
from nbmemory.server.notebooks import NotebooksHandler
from nbmemory.server.state import ServerState

MAX_K = MAX_RESULTS
MAX_NAMESPACE = MAX_NAME
# A remembered note is short; a larger document goes through `index`. Bodies are checked before
# parsing, texts before redaction and embedding (both cost time in proportion to the size).
MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_TEXT_CHARS = 1_000_000
MAX_PATH_CHARS = 4096
MAX_HEADING_CHARS = 500
#: Ids one restore may name: a forget by path can take a whole notebook's cells.
MAX_RESTORE = 100_000
# The tuning options a request may set: TUNE_OPTIONS but the device, which the server picks (cuda
# when it has one): a browser cannot see the server's GPUs.
TUNE_KEYS = tuple(o.name for o in TUNE_OPTIONS if o.name != "device")
# Lower bounds of the integer options that TuneOptions and TrainConfig do not check themselves.
TUNE_MINIMUMS = {"max_queries": 1, "max_steps": 0, "seed": 0}


def _fail(status: int, message: str) -> tornado.web.HTTPError:
    # No args: tornado would %-format log_message, and a message may hold a '%'.
    return tornado.web.HTTPError(status, message.replace("%", "%%"))


def _relative(path: str | None, root: Path) -> str | None:
    """``path`` relative to the server root (what the frontend opens), or None outside it."""
    if not path:
        return None
    try:
        return Path(path).resolve().relative_to(root).as_posix()
    except (ValueError, OSError):
        return None


class MemoryHandler(APIHandler):
    """Base class: JSON replies, argument checks, and nbmemory calls off the event loop."""

    @property
    def state(self) -> ServerState:
        return self.settings["nbmemory"]

    def reply(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        text = json.dumps(data, default=to_jsonable, ensure_ascii=False)
        # Stored text never reaches a browser as markup, even if sniffed: escape <, > and &.
        self.finish(text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(memory, *args, **kwargs)`` in a worker thread; nbmemory errors become 4xx."""
        state = self.state

        def work() -> Any:
            return fn(state.memory(), *args, **kwargs)

        try:
            return await IOLoop.current().run_in_executor(state.executor, work)
        except NotFoundError as exc:
            raise _fail(404, str(exc)) from exc
        except NbMemoryError as exc:
            raise _fail(400, str(exc)) from exc

    def body(self) -> dict[str, Any]:
        size = len(self.request.body or b"")
        if size > MAX_BODY_BYTES:
            raise _fail(
                413,
                f"the request body is {size} bytes; the nbmemory API takes at most {MAX_BODY_BYTES} "
                "(index large documents as files instead)",
            )
        try:
            data = self.get_json_body()
        except tornado.web.HTTPError as exc:
            raise _fail(400, "the request body is not valid JSON") from exc
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise _fail(400, "the request body must be a JSON object")
        return data

    def raw_query_argument(self, name: str) -> str | None:
        """A query argument exactly as sent: tornado's getters strip spaces and turn control
        characters into spaces, which would read namespace "A " as "A"."""
        values = self.request.query_arguments.get(name)
        if not values:
            return None
        try:
            return values[-1].decode("utf-8")
        except UnicodeDecodeError:
            raise _fail(400, f"{name} is not valid UTF-8") from None

    def int_arg(self, name: str, value: Any, default: int, low: int = 1, high: int = MAX_K) -> int:
        if value is None or value == "":
            return default
        if isinstance(value, bool):
            raise _fail(400, f"{name} must be an integer from {low} to {high}, got {value!r}")
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise _fail(400, f"{name} must be an integer from {low} to {high}, got {value!r}") from None
        if isinstance(value, float) and value != number:
            raise _fail(400, f"{name} must be an integer from {low} to {high}, got {value!r}")
        if not low <= number <= high:
            raise _fail(400, f"{name} must be an integer from {low} to {high}, got {number}")
        return number

    def filter_values(self) -> dict[str, Any]:
        """The search filters of the query string (:func:`~nbmemory.options.filter_options`) by
        option name, as :func:`~nbmemory.options.search_arguments` reads them."""
        values: dict[str, Any] = {}
        for option in filter_options():
            if option.name in ("ns", "speaker", "conversation"):
                continue  # read below, verbatim
            if option.repeatable:
                values[option.name] = [x for x in self.get_query_arguments(option.name) if x]
            else:
                values[option.name] = self.get_query_argument(option.name, None) or None
        # Not stripped: "A " is another namespace than "A", and must not be read as it.
        values["ns"] = _namespace(self.raw_query_argument("ns"))
        for name in ("speaker", "conversation"):  # matched exactly, like the namespace
            values[name] = _namespace(self.raw_query_argument(name), name)
        return values

    def item_id(self, raw: str) -> int:
        try:
            return int(raw)
        except ValueError:
            raise _fail(400, f"item id must be an integer, got {raw!r}") from None

    def hits(self, hits: list[Any]) -> list[dict[str, Any]]:
        return [hit_json(hit, self.state.root_dir) for hit in hits]

    def inside_root(self, raw: Any, what: str = "path") -> Path:
        """Resolve a path named by a request; 403 unless it lies inside the server root."""
        if not isinstance(raw, str) or not raw.strip():
            raise _fail(400, f"{what} must be a non-empty string")
        if "\x00" in raw:
            raise _fail(400, f"{what} must not contain NUL characters")
        if len(raw) > MAX_PATH_CHARS:
            raise _fail(400, f"{what} is too long: {len(raw)} characters, at most {MAX_PATH_CHARS}")
        root = self.state.root_dir
        candidate = Path(raw).expanduser()
        if ".." in candidate.parts:
            raise _fail(403, f"{what} {raw!r} leaves the server root: '..' is not allowed")
        try:
            resolved = (candidate if candidate.is_absolute() else root / candidate).resolve()
        except (OSError, RuntimeError, ValueError) as exc:  # a name too long, a symlink loop
            raise _fail(400, f"{what} {raw!r} cannot be resolved: {type(exc).__name__}") from None
        if resolved != root and root not in resolved.parents:
            raise _fail(403, f"{what} {raw!r} is outside the server root")
        return resolved


def hit_json(hit: Any, root: Path, parts: dict[str, float] | None = None) -> dict[str, Any]:
    """A hit as the REST API returns it: :func:`~nbmemory.options.hit_payload`, with the ``path``
    the frontend opens (relative to the server root, None outside it) and, for a search, the
    ``parts`` its score is made of."""
    data = hit_payload(hit)
    data["path"] = _relative(hit.source, root)
    if parts is not None:
        data["parts"] = parts
    return data


def search_json(result: Any, root: Path, explain: bool = False) -> dict[str, Any]:
    """A search's reply but for what the request itself said (``query``, ``searched``, ``k``,
    ``ms``): :func:`~nbmemory.options.search_payload` of REST hits, and the score's ``scale``."""
    parts = result.parts()
    data = search_payload(result, lambda hit: hit_json(hit, root, parts.get(hit.id, {})), trace=explain)
    data["scale"] = score_scale(result)
    if explain:
        data["explain"] = result.explain()
    return data


def _item_dict(item: Any, root: Path) -> dict[str, Any]:
    data = dataclasses.asdict(item)
    data["location"] = item.location
    data["cell_number"] = cell_number(item.cell_index)
    data["path"] = _relative(item.source, root)
    return data


def _typed(memory: Any, query: str) -> str:
    """``query`` with its last word read as a prefix (:func:`~nbmemory.search.prefix.expand_last_word`),
    when this process owns the memory; as it is when another process does (the index's terms
    are read here, and a client has no index of its own)."""
    local = local_memory(memory)
    return query if local is None else expand_last_word(local.db, query)


class SearchHandler(MemoryHandler):
    """``GET /nbmemory/search?q=&k=&ns=&kind=&tag=&path=&since=&until=&speaker=&conversation=``
    ``&explain=1&chunks=1&prefix=1``.

    Results come one per file (``more``: the file's other chunks) unless ``chunks=1``;
    ``rejected``/``reason`` flag a search with no confident answer (its hits are kept). Each hit's
    ``parts`` are what its score is made of (they sum to it); ``scale`` says what a score is.
    ``prefix=1`` (the sidebar, as you type) reads the last word, unless a space ends ``q``, as the
    beginning of a word: it stands for the indexed words it begins, and ``searched`` is the query
    that ran. A ``q`` without a letter or digit answers 400: there is nothing to search for.
    """

    @tornado.web.authenticated
    async def get(self) -> None:
        raw = self.get_query_argument("q", "", strip=False)
        query = raw.strip()
        if not query:
            raise _fail(400, "q is required")
        explain = self.get_query_argument("explain", "0").lower() in ("1", "true", "yes")
        chunks = self.get_query_argument("chunks", "0").lower() in ("1", "true", "yes")
        prefix = self.get_query_argument("prefix", "0").lower() in ("1", "true", "yes")
        values = {**self.filter_values(), "k": self.get_query_argument("k", None), "chunks": chunks}
        try:
            kwargs = search_arguments(query, values)
        except NbMemoryError as exc:
            raise _fail(400, str(exc)) from exc
        started = time.perf_counter()
        # A trailing space says the last word is finished: it is kept for the expansion to see.
        searched = query
        if prefix:
            searched = (await self.call(lambda mem: _typed(mem, raw.lstrip()))).strip()
        result = await self.call(lambda mem: mem.search(searched, **kwargs))
        found = search_json(result, self.state.root_dir, explain)
        data: dict[str, Any] = {
            "query": query,
            "searched": searched,
            "k": kwargs["k"],
            "ms": round((time.perf_counter() - started) * 1000, 1),
        }
        self.reply({**found, **data})


def _importance(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise _fail(400, f"importance must be a number from 0 to 1, got {value!r}")
    if not 0.0 <= float(value) <= 1.0:
        raise _fail(400, f"importance must be a number from 0 to 1, got {value}")
    return float(value)


def _tags(value: Any) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise _fail(400, "tags must be a list of strings")
    return value


def _text_size(text: str) -> None:
    if len(text) > MAX_TEXT_CHARS:
        raise _fail(
            413,
            f"text is {len(text)} characters; one item holds at most {MAX_TEXT_CHARS} over this API "
            "(index large documents as files instead)",
        )


def _namespace(value: Any, what: str = "namespace") -> str | None:
    """A namespace (or a speaker, a conversation: ``what``) named by a request: any text up to
    MAX_NAMESPACE characters, no control characters."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _fail(400, f"{what} must be a string, got {type(value).__name__}")
    if len(value) > MAX_NAMESPACE:
        raise _fail(400, f"{what} must be at most {MAX_NAMESPACE} characters, got {len(value)}")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise _fail(400, f"{what} must not contain control characters (tabs, newlines, NUL)")
    return value


def _turn(body: dict[str, Any]) -> dict[str, Any]:
    """The ``at``, ``speaker`` and ``conversation`` a body gives (those it leaves out are left out)."""
    out: dict[str, Any] = {}
    at = body.get("at")
    if at is not None:
        if not isinstance(at, str) or len(at) > 64:
            raise _fail(400, f"at must be an ISO 8601 time as a string, e.g. 2023-05-08T13:56, got {at!r}")
        out["at"] = at
    for name in ("speaker", "conversation"):
        if body.get(name) is not None:
            out[name] = _namespace(body[name], name) or ""
    return out


class RememberHandler(MemoryHandler):
    """``POST /nbmemory/remember`` with ``{text, tags, importance, namespace, source, heading, at,
    speaker, conversation, request_key}``.

    ``source`` (a path inside the server root) records where the text came from, ``heading`` the
    place in it (``"cell 7"``): the sidebar sends them for a selection or cell of a notebook.
    ``at`` (ISO 8601), ``speaker`` and ``conversation`` record a conversation turn: when it was
    said, by whom, in which conversation.

    ``request_key`` (optional, up to 100 characters) makes a retried POST idempotent: a client
    that lost the reply (the server died after committing) gets the item stored the first time.
    """

    @tornado.web.authenticated
    async def post(self) -> None:
        body = self.body()
        text = body.get("text")
        if not isinstance(text, str) or not text.strip():
            raise _fail(400, "text is required")
        _text_size(text)
        kwargs: dict[str, Any] = {"namespace": _namespace(body.get("namespace"))}
        if body.get("tags") is not None:
            kwargs["tags"] = _tags(body["tags"])
        if body.get("importance") is not None:
            kwargs["importance"] = _importance(body["importance"])
        if body.get("source") is not None:
            kwargs["source"] = str(self.inside_root(body["source"], "source"))
        heading = body.get("heading")
        if heading is not None:
            if not isinstance(heading, str) or len(heading) > MAX_HEADING_CHARS:
                raise _fail(400, f"heading must be a string of at most {MAX_HEADING_CHARS} characters")
            kwargs["heading"] = heading
        kwargs.update(_turn(body))
        key = body.get("request_key")
        if key is not None:
            if not isinstance(key, str) or not 0 < len(key) <= 100:
                raise _fail(400, "request_key must be a string of 1 to 100 characters")
            kwargs["request_key"] = "http:" + key
        item = await self.call(lambda mem: mem.remember(text, **kwargs))
        self.reply(_item_dict(item, self.state.root_dir), status=201)


class ItemHandler(MemoryHandler):
    """``GET``, ``PATCH`` (``{importance, pinned, tags, text, at, speaker, conversation}``; ``""``
    clears one of the last three) and ``DELETE`` (forget) one item."""

    @tornado.web.authenticated
    async def get(self, raw_id: str) -> None:
        item_id = self.item_id(raw_id)
        item = await self.call(lambda mem: mem.get(item_id))
        self.reply(_item_dict(item, self.state.root_dir))

    @tornado.web.authenticated
    async def patch(self, raw_id: str) -> None:
        item_id = self.item_id(raw_id)
        body = self.body()
        changes: dict[str, Any] = {}
        fields = ("importance", "pinned", "tags", "text", "at", "speaker", "conversation")
        unknown = sorted(set(body) - set(fields))
        if unknown:
            raise _fail(400, f"cannot change {unknown[0]!r}: use {', '.join(fields[:-1])} or {fields[-1]}")
        if body.get("importance") is not None:
            changes["importance"] = _importance(body["importance"])
        if body.get("pinned") is not None:
            if not isinstance(body["pinned"], bool):
                raise _fail(400, f"pinned must be true or false, got {body['pinned']!r}")
            changes["pinned"] = body["pinned"]
        if body.get("tags") is not None:
            changes["tags"] = _tags(body["tags"])
        if body.get("text") is not None:
            if not isinstance(body["text"], str) or not body["text"].strip():
                raise _fail(400, "text must be a non-empty string")
            _text_size(body["text"])
            changes["text"] = body["text"]
        changes.update(_turn(body))
        if not changes:
            raise _fail(400, f"nothing to change: give {', '.join(fields[:-1])} or {fields[-1]}")
        item = await self.call(lambda mem: mem.update(item_id, **changes))
        self.reply(_item_dict(item, self.state.root_dir))

    @tornado.web.authenticated
    async def delete(self, raw_id: str) -> None:
        item_id = self.item_id(raw_id)
        ids = await self.call(lambda mem: mem.forget(item_id))
        self.reply({"forgotten": ids})


class ForgetHandler(MemoryHandler):
    """``POST /nbmemory/forget`` with ``{query, k, namespace}``, ``{path}`` (inside the root) or
    ``{source_of: ID}``: every chunk of item ID's file, in its namespace (the sidebar's Forget on
    a file's hit; the item alone when it has no file). ``{forgotten: [...]}`` names the ids, which
    ``POST restore`` brings back."""

    @tornado.web.authenticated
    async def post(self) -> None:
        body = self.body()
        query, path, source_of = body.get("query"), body.get("path"), body.get("source_of")
        if sum(x is not None for x in (query, path, source_of)) != 1:
            raise _fail(400, "forget needs exactly one of query, path or source_of")
        if source_of is not None:
            if isinstance(source_of, bool) or not isinstance(source_of, int):
                raise _fail(400, f"source_of must be an item id, got {source_of!r}"[:300])
            ids = await self.call(lambda mem: forget_source(mem, source_of))
        elif query is not None:
            if not isinstance(query, str) or not query.strip():
                raise _fail(400, "query must be a non-empty string")
            k = self.int_arg("k", body.get("k"), 1)
            ns = _namespace(body.get("namespace"))
            ids = await self.call(lambda mem: mem.forget(query=query, k=k, namespace=ns))
        else:
            target = str(self.inside_root(path))
            ids = await self.call(lambda mem: mem.forget(path=target))
        self.reply({"forgotten": ids})


class RestoreHandler(MemoryHandler):
    """``POST /nbmemory/restore`` with ``{ids: [...]}``: bring forgotten items back (the sidebar's
    Undo); ``{restored: [...]}`` names those that were forgotten and are searchable again."""

    @tornado.web.authenticated
    async def post(self) -> None:
        ids = self.body().get("ids")
        if (
            not isinstance(ids, list)
            or not 0 < len(ids) <= MAX_RESTORE
            or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
        ):
            raise _fail(400, f"ids must be a list of 1 to {MAX_RESTORE} item ids, got {ids!r}"[:300])
        restored = await self.call(lambda mem: mem.restore(ids))
        self.reply({"restored": restored})


class StatsHandler(MemoryHandler):
    """``GET /nbmemory/stats``: counts by kind and namespace, file size, model, owner or client."""

    @tornado.web.authenticated
    async def get(self) -> None:
        stats = await self.call(lambda mem: mem.stats())
        self.reply(stats)


class LiveHandler(MemoryHandler):
    """``GET /nbmemory/live``: ``{enabled, roots, server, watchers}``: the folders kept current,
    this server's live indexer (pending, indexing, last batch, failures with file and reason),
    and every live indexer of the memory (``nbmemory watch`` runs too). Paths are absolute."""

    @tornado.web.authenticated
    async def get(self) -> None:
        from nbmemory.runtime import watchers

        queue = self.state.live

        def read(mem: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
            return mem.roots(), watchers(mem.path)

        roots, running = await self.call(read)
        self.reply(
            {
                "enabled": queue is not None,
                "roots": roots,
                "server": queue.status() if queue is not None else None,
                "watchers": running,
            }
        )


class RelatedHandler(MemoryHandler):
    """``GET /nbmemory/related/<id>?k=5&ns=``."""

    @tornado.web.authenticated
    async def get(self, raw_id: str) -> None:
        item_id = self.item_id(raw_id)
        k = self.int_arg("k", self.get_query_argument("k", None), 5)
        ns = _namespace(self.raw_query_argument("ns"))
        hits = await self.call(lambda mem: mem.related(item_id, k=k, namespace=ns))
        self.reply({"id": item_id, "hits": self.hits(hits)})


class IndexHandler(MemoryHandler):
    """``POST /nbmemory/index`` with ``{paths: [...]}`` or ``{path}``: starts a job (202)."""

    @tornado.web.authenticated
    async def post(self) -> None:
        body = self.body()
        raw = body.get("paths", body.get("path"))
        if isinstance(raw, str):
            raw = [raw]
        if not isinstance(raw, list) or not raw:
            raise _fail(400, "paths is required: a list of files or folders inside the server root")
        resolved = [self.inside_root(p) for p in raw]
        missing = [p for p, r in zip(raw, resolved, strict=True) if not r.exists()]
        if missing:
            raise _fail(404, f"no such file or folder: {missing[0]}")
        namespace = _namespace(body.get("namespace"))
        state = self.state
        for folder in (r for r in resolved if r.is_dir()):
            link = await IOLoop.current().run_in_executor(
                state.executor, link_outside, folder, [state.root_dir]
            )
            if link is not None:
                shown = (
                    link.relative_to(state.root_dir).as_posix()
                    if state.root_dir in link.parents
                    else link.name
                )
                raise _fail(
                    403,
                    f"{shown} links to a file outside the server root: remove the link, or index the "
                    "files inside the root one by one",
                )
        job = IndexJob([str(p) for p in resolved], namespace)
        state.jobs[job.id] = job
        # In the owner the progress callback reports file by file (the shared memory serialises
        # the call with its other requests); a client of another owner only sees the end.
        job.start(state.memory, executor=state.job_executor)
        self.reply(job.to_dict(lambda p: _relative(p, state.root_dir)), status=202)


class IndexJobHandler(MemoryHandler):
    """``GET /nbmemory/index/<job>``: ``{state, done, total, current, report, error}``."""

    @tornado.web.authenticated
    async def get(self, job_id: str) -> None:
        job = self.state.jobs.get(job_id)
        if job is None:
            raise _fail(404, f"no index job {job_id!r}")
        self.reply(job.to_dict(lambda p: _relative(p, self.state.root_dir)))


def _tune_values(body: dict[str, Any]) -> dict[str, Any]:
    """The :data:`~nbmemory.options.TUNE_OPTIONS` values a request body asks for, defaults for the
    keys it leaves out; 400 for an unknown key or a value of the wrong type."""
    unknown = sorted(set(body) - set(TUNE_KEYS))
    if unknown:
        raise _fail(400, f"unknown tuning option {unknown[0]!r}: use {', '.join(TUNE_KEYS)}")
    values: dict[str, Any] = {}
    for option in TUNE_OPTIONS:
        name, flag = option.name, option.settings.get("action") == "store_true"
        value = body.get(name)
        if value is None:
            values[name] = False if flag else option.settings.get("default")
        elif flag:
            if not isinstance(value, bool):
                raise _fail(400, f"{name} must be true or false, got {value!r}")
            values[name] = value
        elif option.repeatable:
            values[name] = [_query_sources(value)]
        elif option.settings.get("type") is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise _fail(400, f"{name} must be an integer, got {value!r}")
            low = TUNE_MINIMUMS.get(name)
            if low is not None and value < low:
                raise _fail(400, f"{name} must be at least {low}, got {value}")
            values[name] = value
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise _fail(400, f"{name} must be a number, got {value!r}")
            values[name] = float(value)
    return values


def _query_sources(value: Any) -> str:
    """``query_source`` as a list (``["title", "log"]``) or a comma string, checked: ``"title,log"``."""
    parts = value.split(",") if isinstance(value, str) else value
    if not isinstance(parts, list) or not all(isinstance(p, str) for p in parts):
        raise _fail(400, f"query_source must be a list of strings or a comma-separated string, got {value!r}")
    sources = [p.strip() for p in parts if p.strip()]
    bad = [s for s in sources if s not in query_sources()]
    if bad or not sources:
        raise _fail(400, f"query_source must name one or more of {', '.join(query_sources())}, got {value!r}")
    return ",".join(sources)


def _running_tune(state: ServerState) -> tuple[str, TuneJob] | None:
    # By state, as GET tune/<job> reports it: a client that saw the end may start the next run.
    return next(((i, job) for i, job in state.tune_jobs.items() if job.state == "running"), None)


def _current_tune(state: ServerState) -> tuple[str, TuneJob] | None:
    """The running run, else the one started last (the jobs are kept in the order they started)."""
    latest = next(reversed(state.tune_jobs.items()), None)
    return _running_tune(state) or latest


def _tune_dict(job_id: str, job: TuneJob) -> dict[str, Any]:
    """What ``GET tune/<job>`` answers: where the run is, and at the end its verdict or error."""
    report: dict[str, Any] | None = None
    if job.state == "failed":
        report = {"error": error_text(job.error) if job.error else "failed"}
    elif job.state == "done":
        report = {"adopted": job.report.adopted, "version": job.report.version, "reason": job.report.reason}
    return {
        "job": job_id,
        "state": job.state,
        "phase": job.phase,
        "fraction": job.fraction,
        "status": job.status(),
        "report": report,
    }


class TuneHandler(MemoryHandler):
    """``POST /nbmemory/tune`` with optional tuning options (``{epochs, max_steps, query_source, ...}``,
    the names of :data:`~nbmemory.options.TUNE_OPTIONS`): starts a run (202, the job).

    One run at a time per server: a second POST while one runs answers 409 with the running
    job's id and status line. Tuning runs only in the process that owns the memory file.

    ``GET /nbmemory/tune``: the running job, else the one started last (as ``GET tune/<job>``
    answers it), ``null`` if none was started in this server: a reloaded sidebar follows a run
    again, and the sidebar asks on every page load, where "no run yet" is no error.
    """

    @tornado.web.authenticated
    async def get(self) -> None:
        current = _current_tune(self.state)
        self.reply(_tune_dict(*current) if current is not None else None)

    @tornado.web.authenticated
    async def post(self) -> None:
        values = _tune_values(self.body())
        try:
            options = tune_options(values)
        except NbMemoryError as exc:
            raise _fail(400, str(exc)) from exc
        state = self.state
        if self._refuse_second_run():
            return

        busy = (
            "the memory is owned by another process (a kernel, the command line or an agent): "
            "run %memtune there, or tune from here once it is closed"
        )
        memory = await self.call(lambda mem: owned_memory(mem, busy))
        # Checked again: another request may have started a run while the memory opened.
        if self._refuse_second_run():
            return
        job_id = uuid.uuid4().hex[:12]
        state.tune_jobs[job_id] = TuneJob(lambda tick: memory.tune(options, progress=tick))
        self.reply(_tune_dict(job_id, state.tune_jobs[job_id]), status=202)

    def _refuse_second_run(self) -> bool:
        """Answer 409 if a run is going on; whether it did."""
        running = _running_tune(self.state)
        if running is None:
            return False
        job_id, job = running
        self.reply(
            {
                "message": f"a tuning run is already going on ({job.status()}): wait for it",
                "job": job_id,
                "status": job.status(),
            },
            status=409,
        )
        return True


class TuneJobHandler(MemoryHandler):
    """``GET /nbmemory/tune/<job>``: ``{job, state, phase, fraction, status, report}``; ``report``
    is null while running, then ``{adopted, version, reason}``, or ``{error}`` if the run failed."""

    @tornado.web.authenticated
    async def get(self, job_id: str) -> None:
        job = self.state.tune_jobs.get(job_id)
        if job is None:
            raise _fail(404, f"no tuning job {job_id!r}")
        self.reply(_tune_dict(job_id, job))


class CaptureHandler(MemoryHandler):
    """``GET /nbmemory/capture``: ``{server_wide, env_off, kernels}``: whether every Python kernel
    this server starts captures its cells, whether ``NBMEMORY_CAPTURE=0`` turns capture off, and
    the kernels that capture into this memory now (``pid``, ``kernel_id``, ``notebook``,
    ``since``, ``runs``). ``PUT`` with ``{server_wide: bool}`` turns the first on or off for
    the kernels started from then on (:mod:`nbmemory.server.capture`)."""

    @property
    def capture(self) -> KernelCapture:
        return self.settings["nbmemory_capture"]

    async def _answer(self) -> None:
        kernels = await self.call(lambda mem: capturing_kernels(mem.path))
        for kernel in kernels:
            kernel["notebook"] = _relative(kernel.get("notebook"), self.state.root_dir) or kernel.get("notebook")
        self.reply({"server_wide": self.capture.server_wide, "env_off": self.capture.env_off(), "kernels": kernels})

    @tornado.web.authenticated
    async def get(self) -> None:
        await self._answer()

    @tornado.web.authenticated
    async def put(self) -> None:
        server_wide = self.body().get("server_wide")
        if not isinstance(server_wide, bool):
            raise _fail(400, f"server_wide must be true or false, got {server_wide!r}"[:300])
        self.capture.server_wide = server_wide
        await self._answer()


ROUTES: list[tuple[str, type[APIHandler]]] = [
    ("search", SearchHandler),
    ("remember", RememberHandler),
    (r"items/([^/]+)", ItemHandler),
    ("forget", ForgetHandler),
    ("restore", RestoreHandler),
    ("stats", StatsHandler),
    ("live", LiveHandler),
    ("index", IndexHandler),
    (r"index/([^/]+)", IndexJobHandler),
    ("tune", TuneHandler),
    (r"tune/([^/]+)", TuneJobHandler),
    (r"related/([^/]+)", RelatedHandler),
    # The built-in notebooks the Lab launcher offers; they touch no memory (nbmemory/server/notebooks.py).
    ("notebooks", NotebooksHandler),
    # What agents in this Lab may do through Jupyter AI's MCP server (nbmemory/server/agents.py).
    ("agents", AgentsHandler),
    # Which kernels capture their cells, and whether every new one does (nbmemory/server/capture.py).
    ("capture", CaptureHandler),
]


def setup_handlers(web_app: Any) -> None:
    """Add the ``/nbmemory/`` routes to the server's web application."""
    base = web_app.settings["base_url"]
    web_app.add_handlers(
        ".*$", [(url_path_join(base, "nbmemory", pattern) + "$", handler) for pattern, handler in ROUTES]
    )


__all__ = ["ROUTES", "setup_handlers"]
