"""Namespaces never leak: a search in namespace A returns nothing from any other namespace.

Property tests (hypothesis, bounded examples) over random filters (namespace, kind, tags, path,
since/until, k) on a memory of ~1,300 items in eleven namespaces (awkward names included), through
every entry point: :class:`~nbmemory.Memory`, :func:`nbmemory.remote.connect` (a client over the
socket), the magics, the CLI (in process and as a subprocess) and the REST API. The vector stage
runs both ways: an exact scan (the filter matches few rows) and HNSW with over-fetch and its exact
fallback (``EXACT_SCAN_MAX_ROWS`` lowered); the trace's ``method`` note shows which ran.

Every hit is checked against an oracle written in Python (not the SQL the filters compile to),
and ``related()``, ``%memcontext``, ``%memrelated``, the explorer widget and ``forget`` are checked
too. The tally ("isolation: N cases tried, leaks found = 0") prints in the pytest summary.
"""

from __future__ import annotations

import contextlib
import fnmatch
import io
import json
import os
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import nbformat
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# The pytest-jupyter fixtures for the REST cases; their autouse loop fixtures stay in this module.
from pytest_jupyter.jupyter_server import *  # noqa: F403
from traitlets.config import Config

import nbmemory.server
from nbmemory import Memory
from nbmemory.cli import main as cli_main
from nbmemory.embed import FakeEmbedder
from nbmemory.remote import SharedMemory, connect
from nbmemory.search.filters import KINDS
from nbmemory.store import vectors
from tests.quick import examples

REPO = Path(__file__).resolve().parents[2]
# One dataset through every front end: a Jupyter server, a shell, CLI runs and processes.
pytestmark = pytest.mark.integration

# Awkward names on purpose: case, a trailing space, SQL LIKE and GLOB wildcards, a quote, a slash,
# non-ASCII, a prefix of another name.
BIG, SMALL = "B", "A"
NAMESPACES = [SMALL, BIG, "a", "A ", "A%", "A_", "A'b", "ns/x", "työ", "A.B", "*"]
WORDS = [
    "kafka",
    "consumer",
    "lag",
    "broker",
    "partition",
    "offset",
    "replica",
    "deploy",
    "vpn",
    "subnet",
    "staging",
    "token",
    "rotation",
    "garden",
    "tomato",
    "basil",
    "compost",
    "harvest",
    "invoice",
    "budget",
    "tax",
    "receipt",
]
TAGS = ["ops", "ml", "home", "urgent"]
PATHS = [f"/data/proj{p}/notes/note{n}.md" for p in range(4) for n in range(5)] + [None]
# Items whose words no query uses: HNSW's over-fetched neighbours hold none of them.
FAR = "far"
GLOBS = ["/data/proj1/*", "*/notes/*", "*note3.md", "/data/proj[02]/*", "/nowhere/*"]
EPOCH = datetime(2024, 1, 1)


@dataclass
class Row:
    id: int
    namespace: str
    kind: str
    source: str | None
    tags: list[str]
    updated_at: datetime


@dataclass
class Tally:
    cases: Counter[str] = field(default_factory=Counter)
    leaks: Counter[str] = field(default_factory=Counter)
    methods: Counter[str] = field(default_factory=Counter)


TALLY = Tally()


@pytest.fixture(scope="module", autouse=True)
def _report_tally(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None or not TALLY.cases:
        return
    per = ", ".join(f"{k} {v}" for k, v in sorted(TALLY.cases.items()))
    methods = ", ".join(f"{k} {v}" for k, v in sorted(TALLY.methods.items()))
    # Past pytest's output capture: the tally shows whether the tests pass or not.
    with capture.global_and_fixture_disabled():
        reporter.write_line("")
        reporter.write_line(f"isolation: {sum(TALLY.cases.values())} cases tried ({per})")
        reporter.write_line(f"isolation: vector methods seen: {methods}")
        reporter.write_line(f"isolation: leaks found = {sum(TALLY.leaks.values())}")


@dataclass
class Dataset:
    path: Path
    owner: SharedMemory = field(repr=False)
    rows: dict[int, Row] = field(repr=False)
    files: Path = field(repr=False)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(f"Dataset({str(self.path)!r}, {len(self.rows)} rows)")  # hypothesis prints this

    def matching(self, f: dict[str, Any]) -> set[int]:
        """The ids a filter must restrict a search to: the oracle, in plain Python."""
        out = set()
        for row in self.rows.values():
            if f.get("namespace") is not None and row.namespace != f["namespace"]:
                continue
            kinds = f.get("kind") or []
            if kinds and not any(row.kind == k or row.kind.startswith(k + "-") for k in kinds):
                continue
            if f.get("path") and not (row.source and fnmatch.fnmatchcase(row.source, f["path"])):
                continue
            if not set(f.get("tags") or ()) <= set(row.tags):
                continue
            if f.get("since") is not None and row.updated_at < f["since"]:
                continue
            if f.get("until") is not None and row.updated_at > f["until"]:
                continue
            out.add(row.id)
        return out


def _write_files(folder: Path, rng: random.Random) -> None:
    folder.mkdir(parents=True)
    for i in range(3):
        words = " ".join(rng.choices(WORDS, k=12))
        (folder / f"doc{i}.md").write_text(f"# Doc {i}\n\n## Notes\n\n{words}.\n", encoding="utf-8")
        (folder / f"mod{i}.py").write_text(
            f'def f{i}():\n    """{words}"""\n    return {i}\n', encoding="utf-8"
        )
        (folder / f"log{i}.txt").write_text(words + "\n", encoding="utf-8")
        nb = nbformat.v4.new_notebook()
        nb.cells = [
            nbformat.v4.new_markdown_cell(f"# Book {i}"),
            nbformat.v4.new_code_cell(f"# {words}\nx = {i}"),
        ]
        nbformat.write(nb, folder / f"book{i}.ipynb")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dataset]:
    root = tmp_path_factory.mktemp("isolation")
    saved = os.environ.get("NBMEMORY_RUNTIME_DIR")
    # Every connect() in this module (server, CLI subprocess included) finds this owner.
    os.environ["NBMEMORY_RUNTIME_DIR"] = str(root / "run")
    rng = random.Random(8)
    path = root / "memory.duckdb"
    # Built with the HNSW index, so that every vector path can be forced (vector_path).
    building = pytest.MonkeyPatch()
    building.setattr(vectors, "IN_MEMORY", False)
    owner = connect(path, embedder=FakeEmbedder(dim=128))
    assert owner.role == "owner"
    mem: Memory = owner.memory
    sizes = {SMALL: 200, BIG: 900} | {ns: 20 for ns in NAMESPACES[2:]}
    for ns, n in sizes.items():
        # Same vocabulary everywhere: every query matches items of every namespace.
        for start in range(0, n, 50):
            count = min(50, n - start)
            mem.remember_many(
                [" ".join(rng.choices(WORDS, k=7)) + f" item{start + j}" for j in range(count)],
                namespace=ns,
                tags=rng.sample(TAGS, rng.randrange(0, 3)),
                sources=[rng.choice(PATHS) for _ in range(count)],
            )
    far = ["stone", "river", "cloud", "amber", "velvet", "orbit", "maple", "quartz"]
    mem.remember_many([" ".join(rng.choices(far, k=6)) + f" far{j}" for j in range(100)], namespace=FAR)
    files = root / "files"
    _write_files(files, rng)
    for ns in (SMALL, BIG, "A%", "työ"):
        mem.index(files, namespace=ns)  # the same files in four namespaces
    # Spread the update times over a year (the oracle reads them back).
    mem.db.execute(
        "UPDATE chunks SET updated_at = TIMESTAMP '2024-01-01' + to_days(CAST((id * 37) % 365 AS INTEGER))"
    )
    mem.db.rows_changed()  # written behind the API's back: cached rows are stale
    rows = {
        int(r[0]): Row(int(r[0]), r[1], r[2], r[3], list(r[4] or []), r[5])
        for r in mem.db.fetchall(
            "SELECT id, namespace, kind, source, tags, updated_at FROM chunks WHERE deleted_at IS NULL"
        )
    }
    assert {r.namespace for r in rows.values()} == {*NAMESPACES, FAR}
    building.undo()
    # Links across namespaces: search stages that follow them (supersede) must not bring B in.
    by_ns: dict[str, list[int]] = {}
    for row in rows.values():
        by_ns.setdefault(row.namespace, []).append(row.id)
    for _ in range(60):
        a, b = rng.sample(NAMESPACES, 2)
        mem.link(rng.choice(by_ns[a]), rng.choice(by_ns[b]), rng.choice(["supersedes", "related", "extends"]))
    yield Dataset(path, owner, rows, files)
    owner.close()
    if saved is None:
        os.environ.pop("NBMEMORY_RUNTIME_DIR", None)
    else:
        os.environ["NBMEMORY_RUNTIME_DIR"] = saved


@contextlib.contextmanager
def vector_path(method: str) -> Iterator[None]:
    """``memory``: the memory-resident index (the default); through SQL, ``exact``: the default
    threshold (the filtered rows are few); ``hnsw``: HNSW always runs."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(vectors, "IN_MEMORY", method == "memory")
        if method == "hnsw":
            mp.setattr(vectors, "EXACT_SCAN_MAX_ROWS", 10)
        yield


def check(
    entry: str,
    data: Dataset,
    filters: dict[str, Any],
    hits: list[Any],
    k: int,
    trace: Any = None,
    grouped: bool = True,
) -> None:
    """Count one case; every hit must be in the oracle's set, and there must be as many as can be
    (searches give one result per source: as many as there are sources among the allowed items)."""
    allowed = data.matching(filters)
    ids = [int(h["id"] if isinstance(h, dict) else h.id) for h in hits]
    namespaces = {h["namespace"] if isinstance(h, dict) else h.namespace for h in hits}
    TALLY.cases[entry] += 1
    outside = [i for i in ids if i not in allowed]
    if (filters.get("namespace") is not None and namespaces - {filters["namespace"]}) or outside:
        TALLY.leaks[entry] += 1
    method = vector_method(trace)
    if method is not None:
        TALLY.methods[method] += 1
    assert outside == [], (
        f"{entry}: {len(outside)} hit(s) outside {filters}: {[data.rows[i] for i in outside[:3]]}"
    )
    rejected = any(name == "reject" and notes.get("rejected") for name, notes in _stages(trace))
    if not rejected:
        # Exact filtering: a filter matching 1 % of the items still yields k hits when k exist.
        groups = {data.rows[i].source or f"#{i}" for i in allowed} if grouped else allowed
        assert len(ids) == min(k, len(groups)), (entry, filters, len(ids), len(groups))


def _stages(trace: Any) -> list[tuple[str, dict[str, Any]]]:
    """(name, notes) of each stage of a trace object, or of its JSON form (REST, CLI)."""
    if trace is None:
        return []
    if isinstance(trace, dict):
        return [(s["name"], s.get("notes") or {}) for s in trace["stages"]]
    return [(s.name, s.notes) for s in trace.stages]


def vector_method(trace: Any) -> str | None:
    """How the vector stage ran: exact, hnsw, hnsw+filter or hnsw->exact."""
    return next((notes.get("method") for name, notes in _stages(trace) if name == "vector"), None)


filters_strategy = st.fixed_dictionaries(
    {
        "namespace": st.sampled_from([*NAMESPACES, FAR]),
        "kind": st.lists(st.sampled_from(KINDS), max_size=2, unique=True),
        "tags": st.lists(st.sampled_from(TAGS), max_size=2, unique=True),
        "path": st.one_of(st.none(), st.sampled_from(GLOBS)),
        "since": st.one_of(st.none(), st.integers(0, 364).map(lambda d: EPOCH + timedelta(days=d))),
        "until": st.one_of(st.none(), st.integers(0, 364).map(lambda d: EPOCH + timedelta(days=d))),
    }
)
queries = st.lists(st.sampled_from([*WORDS, "zebra", "item7"]), min_size=1, max_size=3).map(" ".join)
SETTINGS = settings(
    max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


# -- the Python API ------------------------------------------------------------------------------


@SETTINGS
@given(
    query=queries,
    f=filters_strategy,
    k=st.integers(1, 60),
    method=st.sampled_from(["memory", "exact", "hnsw"]),
)
def test_memory_search_never_leaks(data: Dataset, query: str, f: dict[str, Any], k: int, method: str) -> None:
    with vector_path(method):
        result = data.owner.memory.search(query, k, log=False, **f)
    check("Memory.search", data, f, result.hits, k, result.trace)


@pytest.mark.slow
@settings(
    max_examples=examples(1500), deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(
    query=queries,
    f=filters_strategy,
    k=st.integers(1, 60),
    method=st.sampled_from(["memory", "exact", "hnsw"]),
)
def test_memory_search_never_leaks_many_examples(
    data: Dataset, query: str, f: dict[str, Any], k: int, method: str
) -> None:
    with vector_path(method):
        result = data.owner.memory.search(query, k, log=False, **f)
    check("Memory.search", data, f, result.hits, k, result.trace)


@settings(max_examples=examples(40), deadline=None, derandomize=True)
@given(
    query=queries,
    ns=st.sampled_from(NAMESPACES),
    k=st.integers(1, 30),
    method=st.sampled_from(["memory", "exact", "hnsw"]),
)
def test_client_over_the_socket_never_leaks(data: Dataset, query: str, ns: str, k: int, method: str) -> None:
    client = _client(data)
    with vector_path(method):
        result = client.search(query, k, namespace=ns, log=False)
    check("connect().search", data, {"namespace": ns}, result.hits, k, result.trace)


_clients: dict[Path, SharedMemory] = {}


def _client(data: Dataset) -> SharedMemory:
    if data.path not in _clients:
        _clients[data.path] = connect(data.path, allow_owner=False)
        assert _clients[data.path].role == "client"
    return _clients[data.path]


@pytest.mark.parametrize(
    ("ns", "method", "expected"),
    [
        (SMALL, "exact", "exact"),  # 200 matching rows: below EXACT_SCAN_MAX_ROWS
        (BIG, "hnsw", "hnsw+filter"),  # over-fetching 1.5x finds enough of B's 900 rows
        (FAR, "hnsw", "hnsw->exact"),  # the nearest rows are all elsewhere: the fallback runs
        (None, "hnsw", "hnsw"),  # no filter at all
        (SMALL, "memory", "memory"),  # the memory-resident index (the default), with a filter mask
        (None, "memory", "memory"),
    ],
)
def test_every_vector_path_keeps_to_the_namespace(
    data: Dataset, ns: str | None, method: str, expected: str
) -> None:
    # Each path of store/vectors.py, forced: exact scan, HNSW + filter, HNSW -> exact fallback.
    query = "kafka consumer lag broker partition offset"
    for api, entry in ((data.owner.memory, "Memory.search"), (_client(data), "connect().search")):
        with vector_path(method):
            # k=10: 50 candidates per retriever, fewer than FAR's 100 rows, so HNSW runs for it.
            result = api.search(query, 10, namespace=ns, log=False)
        assert vector_method(result.trace) == expected
        if ns is not None:
            check(entry, data, {"namespace": ns}, result.hits, 10, result.trace)


def test_related_keeps_to_the_namespace_it_is_asked_for(data: Dataset) -> None:
    mem = data.owner.memory
    client = _client(data)
    rng = random.Random(4)
    small_ids = [i for i, r in data.rows.items() if r.namespace == SMALL]
    big_ids = [i for i, r in data.rows.items() if r.namespace == BIG]
    for item_id in rng.sample(small_ids, 10):
        for ns in (SMALL, BIG, "A%"):
            for api in (mem, client):
                hits = api.related(item_id, k=8, namespace=ns)
                check("related", data, {"namespace": ns}, hits, 8, grouped=False)
        # Without a namespace, related looks everywhere (as search does).
        assert {h.namespace for h in mem.related(item_id, k=60)} - {SMALL}
    # A link to another namespace is not followed into it.
    scratch = Memory(data.path.parent / "links.duckdb", embedder=FakeEmbedder(dim=32))
    with scratch:
        a = scratch.remember("kafka lag runbook", namespace="work")
        b = scratch.remember("kafka lag at home", namespace="home")
        scratch.link(a.id, b.id, "related")
        assert [h.id for h in scratch.related(a.id, k=5)] == [b.id]
        assert scratch.related(a.id, k=5, namespace="work") == []
    assert big_ids


def test_forget_by_query_or_path_stays_in_its_namespace(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nalpha beta gamma shared note\n")
    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=64)) as mem:
        mem.index(notes, namespace="A")
        mem.index(notes, namespace="B")
        mem.remember("alpha beta gamma", namespace="A")
        mem.remember("alpha beta gamma", namespace="B")
        gone = mem.forget(query="alpha beta gamma", k=10, namespace="A")
        assert {mem.get(i, include_forgotten=True).namespace for i in gone} == {"A"}
        assert len(mem.search("alpha beta gamma", 10, namespace="B").hits) == 2
        mem.forget(path=str(notes / "a.md"), namespace="A")
        # B's copy of the file is still live and still follows the file.
        forgotten = dict(mem.db.fetchall("SELECT namespace, forgotten_at IS NOT NULL FROM documents"))
        assert forgotten == {"A": True, "B": False}
        (notes / "a.md").write_text("# A\n\nalpha beta gamma changed note\n")
        os.utime(notes / "a.md", (1e9, 1e9))
        assert mem.index(notes, namespace="B").files_changed == 1
        texts = [h.text for h in mem.search("changed note", 5, namespace="B").hits]
        assert any("changed" in t for t in texts)
        assert mem.search("changed note", 5, namespace="A").hits == []


def test_get_by_id_is_global_by_design(data: Dataset) -> None:
    # Ids are global: get() addresses one item, whatever its namespace (namespaces are filters
    # over one user's memory, not access control; whoever opens the file can read all of it).
    item_id = next(i for i, r in data.rows.items() if r.namespace == BIG)
    assert data.owner.memory.get(item_id, touch=False).namespace == BIG
    assert _client(data).get(item_id, touch=False).namespace == BIG


# -- the magics ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shell(tmp_path_factory: pytest.TempPathFactory, data: Dataset) -> Iterator[Any]:
    from IPython.core.interactiveshell import InteractiveShell

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IPYTHONDIR", str(tmp_path_factory.mktemp("ipython")))
        mp.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path_factory.mktemp("jrun")))
        config = Config()
        config.HistoryManager.hist_file = ":memory:"
        ip = InteractiveShell.instance(config=config)
        ip.run_line_magic("load_ext", "nbmemory")
        magics = ip.magics_manager.registry["MemoryMagics"]
        magics.memory = _client(data)
        yield ip
        magics.memory = None
        magics.namespace = None


def _magic_json(ip: Any, name: str, line: str) -> Any:
    from IPython.utils.capture import capture_output

    with capture_output() as cap:
        ip.run_line_magic(name, line)
    return json.loads(cap.stdout)


@settings(max_examples=examples(25), deadline=None, derandomize=True)
@given(
    query=queries,
    ns=st.sampled_from(NAMESPACES),
    k=st.integers(1, 30),
    method=st.sampled_from(["memory", "exact", "hnsw"]),
)
def test_memsearch_with_ns_and_with_the_configured_namespace(
    shell: Any, data: Dataset, query: str, ns: str, k: int, method: str
) -> None:
    magics = shell.magics_manager.registry["MemoryMagics"]
    with vector_path(method):
        magics.namespace = None
        out = _magic_json(
            shell, "memsearch", f"{query} -k {k} --ns {json.dumps(ns, ensure_ascii=False)} --json"
        )
        check("%memsearch --ns", data, {"namespace": ns}, out["hits"], k)
        magics.namespace = ns
        out = _magic_json(shell, "memsearch", f"{query} -k {k} --json")
        check("%memsearch (configured)", data, {"namespace": ns}, out["hits"], k)
        magics.namespace = None


def test_memcontext_memrelated_and_the_explorer_keep_to_the_namespace(shell: Any, data: Dataset) -> None:
    from IPython.utils.capture import capture_output

    from nbmemory.jupyter.widgets import MemoryExplorer

    magics = shell.magics_manager.registry["MemoryMagics"]
    for ns in (SMALL, "A'b", "työ"):
        magics.namespace = ns
        block = shell.run_line_magic("memcontext", "kafka consumer lag --budget 4000 -k 20")
        hits = [kept.hit for kept in block.included] + [left.hit for left in block.excluded]
        check("%memcontext", data, {"namespace": ns}, hits, 20)
        item_id = next(i for i, r in data.rows.items() if r.namespace == ns)
        with capture_output():
            frame = shell.run_line_magic("memrelated", f"{item_id} -k 6").df
        assert set(frame["namespace"].to_list()) <= {ns}
        TALLY.cases["%memrelated"] += 1
        with capture_output():
            frame = shell.run_line_magic("memrelated", f"{item_id} -k 6 --ns {BIG}").df
        assert set(frame["namespace"].to_list()) <= {BIG}
        TALLY.cases["%memrelated"] += 1
        explorer = MemoryExplorer(_client(data), query="garden tomato", namespace=ns, top_k=15, debounce=0)
        check("MemoryExplorer", data, {"namespace": ns}, explorer.result.hits if explorer.result else [], 15)
        explorer.close()
    magics.namespace = None


# -- the CLI -------------------------------------------------------------------------------------


@settings(max_examples=examples(20), deadline=None, derandomize=True)
@given(query=queries, ns=st.sampled_from(NAMESPACES), k=st.integers(1, 30))
def test_cli_search_with_ns(data: Dataset, query: str, ns: str, k: int) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main(["--db", str(data.path), "-q", "search", query, "--ns", ns, "-k", str(k), "--json"])
    assert code == 0
    check("cli main", data, {"namespace": ns}, json.loads(out.getvalue())["hits"], k)


def test_cli_related_with_ns(data: Dataset) -> None:
    item_id = next(i for i, r in data.rows.items() if r.namespace == SMALL)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert (
            cli_main(["--db", str(data.path), "-q", "related", str(item_id), "-k", "8", "--ns", SMALL]) == 0
        )
    ids = [int(line.split("#", 1)[1].split()[0]) for line in out.getvalue().splitlines() if "] #" in line]
    assert ids and all(data.rows[i].namespace == SMALL for i in ids)
    TALLY.cases["cli related"] += 1


def test_cli_subprocess_search_with_ns(data: Dataset) -> None:
    # A real process, as a user runs it: it becomes a client of this process's owner.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    for ns in (SMALL, "A%"):
        proc = subprocess.run(
            [sys.executable, "-m", "nbmemory.cli", "--db", str(data.path), "-q", "search", "kafka lag",
             "--ns", ns, "-k", "25", "--json"],
            capture_output=True, text=True, env=env, cwd=REPO, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        check("cli subprocess", data, {"namespace": ns}, json.loads(proc.stdout)["hits"], 25)


# -- REST ----------------------------------------------------------------------------------------


@pytest.fixture
def jp_server_config(data: Dataset) -> Iterator[Config]:
    opened: list[SharedMemory] = []

    def factory() -> SharedMemory:
        memory = connect(data.path, allow_owner=False)
        opened.append(memory)
        return memory

    nbmemory.server.set_memory_factory(factory)
    yield Config(
        {
            "ServerApp": {
                "jpserver_extensions": {"nbmemory": True, "jupyter_server_terminals": False},
                "allow_unauthenticated_access": False,
            }
        }
    )
    nbmemory.server.set_memory_factory(None)
    for memory in opened:
        memory.close()


def test_rest_search_and_related_keep_to_ns(
    jp_fetch: Any, run_on_server: Callable[[Any], Any], data: Dataset
) -> None:
    # pytest-jupyter's async-test hook lives in its conftest plugin: drive the server's loop here.
    def get(*parts: str, params: dict[str, Any]) -> Any:
        response = run_on_server(jp_fetch("nbmemory", *parts, params=params, method="GET"))
        return json.loads(response.body)

    rng = random.Random(11)
    for i in range(30):
        ns = [*NAMESPACES, FAR][i % (len(NAMESPACES) + 1)]
        query = " ".join(rng.sample(WORDS, 2))
        k = rng.randrange(1, 40)
        kinds = rng.sample(["memory", "markdown", "notebook", "code", "text"], rng.randrange(0, 2))
        params: dict[str, Any] = {"q": query, "k": str(k), "ns": ns, "explain": "1"}
        if kinds:
            params["kind"] = kinds[0]
        with vector_path(("memory", "exact", "hnsw")[i % 3]):
            body = get("search", params=params)
        check("REST search", data, {"namespace": ns, "kind": kinds}, body["hits"], k, body["trace"])
    for ns in (SMALL, "A_", "ns/x"):
        item_id = next(i for i, r in data.rows.items() if r.namespace == BIG)
        body = get("related", str(item_id), params={"k": "7", "ns": ns})
        check("REST related", data, {"namespace": ns}, body["hits"], 7, grouped=False)
