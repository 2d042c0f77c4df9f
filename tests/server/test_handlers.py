"""The ``/nbmemory/`` REST API against a real Jupyter server that forbids unauthenticated access."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
import tornado.web
from jupyter_server.utils import url_path_join
from tornado.httpclient import HTTPResponse

import nbmemory.server
from nbmemory.embed import SentenceTransformerEmbedder
from nbmemory.server.handlers import MemoryHandler

VERBS = ("get", "post", "put", "patch", "delete")


async def call(jp_fetch: Any, method: str, *parts: str, body: Any = None, **params: Any) -> HTTPResponse:
    kwargs: dict[str, Any] = {"method": method, "raise_error": False}
    if body is not None:
        kwargs["body"] = body if isinstance(body, str) else json.dumps(body)
    elif method in ("POST", "PATCH", "PUT"):
        kwargs["body"] = "{}"
    return await jp_fetch("nbmemory", *parts, params=params, **kwargs)


def payload(response: HTTPResponse) -> Any:
    assert response.headers["Content-Type"].startswith("application/json"), response.headers
    return json.loads(response.body)


def write_notebook(path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Deploy notes"),
        nbformat.v4.new_code_cell("rotate_tokens(every='30d')  # token rotation schedule"),
        nbformat.v4.new_code_cell("print('vpn required for staging deploys')"),
    ]
    nbformat.write(nb, path)


async def wait_tune(jp_fetch: Any, job_id: str, timeout: float = 600) -> dict[str, Any]:
    """Poll ``GET tune/<job>`` until the run ends; every answer on the way must be well formed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        response = await call(jp_fetch, "GET", "tune", job_id)
        assert response.code == 200
        job = payload(response)
        assert set(job) == {"job", "state", "phase", "fraction", "status", "report"}
        if job["state"] != "running":
            return job
        assert job["report"] is None and 0.0 <= job["fraction"] <= 1.0
        await asyncio.sleep(0.5)
    raise AssertionError(f"tuning job {job_id} did not finish in {timeout} s")


async def wait_job(jp_fetch: Any, job_id: str) -> dict[str, Any]:
    for _ in range(600):
        job = payload(await call(jp_fetch, "GET", "index", job_id))
        if job["state"] in ("done", "error"):
            return job
        await asyncio.sleep(0.05)
    raise AssertionError(f"index job {job_id} did not finish")


# -- authentication ------------------------------------------------------------------------


def nbmemory_routes(web_app: tornado.web.Application) -> list[tuple[str, type[MemoryHandler]]]:
    """Every (URL pattern, handler) the extension registered, found by walking the server's routers."""
    found: list[tuple[str, type[MemoryHandler]]] = []

    def walk(rules: list[Any]) -> None:
        for rule in rules:
            target = rule.target
            if hasattr(target, "rules"):
                walk(target.rules)
            elif isinstance(target, type) and issubclass(target, MemoryHandler):
                found.append((rule.matcher.regex.pattern, target))

    walk(web_app.default_router.rules)
    return found


def verbs_of(handler: type[MemoryHandler]) -> list[str]:
    return [v for v in VERBS if getattr(handler, v) is not getattr(tornado.web.RequestHandler, v)]


def test_every_route_is_registered(jp_serverapp: Any) -> None:
    patterns = {p for p, _ in nbmemory_routes(jp_serverapp.web_app)}
    names = {re.sub(r"^.*/(nbmemory/)", r"\1", p).rstrip("$") for p in patterns}
    assert names == {
        "nbmemory/search",
        "nbmemory/remember",
        "nbmemory/items/([^/]+)",
        "nbmemory/forget",
        "nbmemory/restore",
        "nbmemory/stats",
        "nbmemory/live",
        "nbmemory/index",
        "nbmemory/index/([^/]+)",
        "nbmemory/tune",
        "nbmemory/tune/([^/]+)",
        "nbmemory/related/([^/]+)",
        "nbmemory/capture",
    }


def test_every_verb_is_decorated_authenticated(jp_serverapp: Any) -> None:
    # Independent of the server setting: each verb itself must demand a user.
    routes = nbmemory_routes(jp_serverapp.web_app)
    assert routes
    for pattern, handler in routes:
        for verb in verbs_of(handler):
            code = getattr(handler, verb).__code__
            assert code.co_filename == tornado.web.__file__ and code.co_name == "wrapper", (
                f"{handler.__name__}.{verb} ({pattern}) lacks @tornado.web.authenticated"
            )


async def test_every_route_rejects_unauthenticated_requests(
    jp_serverapp: Any, http_server_client: Any, jp_fetch: Any
) -> None:
    routes = nbmemory_routes(jp_serverapp.web_app)
    checked = 0
    for pattern, handler in routes:
        url = re.sub(r"\([^)]*\)", "1", pattern).rstrip("$")
        for verb in verbs_of(handler):
            body = "{}" if verb in ("post", "patch", "put") else None
            response = await http_server_client.fetch(
                url + "?q=x", method=verb.upper(), body=body, raise_error=False, follow_redirects=False
            )
            assert response.code in (401, 403) or (
                response.code in (301, 302) and "login" in response.headers.get("Location", "")
            ), f"{verb.upper()} {url} answered {response.code} without a token"
            checked += 1
    assert checked >= 10
    # And the same requests with the token get through authentication.
    assert (await call(jp_fetch, "GET", "stats")).code == 200


# -- the API -------------------------------------------------------------------------------


async def test_memory_opens_on_first_request_not_at_start(jp_fetch: Any, nbm_state: Any) -> None:
    assert nbm_state._memory is None
    assert (await call(jp_fetch, "GET", "stats")).code == 200
    assert nbm_state._memory is not None


async def test_remember_then_search_finds_it(jp_fetch: Any, nbm_state: Any) -> None:
    response = await call(
        jp_fetch,
        "POST",
        "remember",
        body={"text": "Deploys need the VPN on", "tags": ["ops"], "importance": 0.8},
    )
    assert response.code == 201
    item = payload(response)
    assert item["text"] == "Deploys need the VPN on" and item["tags"] == ["ops"]
    assert item["importance"] == pytest.approx(0.8) and item["kind"] == "memory"

    found = payload(await call(jp_fetch, "GET", "search", q="deploys vpn", k="5", explain="1"))
    hit = found["hits"][0]
    assert hit["id"] == item["id"]
    assert hit["location"] == "(remembered)" and hit["path"] is None
    assert "bm25" in hit["found_by"] and hit["ranks"]["bm25"] == 1
    # What the score is made of, and what a score is: the sidebar shows them on hover.
    assert sum(hit["parts"].values()) == pytest.approx(hit["score"]) and "bm25" in hit["parts"]
    assert "x cosine" in found["scale"]
    assert [s["name"] for s in found["trace"]["stages"]]
    assert isinstance(found["explain"], str) and found["explain"]

    stats = payload(await call(jp_fetch, "GET", "stats"))
    assert stats["items"] == 1 and stats["role"] == "owner"


async def test_remember_records_the_notebook_and_cell_it_came_from(jp_fetch: Any, jp_root_dir: Path) -> None:
    body = {"text": "quokka deploys need the vault key", "source": "notes/deploy.ipynb", "heading": "cell 7"}
    item = payload(await call(jp_fetch, "POST", "remember", body=body))
    assert item["path"] == "notes/deploy.ipynb" and item["heading"] == "cell 7"
    assert item["source"] == str((jp_root_dir / "notes" / "deploy.ipynb").resolve())
    hit = payload(await call(jp_fetch, "GET", "search", q="quokka vault"))["hits"][0]
    assert hit["id"] == item["id"] and hit["path"] == "notes/deploy.ipynb" and hit["heading"] == "cell 7"
    outside = await call(jp_fetch, "POST", "remember", body={"text": "x", "source": "/etc/passwd"})
    assert outside.code == 403 and "outside the server root" in payload(outside)["message"]
    long = await call(jp_fetch, "POST", "remember", body={"text": "x", "heading": "h" * 501})
    assert long.code == 400 and "heading must be a string" in payload(long)["message"]


async def test_search_filters(jp_fetch: Any) -> None:
    await call(jp_fetch, "POST", "remember", body={"text": "alpha deploy note", "namespace": "work"})
    await call(jp_fetch, "POST", "remember", body={"text": "alpha deploy note at home", "namespace": "home"})
    hits = payload(await call(jp_fetch, "GET", "search", q="alpha deploy", ns="work"))["hits"]
    assert [h["namespace"] for h in hits] == ["work"]
    hits = payload(await call(jp_fetch, "GET", "search", q="alpha deploy", kind="notebook"))["hits"]
    assert hits == []


async def test_conversation_turns_are_remembered_filtered_and_changed(jp_fetch: Any) -> None:
    said = {"at": "2023-05-08T15:56:00+02:00", "speaker": "Caroline", "conversation": "session_1"}
    response = await call(jp_fetch, "POST", "remember", body={"text": "I went to a support group", **said})
    assert response.code == 201
    first = payload(response)
    assert (first["event_at"], first["speaker"], first["conversation"]) == (
        "2023-05-08T13:56:00",
        "Caroline",
        "session_1",
    )
    said = {"at": "2023-06-01T09:00", "speaker": "Melanie", "conversation": "session_2"}
    second = payload(await call(jp_fetch, "POST", "remember", body={"text": "the support group sounds good", **said}))
    plain = payload(await call(jp_fetch, "POST", "remember", body={"text": "support group note"}))
    assert (plain["event_at"], plain["speaker"], plain["conversation"]) == (None, None, None)

    async def found(**params: str) -> list[dict[str, Any]]:
        response = await call(jp_fetch, "GET", "search", q="support group", **params)
        assert response.code == 200, response.body
        return list(payload(response)["hits"])

    [hit] = await found(speaker="Caroline")
    assert (hit["id"], hit["event_at"], hit["speaker"], hit["conversation"]) == (
        first["id"],
        "2023-05-08T13:56:00",
        "Caroline",
        "session_1",
    )
    assert [h["id"] for h in await found(conversation="session_2")] == [second["id"]]
    assert [h["id"] for h in await found(since="2023-05-01", until="2023-05-31")] == [first["id"]]
    # Exact: read as sent, not stripped.
    assert await found(speaker="Caroline ") == []

    patched = payload(
        await call(jp_fetch, "PATCH", "items", str(second["id"]), body={"speaker": "Mel", "conversation": ""})
    )
    assert (patched["speaker"], patched["conversation"], patched["event_at"]) == ("Mel", None, "2023-06-01T09:00:00")
    got = payload(await call(jp_fetch, "GET", "items", str(second["id"])))
    assert got["speaker"] == "Mel" and got["conversation"] is None


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"text": "x", "at": "yesterday-ish"}, "at 'yesterday-ish' is not an ISO 8601 time"),
        ({"text": "x", "at": 1683554160}, "at must be an ISO 8601 time as a string"),
        ({"text": "x", "speaker": 7}, "speaker must be a string"),
        ({"text": "x", "speaker": "Caro\ud800line"}, "speaker is not valid Unicode"),
        ({"text": "x", "conversation": "a\nb"}, "conversation must not contain control characters"),
        ({"text": "x", "conversation": "c" * 201}, "conversation must be at most 200 characters"),
    ],
)
async def test_remember_refuses_bad_turn_values(jp_fetch: Any, body: Any, message: str) -> None:
    response = await call(jp_fetch, "POST", "remember", body=body)
    assert response.code == 400
    assert message in payload(response)["message"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "q is required"),
        ({"q": "  "}, "q is required"),
        ({"q": "x", "k": "ten"}, "k must be an integer from 1 to 200, got 'ten'"),
        ({"q": "x", "k": "0"}, "k must be an integer from 1 to 200, got 0"),
        ({"q": "x", "k": "201"}, "k must be an integer from 1 to 200, got 201"),
        ({"q": "x", "kind": "video"}, "kind must be one of"),
        ({"q": "x", "since": "last tuesday"}, "last tuesday"),
    ],
)
async def test_search_validation(jp_fetch: Any, params: dict[str, str], message: str) -> None:
    response = await call(jp_fetch, "GET", "search", **params)
    assert response.code == 400
    assert message in payload(response)["message"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "text is required"),
        ({"text": ""}, "text is required"),
        ({"text": "x", "importance": 2}, "importance must be a number from 0 to 1, got 2"),
        ({"text": "x", "importance": "high"}, "importance must be a number from 0 to 1"),
        ({"text": "x", "tags": [1, 2]}, "tags must be a list of strings"),
        ("[1, 2]", "must be a JSON object"),
        ("{not json", "not valid JSON"),
    ],
)
async def test_remember_validation(jp_fetch: Any, body: Any, message: str) -> None:
    response = await call(jp_fetch, "POST", "remember", body=body)
    assert response.code == 400
    assert message in payload(response)["message"]


async def test_item_get_patch_delete(jp_fetch: Any) -> None:
    item = payload(await call(jp_fetch, "POST", "remember", body={"text": "pin me later"}))
    got = payload(await call(jp_fetch, "GET", "items", str(item["id"])))
    assert got["text"] == "pin me later"

    patched = payload(
        await call(
            jp_fetch, "PATCH", "items", str(item["id"]), body={"pinned": True, "importance": 1, "tags": ["x"]}
        )
    )
    assert patched["pinned"] is True and patched["importance"] == 1.0 and patched["tags"] == ["x"]

    bad = await call(jp_fetch, "PATCH", "items", str(item["id"]), body={"pinned": "yes"})
    assert bad.code == 400 and "pinned must be true or false" in payload(bad)["message"]
    bad = await call(jp_fetch, "PATCH", "items", str(item["id"]), body={"colour": "red"})
    assert bad.code == 400 and "cannot change 'colour'" in payload(bad)["message"]
    bad = await call(jp_fetch, "PATCH", "items", str(item["id"]), body={})
    assert bad.code == 400 and "nothing to change" in payload(bad)["message"]

    gone = payload(await call(jp_fetch, "DELETE", "items", str(item["id"])))
    assert gone == {"forgotten": [item["id"]]}
    assert payload(await call(jp_fetch, "GET", "search", q="pin me later"))["hits"] == []
    missing = await call(jp_fetch, "GET", "items", str(item["id"]))
    assert missing.code == 404 and "forgotten" in payload(missing)["message"]


async def test_unknown_ids_are_404_and_bad_ids_400(jp_fetch: Any) -> None:
    for method, parts in [
        ("GET", ("items", "999")),
        ("DELETE", ("items", "999")),
        ("GET", ("related", "999")),
        ("GET", ("index", "nosuchjob")),
        ("GET", ("tune", "nosuchjob")),
    ]:
        response = await call(jp_fetch, method, *parts)
        assert response.code == 404, (method, parts)
        assert payload(response)["message"]
    response = await call(jp_fetch, "PATCH", "items", "999", body={"pinned": True})
    assert response.code == 404
    response = await call(jp_fetch, "GET", "items", "abc")
    assert response.code == 400 and "item id must be an integer" in payload(response)["message"]


async def test_forget_by_query_and_related(jp_fetch: Any) -> None:
    a = payload(await call(jp_fetch, "POST", "remember", body={"text": "kafka consumer lag alert"}))
    payload(await call(jp_fetch, "POST", "remember", body={"text": "kafka consumer lag dashboard"}))
    related = payload(await call(jp_fetch, "GET", "related", str(a["id"]), k="3"))
    assert related["id"] == a["id"] and related["hits"]
    assert a["id"] not in [h["id"] for h in related["hits"]]

    bad = await call(jp_fetch, "POST", "forget", body={"query": "x", "path": "y"})
    assert bad.code == 400 and "exactly one of query, path or source_of" in payload(bad)["message"]
    gone = payload(await call(jp_fetch, "POST", "forget", body={"query": "kafka consumer lag alert", "k": 1}))
    assert gone == {"forgotten": [a["id"]]}


async def test_restore_is_the_undo_of_forget(jp_fetch: Any) -> None:
    a = payload(await call(jp_fetch, "POST", "remember", body={"text": "pelican cluster failover drill"}))
    assert payload(await call(jp_fetch, "DELETE", "items", str(a["id"]))) == {"forgotten": [a["id"]]}
    assert payload(await call(jp_fetch, "GET", "search", q="pelican cluster failover"))["hits"] == []
    restored = payload(await call(jp_fetch, "POST", "restore", body={"ids": [a["id"]]}))
    assert restored == {"restored": [a["id"]]}
    hits = payload(await call(jp_fetch, "GET", "search", q="pelican cluster failover"))["hits"]
    assert hits[0]["id"] == a["id"]
    # Restoring what is not forgotten changes nothing; unknown ids are 404, bad bodies 400.
    assert payload(await call(jp_fetch, "POST", "restore", body={"ids": [a["id"]]})) == {"restored": []}
    missing = await call(jp_fetch, "POST", "restore", body={"ids": [999999]})
    assert missing.code == 404 and "no item with id 999999" in payload(missing)["message"]
    bad = await call(jp_fetch, "POST", "restore", body={"ids": "1"})
    assert bad.code == 400 and "ids must be a list" in payload(bad)["message"]


async def test_index_a_notebook_job_and_open_at_cell(jp_fetch: Any, jp_root_dir: Path) -> None:
    (jp_root_dir / "notes").mkdir()
    write_notebook(jp_root_dir / "notes" / "deploy.ipynb")
    response = await call(jp_fetch, "POST", "index", body={"path": "notes/deploy.ipynb"})
    assert response.code == 202
    job = payload(response)
    assert job["paths"] == ["notes/deploy.ipynb"] and job["state"] in ("queued", "running", "done")

    job = await wait_job(jp_fetch, job["id"])
    assert job["state"] == "done", job
    assert job["report"]["files_changed"] == 1 and job["done"] == job["total"] == 1
    assert "files seen" in job["report"]["summary"]
    progress = job["progress"]
    assert progress["phase"] == "done" and progress["fraction"] == 1.0
    assert progress["text"] == f"done — 1 file, 3 chunks in {job['report']['seconds']:.1f} s"
    assert progress["chunks_done"] == progress["chunks_total"] == 3

    hits = payload(await call(jp_fetch, "GET", "search", q="token rotation schedule", kind="notebook"))[
        "hits"
    ]
    assert hits[0]["path"] == "notes/deploy.ipynb"
    assert hits[0]["cell_index"] == 1 and hits[0]["cell_id"]
    # Cells count from 1 in what people and agents read, as in JupyterLab.
    assert hits[0]["location"].endswith("deploy.ipynb#cell 2") and hits[0]["cell_number"] == 2

    forgotten = payload(await call(jp_fetch, "POST", "forget", body={"path": "notes/deploy.ipynb"}))
    assert len(forgotten["forgotten"]) == 3


@pytest.mark.parametrize(
    ("paths", "code", "message"),
    [
        (["../outside"], 403, "'..' is not allowed"),
        (["notes/../../outside"], 403, "'..' is not allowed"),
        (["/etc"], 403, "outside the server root"),
        (["link-out"], 403, "outside the server root"),
        (["nope.ipynb"], 404, "no such file or folder: nope.ipynb"),
        ([], 400, "paths is required"),
        ("", 400, "must be a non-empty string"),
    ],
)
async def test_index_paths_must_stay_inside_root(
    jp_fetch: Any, jp_root_dir: Path, tmp_path: Path, paths: Any, code: int, message: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("# secret\n\nnot for the server")
    (jp_root_dir / "link-out").symlink_to(outside)
    response = await call(jp_fetch, "POST", "index", body={"paths": paths})
    assert response.code == code
    assert message in payload(response)["message"]


async def test_forget_path_must_stay_inside_root(jp_fetch: Any) -> None:
    for path in ("../x.md", "/etc/passwd"):
        response = await call(jp_fetch, "POST", "forget", body={"path": path})
        assert response.code == 403, path


async def test_stored_markup_comes_back_as_a_json_string(jp_fetch: Any) -> None:
    texts = ["<script>alert(1)</script>", '<img src=x onerror="alert(1)">']
    for text in texts:
        assert (await call(jp_fetch, "POST", "remember", body={"text": text})).code == 201
    response = await call(jp_fetch, "GET", "search", q="alert", k="5")
    assert response.headers["Content-Type"].startswith("application/json")
    assert response.headers.get("X-Content-Type-Options") == "nosniff"
    # Not even the raw bytes contain markup; decoded, the text is exactly what was stored.
    assert b"<script" not in response.body and b"<img" not in response.body
    assert sorted(h["text"] for h in payload(response)["hits"]) == sorted(texts)


async def test_the_server_stays_responsive_during_a_slow_call(jp_fetch: Any, nbm_state: Any) -> None:
    release = threading.Event()
    entered = threading.Event()

    class Slow:
        def search(self, query: str, k: int, **kwargs: Any) -> Any:
            entered.set()
            release.wait(30)
            raise nbmemory.NbMemoryError("released")

        def close(self) -> None:
            pass

    nbm_state._memory = Slow()
    slow = asyncio.ensure_future(call(jp_fetch, "GET", "search", q="x"))
    await asyncio.get_running_loop().run_in_executor(None, entered.wait, 30)
    # While a search blocks its worker thread, the event loop still answers.
    quick = await call(jp_fetch, "GET", "index", "nosuchjob")
    assert quick.code == 404 and not slow.done()
    release.set()
    response = await slow
    assert response.code == 400 and payload(response)["message"] == "released"
    nbm_state._memory = None


# -- tuning ----------------------------------------------------------------------------------

# A run that finishes in ~20 s on a CPU; min_gain 1 makes the gate refuse the candidate.
QUICK_TUNE = {
    "max_steps": 2,
    "max_triples": 16,
    "batch_size": 8,
    "min_gain": 1,
    "query_source": "title,first_sentence",
}


class TestTuneOnARealMemory:
    """A real tuning run through REST, on the sample notes embedded with the bundled model."""

    @pytest.fixture
    def open_memory(self, notes_copy: Path, real_embedder: SentenceTransformerEmbedder) -> Callable[[], Any]:
        from nbmemory.remote import connect

        return lambda: connect(notes_copy, embedder=real_embedder)

    @pytest.fixture(autouse=True)
    def one_torch_thread(self) -> Iterator[None]:
        # On a shared 2-core machine torch's two threads wait on each other: one is several times faster.
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(1)
        yield
        torch.set_num_threads(before)

    async def test_a_run_reports_progress_and_its_verdict(self, jp_fetch: Any, nbm_state: Any) -> None:
        response = await call(jp_fetch, "POST", "tune", body=QUICK_TUNE)
        assert response.code == 202
        started = payload(response)
        assert started["state"] == "running" and started["report"] is None
        job_id = started["job"]
        # One run at a time: a second one is refused with the running job's status line.
        second = await call(jp_fetch, "POST", "tune", body=QUICK_TUNE)
        assert second.code == 409
        refused = payload(second)
        assert refused["job"] == job_id and refused["status"].startswith("running: ")
        assert "already going on" in refused["message"]
        assert len(nbm_state.tune_jobs) == 1
        # A reloaded sidebar asks which run is going on.
        current = payload(await call(jp_fetch, "GET", "tune"))
        assert current["job"] == job_id and current["state"] == "running"

        job = await wait_tune(jp_fetch, job_id)
        assert job["state"] == "done", job
        assert job["report"]["adopted"] is False and job["report"]["version"]
        assert "keep the current model" in job["report"]["reason"]
        assert job["status"].startswith("finished in ") and "keep the current model" in job["status"]
        # The memory still answers with the current model.
        hits = payload(await call(jp_fetch, "GET", "search", q="incident postmortem"))["hits"]
        assert hits


async def test_tune_reports_a_failed_run(jp_fetch: Any) -> None:
    # This server's memory embeds with the fake embedder: the run starts, then fails, and says why.
    assert (await call(jp_fetch, "POST", "remember", body={"text": "Deploys need the VPN."})).code == 201
    response = await call(jp_fetch, "POST", "tune")
    assert response.code == 202
    job = await wait_tune(jp_fetch, payload(response)["job"], timeout=60)
    assert job["state"] == "failed"
    assert "tuning needs a sentence-transformers model" in job["report"]["error"]
    assert job["status"].startswith("failed after ")
    # Ended: a new run may start.
    again = await call(jp_fetch, "POST", "tune", body={"query_source": ["title", "first_sentence"]})
    assert again.code == 202
    assert (await wait_tune(jp_fetch, payload(again)["job"], timeout=60))["state"] == "failed"


async def test_get_tune_answers_the_latest_run(jp_fetch: Any) -> None:
    # Asked on every page load by the sidebar: no run yet is an answer, not a 404 in the log.
    none = await call(jp_fetch, "GET", "tune")
    assert none.code == 200 and payload(none) is None
    # Quick runs: this server's memory embeds with the fake embedder, so each one fails at once.
    assert (await call(jp_fetch, "POST", "remember", body={"text": "Deploys need the VPN."})).code == 201
    first = payload(await call(jp_fetch, "POST", "tune"))
    response = await call(jp_fetch, "GET", "tune")
    assert response.code == 200 and payload(response)["job"] == first["job"]
    ended = await wait_tune(jp_fetch, first["job"], timeout=60)
    # Ended, it is still the latest run: a sidebar opened now shows how it ended.
    assert payload(await call(jp_fetch, "GET", "tune")) == ended
    second = payload(await call(jp_fetch, "POST", "tune"))
    assert payload(await call(jp_fetch, "GET", "tune"))["job"] == second["job"] != first["job"]
    await wait_tune(jp_fetch, second["job"], timeout=60)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"epochs": 0}, "epochs must be greater than 0"),
        ({"colour": "red"}, "unknown tuning option 'colour'"),
        ({"device": "cuda"}, "unknown tuning option 'device'"),
        ({"epochs": "one"}, "epochs must be an integer"),
        ({"epochs": 1.5}, "epochs must be an integer"),
        ({"max_steps": True}, "max_steps must be an integer"),
        ({"max_queries": 0}, "max_queries must be at least 1"),
        ({"batch_size": 1}, "batch_size must be at least 2"),
        ({"lr": 3}, "learning_rate must be between 0 and 1"),
        ({"min_gain": "high"}, "min_gain must be a number"),
        ({"query_source": "headings"}, "query_source must name one or more of title, first_sentence, log"),
        ({"query_source": [1]}, "query_source must be a list of strings"),
        ({"query_source": ","}, "query_source must name one or more"),
        ({"no_hard_negatives": "yes"}, "no_hard_negatives must be true or false"),
        ([], "the request body must be a JSON object"),
    ],
)
async def test_tune_validation(jp_fetch: Any, nbm_state: Any, body: Any, message: str) -> None:
    response = await call(jp_fetch, "POST", "tune", body=body)
    assert response.code == 400
    assert message in payload(response)["message"]
    assert not nbm_state.tune_jobs


async def test_tune_runs_only_in_the_owner(jp_fetch: Any, nbm_state: Any, tmp_path: Path) -> None:
    class Client:
        """A client of another process's memory: no local Memory to tune."""

        memory = None
        path = tmp_path / "memory.duckdb"

        def close(self) -> None:
            pass

    nbm_state._memory = Client()
    response = await call(jp_fetch, "POST", "tune")
    assert response.code == 400 and "owned by another process" in payload(response)["message"]
    assert not nbm_state.tune_jobs
    nbm_state._memory = None


async def test_tune_refuses_unauthenticated_requests(
    http_server_client: Any, jp_base_url: str, nbm_state: Any
) -> None:
    for method, parts in [("POST", ("tune",)), ("GET", ("tune",)), ("GET", ("tune", "somejob"))]:
        response = await http_server_client.fetch(
            url_path_join(jp_base_url, "nbmemory", *parts),
            method=method,
            body=json.dumps(QUICK_TUNE) if method == "POST" else None,
            raise_error=False,
            follow_redirects=False,
        )
        assert response.code in (401, 403), (method, parts, response.code)
    assert not nbm_state.tune_jobs


def test_extension_points() -> None:
    import nbmemory as pkg

    assert pkg._jupyter_server_extension_points() == [{"module": "nbmemory.server"}]
    assert pkg._jupyter_labextension_paths() == [{"src": "labextension", "dest": "nbmemory"}]
    built = Path(pkg.__file__).parent / "labextension" / "package.json"
    assert built.exists(), "the prebuilt labextension is missing: run `npm run build:prod` in labextension/"
    assert json.loads(built.read_text())["name"] == "nbmemory"
