"""Hostile input at the REST door, property-based: generated requests to every ``/nbmemory/``
route of a real Jupyter server (tests/server/conftest.py). No 500 (a 4xx that names the problem
instead), and a refused request changes nothing stored. The other doors are fuzzed in
``tests/reliability/test_fuzz_doors.py``."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import Counter
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.quick import examples

#: The requests the fuzz test sent, as "METHOD route: status" (what it covered is checked at its end).
CASES: list[str] = []

# Query strings and path segments are UTF-8 on the wire: no lone surrogates there (a request
# body carries them, JSON-escaped).
TEXT = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=30),
    st.sampled_from(
        ["", " ", "*", "%", "_", "..", "../..", "/etc/passwd", "30d", "-1d", "2026-13-45", "nan"]
    ),
    st.sampled_from([10**30, -1, 0, 2**63, 2**64]).map(str),
    st.just("a" * 5000),
)
NUMBER = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 2**63, True]),
)
BODY_TEXT = st.one_of(
    TEXT, st.text(st.characters(categories=["Cs"]), min_size=1, max_size=3), st.just("x\x00y")
)
JSONISH = st.recursive(
    st.none() | st.booleans() | NUMBER | BODY_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
BODY_KEYS = ["text", "tags", "importance", "namespace", "source", "heading", "request_key", "query", "k", "path",
             "paths", "pinned", "ids", "at", "speaker", "conversation"]  # fmt: skip
SEARCH_KEYS = ["q", "k", "ns", "kind", "tag", "path", "since", "until", "speaker", "conversation", "explain", "chunks"]
WORDS = st.lists(st.sampled_from(["staging", "database", "kafka", "lag", "vpn", "x"]), min_size=1, max_size=3)
#: Values of the right shape, so that generated requests reach past the checks into the memory.
PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "text": WORDS.map(" ".join),
    "query": WORDS.map(" ".join),
    "q": WORDS.map(" ".join),
    "k": st.integers(-2, 120).map(str),
    "tags": st.lists(st.sampled_from(["ops", "a b", "", "x" * 300]), max_size=3),
    "importance": st.floats(-1, 2),
    "ids": st.lists(st.integers(0, 6), max_size=3),
    "pinned": st.booleans(),
    "paths": st.lists(st.sampled_from([".", "nope", "a/../b"]), max_size=2),
    "kind": st.sampled_from(["markdown", "memory", "nope"]),
}


@st.composite
def bodies(draw: st.DrawFn) -> str:
    shape = draw(st.sampled_from(["object", "object", "object", "junk json", "not json"]))
    if shape == "not json":
        return draw(st.sampled_from(["", "{", "[1,", "null", "\x00", "{'a': 1}", "1e999"]))
    if shape == "junk json":
        return json.dumps(draw(JSONISH), allow_nan=True)
    keys = draw(st.lists(st.sampled_from(BODY_KEYS), max_size=5, unique=True))
    values = {k: draw(PLAUSIBLE[k] if k in PLAUSIBLE and draw(st.booleans()) else JSONISH) for k in keys}
    if isinstance(values.get("k"), str) and values["k"].lstrip("-").isdecimal() and draw(st.booleans()):
        values["k"] = int(values["k"])
    return json.dumps(values, allow_nan=True)


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, list[str], dict[str, str], str | None]:
    """(method, path parts under /nbmemory/, query arguments, body)."""
    segment = draw(
        st.integers(0, 6).map(str)
        | TEXT.filter(lambda t: t not in ("", ".", "..") and "/" not in t).map(lambda t: quote(t, safe=""))
    )
    route = draw(
        st.sampled_from(
            [
                ("GET", ["search"]),
                ("POST", ["remember"]),
                ("GET", ["items", segment]),
                ("PATCH", ["items", segment]),
                ("DELETE", ["items", segment]),
                ("POST", ["forget"]),
                ("GET", ["stats"]),
                ("GET", ["live"]),
                ("POST", ["index"]),
                ("GET", ["index", segment]),
                ("GET", ["tune", segment]),
                ("GET", ["related", segment]),
            ]
        )
    )
    method, parts = route
    keys = draw(st.lists(st.sampled_from(SEARCH_KEYS), max_size=5, unique=True))
    params = {k: draw(PLAUSIBLE[k] if k in PLAUSIBLE and draw(st.booleans()) else TEXT) for k in keys}
    if parts == ["search"] and draw(st.integers(0, 3)):
        params["q"] = draw(PLAUSIBLE["q"])
    body = draw(bodies()) if method in ("POST", "PATCH") else None
    if parts == ["remember"] and draw(st.booleans()):
        body = json.dumps({**as_object(body), "text": draw(PLAUSIBLE["text"])})
    return method, parts, params, body


def as_object(body: str | None) -> dict[str, Any]:
    """The JSON object a generated body holds, or an empty one: a body may be broken on purpose
    (``"{"``, ``"{'a': 1}"``), and a broken body must not break the generator."""
    try:
        value = json.loads(body or "")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def store_hash(nbm_state: Any) -> str:
    memory = nbm_state.memory().memory  # this process owns the file (tests/server/conftest.py)
    memory.flush()
    rows = memory.db.fetchall(
        "SELECT id, namespace, kind, source, heading, text, tags, importance, pinned, deleted_at "
        "FROM chunks ORDER BY id"
    )
    links = memory.db.fetchall("SELECT * FROM links ORDER BY ALL")
    return hashlib.sha256(repr((rows, links)).encode("utf-8", "surrogatepass")).hexdigest()


def test_rest_routes_answer_or_refuse_clearly_whatever_the_request(
    jp_fetch: Any, run_on_server: Callable[[Any], Any], nbm_state: Any
) -> None:
    # The server runs on the test's event loop: each request runs it until the answer comes.
    def fetch(method: str, parts: list[str], params: dict[str, str], body: str | None) -> Any:
        kwargs: dict[str, Any] = {"method": method, "raise_error": False, "params": params}
        if body is not None:
            kwargs["body"] = body
        return run_on_server(jp_fetch("nbmemory", *parts, **kwargs))

    assert (
        fetch("POST", ["remember"], {}, json.dumps({"text": "the staging database is db-stg-12"})).code == 201
    )

    @settings(
        max_examples=examples(120), deadline=None, suppress_health_check=list(HealthCheck), database=None
    )
    @given(request=requests())
    def door(request: tuple[str, list[str], dict[str, str], str | None]) -> None:
        method, parts, params, body = request
        before = store_hash(nbm_state)
        response = fetch(method, parts, params, body)
        CASES.append(f"{method} {parts[0]}: {response.code}")
        event(CASES[-1])
        assert response.code < 500, (request, response.code, response.body[:500])
        if response.code >= 400:
            message = json.loads(response.body).get("message")
            assert isinstance(message, str) and message.strip(), (request, response.body[:500])
            assert store_hash(nbm_state) == before, f"{request!r} was refused but changed the store"

    door()
    # The requests reached the routes and were both served and refused: a generator that only
    # produced requests every route refuses at once would test little.
    assert len({case.split(":")[0] for case in CASES}) >= 5, CASES
    codes = [int(case.rsplit(": ", 1)[1]) for case in CASES]
    assert any(code < 400 for code in codes) and any(code >= 400 for code in codes), Counter(CASES)


def test_the_generated_requests_never_break_the_generator() -> None:
    # Broken bodies are drawn on purpose; the strategy that mixes them into others must not trip on them.
    drawn: list[str | None] = []

    @settings(
        max_examples=examples(1000), deadline=None, suppress_health_check=list(HealthCheck), database=None
    )
    @given(request=requests())
    def draw(request: tuple[str, list[str], dict[str, str], str | None]) -> None:
        drawn.append(request[3])

    draw()
    assert any(body is not None and not as_object(body) for body in drawn)  # broken ones among them


def test_a_request_is_served_when_an_earlier_test_left_no_current_loop(
    jp_fetch: Any, jp_asyncio_loop: Any, request: pytest.FixtureRequest
) -> None:
    asyncio.set_event_loop(None)  # what an asyncio.run or anyio.run earlier in this process leaves
    run_on_server = request.getfixturevalue("run_on_server")
    assert run_on_server(jp_fetch("nbmemory", "stats", raise_error=False)).code == 200


