"""The ``/nbmemory/`` REST API as an attacker sees it: authentication on every route and verb,
input validation (4xx with a JSON message, never a 500), no path traversal through the ingest
endpoints, and stored text that never reaches a browser as markup (JSON API, JupyterLab sidebar,
ipywidgets explorer and notebook displays).

Routes are enumerated from the running server's routers, so a route added later is covered.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import tornado.web
from pytest_jupyter.jupyter_server import *  # noqa: F403
from tornado.httpclient import HTTPResponse
from traitlets.config import Config

import nbmemory.server
from nbmemory.embed import FakeEmbedder
from nbmemory.items import Hit, Item
from nbmemory.server import handlers
from nbmemory.server.agents import AgentsHandler
from nbmemory.server.handlers import MemoryHandler
from nbmemory.server.notebooks import NotebooksHandler
from tests.conftest import copy_store

REPO = Path(__file__).resolve().parents[2]
VERBS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
XSS = [
    "<script>alert('x')</script>",
    '<img src=x onerror="alert(1)">',
    "<svg/onload=alert(2)>",
    '"><iframe src="javascript:alert(3)"></iframe>',
    "</pre><b onmouseover=alert(4)>hover</b>",
]


# -- a server per test: default authentication settings, real memory file, fake embedder -------


@pytest.fixture(params=[True, False], ids=["default-auth", "strict-auth"])
def allow_unauthenticated(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture
def jp_server_config(tmp_path: Path, request: pytest.FixtureRequest, empty_store: Path) -> Iterator[Config]:
    from nbmemory.remote import connect

    # Jupyter Server's default lets a handler run without a user unless the handler itself
    # demands one: the default is what catches a verb that lacks @tornado.web.authenticated.
    allow = (
        request.getfixturevalue("allow_unauthenticated")
        if "allow_unauthenticated" in request.fixturenames
        else True
    )
    opened: list[Any] = []
    path = copy_store(empty_store, tmp_path / "home" / "memory.duckdb")

    def factory() -> Any:
        memory = connect(path, embedder=FakeEmbedder(dim=32))
        opened.append(memory)
        return memory

    nbmemory.server.set_memory_factory(factory)
    yield Config(
        {
            "ServerApp": {
                "jpserver_extensions": {"nbmemory": True, "jupyter_server_terminals": False},
                "allow_unauthenticated_access": allow,
            }
        }
    )
    nbmemory.server.set_memory_factory(None)
    for memory in opened:
        memory.close()


@pytest.fixture
def run(run_on_server: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Run a coroutine on the server's loop (pytest-jupyter's async hook lives in its conftest)."""
    return run_on_server


@pytest.fixture
def api(jp_fetch: Any, run: Callable[[Any], Any]) -> Callable[..., HTTPResponse]:
    def call(method: str, *parts: str, body: Any = None, **params: Any) -> HTTPResponse:
        kwargs: dict[str, Any] = {"method": method, "raise_error": False}
        if body is not None:
            kwargs["body"] = body if isinstance(body, (str, bytes)) else json.dumps(body)
        elif method in ("POST", "PATCH", "PUT"):
            kwargs["body"] = "{}"
        return run(jp_fetch("nbmemory", *parts, params=params, **kwargs))  # type: ignore[no-any-return]

    return call


def routes(web_app: tornado.web.Application) -> list[tuple[str, type[MemoryHandler]]]:
    """Every (URL pattern, handler class) of the nbmemory extension, walked from the routers."""
    found: list[tuple[str, type[MemoryHandler]]] = []

    def walk(rules: list[Any]) -> None:
        for rule in rules:
            target = rule.target
            if hasattr(target, "rules"):
                walk(target.rules)
            elif isinstance(target, type) and issubclass(target, tornado.web.RequestHandler):
                pattern = rule.matcher.regex.pattern
                if "/nbmemory/" in pattern or issubclass(target, MemoryHandler):
                    found.append((pattern, target))

    walk(web_app.default_router.rules)
    return found


def implemented(handler: type[tornado.web.RequestHandler]) -> list[str]:
    return [
        v for v in VERBS if getattr(handler, v.lower()) is not getattr(tornado.web.RequestHandler, v.lower())
    ]


def json_reply(response: HTTPResponse) -> Any:
    assert response.headers["Content-Type"].startswith("application/json"), response.headers
    assert response.headers.get("X-Content-Type-Options") == "nosniff"
    return json.loads(response.body) if response.body else None


# -- 1. authentication ----------------------------------------------------------------------------


def test_routes_are_the_handler_list(jp_serverapp: Any) -> None:
    found = routes(jp_serverapp.web_app)
    registered = {handler for _, handler in found}
    assert registered == {handler for _, handler in handlers.ROUTES}
    # NotebooksHandler copies a built-in notebook and AgentsHandler sets the agents' mode: neither
    # opens the memory.
    assert all(issubclass(h, (MemoryHandler, NotebooksHandler, AgentsHandler)) for h in registered)
    assert len(found) == len(handlers.ROUTES) == 15  # restore: the undo of forget; capture: which kernels capture


def test_every_route_and_verb_refuses_requests_without_a_valid_token(
    jp_serverapp: Any, http_server_client: Any, run: Callable[[Any], Any], allow_unauthenticated: bool
) -> None:
    found = routes(jp_serverapp.web_app)
    checked = 0
    for pattern, handler in found:
        url = re.sub(r"\([^)]*\)", "1", pattern).rstrip("$")
        for verb in VERBS:
            for headers in ({}, {"Authorization": "token wrong-token"}, {"Authorization": "Bearer wrong"}):
                body = "{}" if verb in ("POST", "PATCH", "PUT") else None
                response = run(
                    http_server_client.fetch(
                        url + "?q=x&k=1", method=verb, body=body, headers=headers, raise_error=False,
                        follow_redirects=False, allow_nonstandard_methods=True,
                    )
                )  # fmt: skip
                checked += 1
                where = f"{verb} {url} {headers or 'no token'} -> {response.code}"
                if verb == "OPTIONS":
                    # CORS preflight: Jupyter answers it unauthenticated, with headers only.
                    assert response.code in (200, 204, 401, 403, 405) and not response.body, where
                elif verb in implemented(handler):
                    assert response.code in (401, 403), where
                else:
                    assert response.code in (401, 403, 405), where
                if response.code < 300:
                    assert not response.body, where
    assert checked == len(found) * len(VERBS) * 3


def test_a_route_without_authenticated_would_be_caught(
    jp_serverapp: Any, http_server_client: Any, run: Callable[[Any], Any]
) -> None:
    # The check above in action: an undecorated handler registered like the real ones answers.
    class Careless(MemoryHandler):
        async def get(self) -> None:
            self.reply({"secret": "stored text"})

    base = jp_serverapp.web_app.settings["base_url"]
    jp_serverapp.web_app.add_handlers(".*$", [(base + "nbmemory/careless$", Careless)])
    response = run(http_server_client.fetch(base + "nbmemory/careless", raise_error=False))
    assert response.code == 200  # what the test above would flag
    assert Careless in {h for _, h in routes(jp_serverapp.web_app)}


def test_every_verb_carries_the_authenticated_decorator() -> None:
    for _, handler in handlers.ROUTES:
        # OPTIONS is Jupyter's CORS preflight (headers only, @allow_unauthenticated by design).
        for verb in (v for v in implemented(handler) if v != "OPTIONS"):
            code = getattr(handler, verb.lower()).__code__
            assert code.co_filename == tornado.web.__file__ and code.co_name == "wrapper", (
                f"{handler.__name__}.{verb}"
            )


# -- 2. input validation --------------------------------------------------------------------------

BAD_REQUESTS: list[tuple[str, tuple[str, ...], Any, dict[str, str], int, str]] = [
    # method, path parts, body, query params, status, message fragment
    ("GET", ("search",), None, {}, 400, "q is required"),
    ("GET", ("search",), None, {"q": "x", "k": "ten"}, 400, "k must be an integer"),
    ("GET", ("search",), None, {"q": "x", "k": "2.5"}, 400, "k must be an integer"),
    ("GET", ("search",), None, {"q": "x", "k": "-3"}, 400, "k must be an integer"),
    ("GET", ("search",), None, {"q": "x", "k": "1e9"}, 400, "k must be an integer"),
    ("GET", ("search",), None, {"q": "x", "k": "99999999999999999999999"}, 400, "k must be an integer"),
    ("GET", ("search",), None, {"q": "x", "kind": "<script>"}, 400, "kind must be one of"),
    ("GET", ("search",), None, {"q": "x", "since": "yesterday-ish"}, 400, "not understood"),
    ("GET", ("search",), None, {"q": "x", "until": "9999-99-99"}, 400, "not understood"),
    ("GET", ("search",), None, {"q": "x", "ns": "a\x00b"}, 400, "control characters"),
    ("GET", ("search",), None, {"q": "x", "ns": "a\nb"}, 400, "control characters"),
    ("GET", ("search",), None, {"q": "x", "ns": "n" * 500}, 400, "at most 200 characters"),
    ("POST", ("remember",), "{not json", {}, 400, "not valid JSON"),
    ("POST", ("remember",), "[1, 2]", {}, 400, "must be a JSON object"),
    ("POST", ("remember",), '"text"', {}, 400, "must be a JSON object"),
    ("POST", ("remember",), "null", {}, 400, "text is required"),
    ("POST", ("remember",), {}, {}, 400, "text is required"),
    ("POST", ("remember",), {"text": 42}, {}, 400, "text is required"),
    ("POST", ("remember",), {"text": ["a"]}, {}, 400, "text is required"),
    ("POST", ("remember",), {"text": "   "}, {}, 400, "text is required"),
    ("POST", ("remember",), {"text": "x", "tags": {"a": 1}}, {}, 400, "tags must be a list of strings"),
    ("POST", ("remember",), {"text": "x", "tags": [1]}, {}, 400, "tags must be a list of strings"),
    ("POST", ("remember",), {"text": "x", "importance": "high"}, {}, 400, "importance must be a number"),
    ("POST", ("remember",), {"text": "x", "importance": True}, {}, 400, "importance must be a number"),
    ("POST", ("remember",), '{"text": "x", "importance": NaN}', {}, 400, "importance must be a number"),
    ("POST", ("remember",), '{"text": "x", "importance": Infinity}', {}, 400, "importance must be a number"),
    ("POST", ("remember",), {"text": "x", "importance": -0.1}, {}, 400, "importance must be a number"),
    ("POST", ("remember",), {"text": "x", "namespace": 7}, {}, 400, "namespace must be a string"),
    ("POST", ("remember",), {"text": "x", "namespace": ["a"]}, {}, 400, "namespace must be a string"),
    ("POST", ("remember",), {"text": "x", "namespace": "a\tb"}, {}, 400, "control characters"),
    ("POST", ("remember",), {"text": "x", "request_key": 5}, {}, 400, "request_key must be a string"),
    ("POST", ("remember",), {"text": "x", "request_key": "k" * 101}, {}, 400, "request_key must be a string"),
    ("POST", ("remember",), {"text": "x" * 1_000_001}, {}, 413, "at most"),
    ("GET", ("items", "abc"), None, {}, 400, "item id must be an integer"),
    ("GET", ("items", "1.5"), None, {}, 400, "item id must be an integer"),
    ("GET", ("items", "-1"), None, {}, 404, "no item"),
    ("GET", ("items", "99999999999999999999999"), None, {}, 404, "no item"),
    ("GET", ("items", "999"), None, {}, 404, "no item with id 999"),
    ("DELETE", ("items", "999"), None, {}, 404, "no item with id 999"),
    ("PATCH", ("items", "999"), {"pinned": True}, {}, 404, "no item"),
    ("PATCH", ("items", "1"), "{broken", {}, 400, "not valid JSON"),
    ("POST", ("forget",), {}, {}, 400, "exactly one of query, path or source_of"),
    ("POST", ("restore",), {}, {}, 400, "ids must be a list of 1 to"),
    ("POST", ("restore",), {"ids": []}, {}, 400, "ids must be a list of 1 to"),
    ("POST", ("restore",), {"ids": [True]}, {}, 400, "ids must be a list of 1 to"),
    ("POST", ("restore",), {"ids": ["7"]}, {}, 400, "ids must be a list of 1 to"),
    ("POST", ("restore",), {"ids": 7}, {}, 400, "ids must be a list of 1 to"),
    ("POST", ("restore",), {"ids": [2**70]}, {}, 404, "no item with id"),
    ("POST", ("forget",), {"query": "x", "path": "y"}, {}, 400, "exactly one of query, path or source_of"),
    ("POST", ("forget",), {"query": 3}, {}, 400, "query must be a non-empty string"),
    ("POST", ("forget",), {"query": "x", "k": 0}, {}, 400, "k must be an integer"),
    ("POST", ("forget",), {"query": "x", "k": "all"}, {}, 400, "k must be an integer"),
    ("POST", ("forget",), {"path": 3}, {}, 400, "path must be a non-empty string"),
    ("POST", ("forget",), {"query": "x", "namespace": {"$ne": 1}}, {}, 400, "namespace must be a string"),
    ("POST", ("index",), {}, {}, 400, "paths is required"),
    ("POST", ("index",), {"paths": "nope.md"}, {}, 404, "no such file or folder"),
    ("POST", ("index",), {"paths": [1, 2]}, {}, 400, "must be a non-empty string"),
    ("POST", ("index",), {"paths": ["a\x00b"]}, {}, 400, "NUL"),
    ("POST", ("index",), {"paths": ["x" * 5000]}, {}, 400, "too long"),
    ("POST", ("index",), {"paths": ["notes"], "namespace": 1}, {}, 400, "namespace must be a string"),
    ("GET", ("index", "no-such-job"), None, {}, 404, "no index job"),
    ("GET", ("index", "..%2F..%2Fetc"), None, {}, 404, "no index job"),
    ("GET", ("related", "x"), None, {}, 400, "item id must be an integer"),
    ("GET", ("related", "999"), None, {"k": "0"}, 400, "k must be an integer"),
    ("GET", ("related", "999"), None, {"ns": "a\x01"}, 400, "control characters"),
    ("GET", ("related", "999"), None, {}, 404, "no item with id 999"),
]


def test_bad_requests_get_a_clear_4xx_json_message(
    api: Callable[..., HTTPResponse], jp_root_dir: Path, nbm_item: int
) -> None:
    (jp_root_dir / "notes").mkdir(exist_ok=True)
    problems = []
    for method, parts, body, params, status, fragment in BAD_REQUESTS:
        response = api(method, *parts, body=body, **params)
        reply = json_reply(response) if response.body else {}
        message = reply.get("message", "") if isinstance(reply, dict) else ""
        if response.code != status or fragment not in message:
            problems.append((method, parts, str(body)[:40], params, response.code, message[:120]))
    assert problems == [], "\n".join(map(str, problems))


@pytest.fixture
def nbm_item(api: Callable[..., HTTPResponse]) -> int:
    return int(json_reply(api("POST", "remember", body={"text": "one stored item"}))["id"])


def test_huge_bodies_are_refused_before_parsing(api: Callable[..., HTTPResponse]) -> None:
    big = json.dumps({"text": "word " * 3_000_000})  # 15 MB
    response = api("POST", "remember", body=big)
    assert response.code == 413
    assert "request body is" in json_reply(response)["message"]


def test_a_long_query_is_answered_not_crashed(api: Callable[..., HTTPResponse]) -> None:
    response = api("GET", "search", q="deploy " * 1000, k="5")
    assert response.code in (200, 400), response.code
    json_reply(response)


# -- 3. no path traversal through the ingest endpoints -------------------------------------------


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.md").write_text("# Outside\n\nexfiltrated-outside-content\n")
    return folder


def wait_job(api: Callable[..., HTTPResponse], job_id: str) -> dict[str, Any]:
    for _ in range(600):
        job = json_reply(api("GET", "index", job_id))
        if job["state"] in ("done", "error"):
            return dict(job)
        threading.Event().wait(0.05)
    raise AssertionError(f"index job {job_id} did not finish")


@pytest.mark.parametrize(
    "path",
    [
        "../outside",
        "../outside/secret.md",
        "notes/../../outside",
        "./notes/../../outside/secret.md",
        "{outside}",
        "{outside}/secret.md",
        "{root}/../outside",
        "~/",
        "link-to-outside",
        "link-to-outside/secret.md",
        "notes/file-link.md",
    ],
)
def test_index_and_forget_paths_outside_the_root_are_refused(
    api: Callable[..., HTTPResponse], jp_root_dir: Path, outside: Path, path: str
) -> None:
    notes = jp_root_dir / "notes"
    notes.mkdir(exist_ok=True)
    (jp_root_dir / "link-to-outside").symlink_to(outside)
    (notes / "file-link.md").symlink_to(outside / "secret.md")
    raw = path.format(outside=outside, root=jp_root_dir)
    for endpoint, body in (("index", {"paths": [raw]}), ("forget", {"path": raw})):
        response = api("POST", endpoint, body=body)
        assert response.code == 403, (endpoint, raw, response.code, response.body[:200])
        assert "server root" in json_reply(response)["message"]


def test_a_folder_with_a_file_link_pointing_out_is_refused_not_followed(
    api: Callable[..., HTTPResponse], jp_root_dir: Path, outside: Path
) -> None:
    notes = jp_root_dir / "notes"
    notes.mkdir()
    (notes / "inside.md").write_text("# Inside\n\ninside-content\n")
    (notes / "leak.md").symlink_to(outside / "secret.md")
    response = api("POST", "index", body={"paths": ["notes"]})
    assert response.code == 403
    assert "leak.md" in json_reply(response)["message"]
    (notes / "leak.md").unlink()
    # A link that stays inside the root is fine.
    (notes / "alias.md").symlink_to(notes / "inside.md")
    response = api("POST", "index", body={"paths": ["notes"]})
    assert response.code == 202
    assert wait_job(api, json_reply(response)["id"])["state"] == "done"
    hits = json_reply(api("GET", "search", q="exfiltrated outside content"))["hits"]
    assert all("exfiltrated" not in h["text"] for h in hits)


def test_the_index_job_reports_paths_relative_to_the_root(
    api: Callable[..., HTTPResponse], jp_root_dir: Path
) -> None:
    notes = jp_root_dir / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nalpha\n")
    job = wait_job(api, json_reply(api("POST", "index", body={"paths": ["notes"]}))["id"])
    assert job["state"] == "done" and job["paths"] == ["notes"]
    assert str(jp_root_dir) not in json.dumps(job)


# -- 4. stored text never becomes markup ---------------------------------------------------------


def test_the_json_api_never_sends_markup(api: Callable[..., HTTPResponse], jp_root_dir: Path) -> None:
    for i, text in enumerate(XSS):
        body = {"text": f"payload {text}", "tags": [text], "namespace": f"ns{i}<b>"}
        assert api("POST", "remember", body=body).code == 201
    notes = jp_root_dir / "notes"
    notes.mkdir()
    (notes / "<img src=x onerror=alert(5)>.md").write_text("# <script>t()</script>\n\npayload in a file\n")
    job = wait_job(api, json_reply(api("POST", "index", body={"paths": ["notes"]}))["id"])
    assert job["state"] == "done"
    responses = [
        api("GET", "search", q="payload", k="20", explain="1"),
        api("GET", "stats"),
        api("GET", "items", "1"),
        api("GET", "related", "1", k="10"),
        api("PATCH", "items", "1", body={"tags": XSS}),
        api("GET", "index", job["id"]),
        api("GET", "search", q="x", kind="<script>"),  # an error message that quotes the input
    ]
    for response in responses:
        assert response.headers["Content-Type"].startswith("application/json"), response.effective_url
        assert response.headers.get("X-Content-Type-Options") == "nosniff"
        if response.code < 400:
            # Our replies escape <, > and &: not even a sniffing browser sees a tag.
            assert b"<" not in response.body and b">" not in response.body, response.effective_url
    hits = json_reply(responses[0])["hits"]
    assert {h["text"] for h in hits} >= {f"payload {t}" for t in XSS}
    # A path under /nbmemory/ that is no route: Jupyter's own 404 page, which does not echo it.
    missing = api("GET", "<script>alert(1)</script>")
    assert missing.code == 404 and b"<script>alert" not in (missing.body or b"")


LABEXT_SOURCES = sorted((REPO / "labextension" / "src").glob("*.ts"))
LABEXT_BUILT = sorted((REPO / "nbmemory" / "labextension" / "static").glob("*.js"))
HTML_SINKS = re.compile(
    r"\.innerHTML\b|\.outerHTML\b|insertAdjacentHTML|document\.write|dangerouslySetInnerHTML"
    r"|createContextualFragment|DOMParser|srcdoc"
)
CODE_SINKS = re.compile(r"\beval\(|new Function\(|setTimeout\(\s*['\"`]")


@pytest.mark.parametrize(
    "path", LABEXT_SOURCES + LABEXT_BUILT, ids=[p.name for p in LABEXT_SOURCES + LABEXT_BUILT]
)
def test_the_lab_extension_never_parses_stored_text_as_html(path: Path) -> None:
    # The sidebar builds its DOM with createElement + textContent (see panel.ts `el`); the
    # shipped bundle is checked too, as what the browser actually runs.
    text = path.read_text(encoding="utf-8")
    assert HTML_SINKS.findall(text) == [], path.name
    if path.suffix == ".ts":
        # (The built bundle holds webpack's runtime, whose `new Function("return this")` finds
        # the global object and touches no data.)
        assert CODE_SINKS.findall(text) == [], path.name


def test_the_lab_panel_sets_hit_fields_only_as_text() -> None:
    panel = (REPO / "labextension" / "src" / "panel.ts").read_text(encoding="utf-8")
    assert "node.textContent = text" in panel
    for field in ("hit.heading", "hit.snippet", "hit.text", "hit.kind", "hit.namespace", "hit.location"):
        for line in (line for line in panel.splitlines() if field in line):
            assert "innerHTML" not in line and "html" not in line.lower(), line


class Elements(HTMLParser):
    """Every element and attribute a browser would build from the HTML."""

    ALLOWED = frozenset({"div", "b", "i", "table", "thead", "tbody", "tr", "th", "td", "details", "summary",
                         "small", "span", "a", "br", "pre", "code", "ul", "li", "p", "hr"})  # fmt: skip

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.bad: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag not in self.ALLOWED:
            self.bad.append(f"<{tag}>")
        for name, value in attrs:
            if name.startswith("on") or name in ("srcdoc", "formaction"):
                self.bad.append(f"{tag}[{name}]")
            if (
                name in ("href", "src")
                and value
                and value.strip().lower().startswith(("javascript:", "data:"))
            ):
                self.bad.append(f"{tag}[{name}={value[:20]}]")


def markup_problems(html: str) -> list[str]:
    parser = Elements()
    parser.feed(html)
    parser.close()
    return parser.bad


def _payload_hit(i: int, payload: str) -> Hit:
    return Hit(
        id=i, score=0.5, text=f"text {payload}", snippet=f"snippet {payload}",
        source=f"/tmp/{payload}.md", kind="memory", namespace=f"ns {payload}", heading=f"heading {payload}",
        cell_id=f"'{payload}", cell_index=None, line_start=1, line_end=2, tags=[payload], importance=0.5,
        updated_at=None, ranks={"bm25": 1}, retriever_scores={"bm25": 1.0},
    )  # fmt: skip


def test_notebook_displays_escape_every_stored_field() -> None:
    from nbmemory.jupyter.display import HitTable, ItemView, StatsView, TextBlock
    from nbmemory.jupyter.notebook_context import Links
    from nbmemory.safety import build_context

    links = Links(root=Path("/tmp"), notebook_dir=Path("/tmp"), base_url="/")
    hits = [_payload_hit(i, p) for i, p in enumerate(XSS, start=1)]
    item = Item(**{f: getattr(hits[0], f) for f in ("id", "text", "source", "kind", "namespace", "heading",
                                                     "cell_id", "cell_index", "line_start", "line_end", "tags",
                                                     "importance")})  # fmt: skip
    outputs = {
        "HitTable": HitTable(hits, title=XSS[0], links=links)._repr_html_(),
        "HitTable without links": HitTable(hits, title=XSS[1])._repr_html_(),
        "ItemView": ItemView(item, links=links)._repr_html_(),
        "StatsView": StatsView({"by_namespace": {p: 1 for p in XSS}, XSS[2]: XSS[3]})._repr_html_(),
        "TextBlock": TextBlock(XSS[4], title=XSS[0])._repr_html_(),
        "ContextBlock": build_context(hits, 60, query=XSS[0])._repr_html_(),
    }
    problems = {name: markup_problems(out) for name, out in outputs.items()}
    assert problems == {name: [] for name in outputs}
    for out in outputs.values():
        assert "<script" not in out and "onerror=" not in out.replace("onerror=&quot;", "")


def test_the_explorer_widget_escapes_every_stored_field(tmp_path: Path) -> None:
    from nbmemory import Memory
    from nbmemory.jupyter.widgets import MemoryExplorer

    with Memory(tmp_path / "w.duckdb", embedder=FakeEmbedder(dim=32)) as mem:
        for i, payload in enumerate(XSS):
            mem.remember(f"payload {payload}", tags=[payload], namespace=f"ns{i}{payload}", heading=payload,
                         source=f"/tmp/{payload}.md")  # fmt: skip
        explorer = MemoryExplorer(mem, query=f"payload {XSS[0]}", top_k=10, debounce=0)
        assert explorer.result is not None and len(explorer.result.hits) == len(XSS)
        fragments = {"status": explorer.status_line.value, "explain": explorer.explain_html.value}
        for n, row in enumerate(explorer.rows):
            fragments[f"row {n} header"] = row.header.value
            fragments[f"row {n} body"] = row.body.value
        explorer.query = "<script>"  # a query that is itself markup, shown in the trace
        fragments["explain 2"] = explorer.explain_html.value
        explorer.close()
    problems = {name: markup_problems(html) for name, html in fragments.items()}
    assert problems == {name: [] for name in fragments}


def test_index_progress_labels_escape_file_names(tmp_path: Path) -> None:
    from nbmemory.jupyter.index_widget import WidgetIndexJob
    from nbmemory.progress import IndexMeter

    job = WidgetIndexJob([str(tmp_path)], None, use_widget=True, note="<b>note</b>")
    IndexMeter(job.progress).reading(1, 2, str(tmp_path / "<img src=x onerror=alert(1)>.md"), 0)
    assert "&lt;img src=x onerror=alert(1)&gt;.md" in job.label.value
    assert markup_problems(job.label.value) == []


def test_the_server_stays_responsive_while_a_client_memory_is_busy(
    api: Callable[..., HTTPResponse], nbm_state: Any, run: Callable[[Any], Any], jp_fetch: Any
) -> None:
    # Four request threads share one client connection: they must take turns, not mix replies.
    async def many() -> list[HTTPResponse]:
        calls = [
            jp_fetch(
                "nbmemory", "search", params={"q": f"item {i}", "k": "3"}, method="GET", raise_error=False
            )
            for i in range(24)
        ]
        return list(await asyncio.gather(*calls))

    for i in range(10):
        assert api("POST", "remember", body={"text": f"item {i} stored"}).code == 201
    responses = run(many())
    assert [r.code for r in responses] == [200] * 24
    assert all(json.loads(r.body)["query"] == f"item {i}" for i, r in enumerate(responses))


@pytest.fixture
def nbm_state(jp_serverapp: Any) -> Any:
    return jp_serverapp.web_app.settings["nbmemory"]
