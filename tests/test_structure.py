"""The package's structure: layers that point one way, file by file and package by package, SQL
only in the store, no reads of other objects' private attributes or imports of other modules'
private names, and the memory API declared once and reachable through ``connect()`` with the
declared signatures."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from nbmemory import Memory, api
from nbmemory.embed import FakeEmbedder
from nbmemory.remote import connect, wire
from nbmemory.remote.shared import SharedMemory
from tests import import_graph


def test_the_import_graph_has_no_cycle() -> None:
    edges = import_graph.graph()
    assert edges.get("nbmemory.memory")  # the walk found imports
    assert import_graph.cycles(edges) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert import_graph.cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_reads_another_objects_private_attributes() -> None:
    assert import_graph.private_accesses() == []


def test_no_module_imports_another_modules_private_names() -> None:
    assert import_graph.private_imports() == []


def test_the_private_import_finder_finds_one(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("from pkg.b import _hidden, shown\nfrom .b import __all__\n")
    assert import_graph.private_imports(tmp_path, "pkg") == ["pkg/a.py:1: from pkg.b import _hidden"]


def test_the_package_graph_has_no_cycle() -> None:
    units = import_graph.package_graph(import_graph.graph())
    assert "nbmemory.store" in units["nbmemory.search"]  # the walk found package-level imports
    assert import_graph.cycles(units) == []


def test_the_package_graph_shows_a_cycle_the_module_graph_does_not() -> None:
    edges = {"p.a.x": {"p.b.y"}, "p.b.z": {"p.a.w"}, "p.a.w": set(), "p.b.y": set(), "p.c": {"p.a.x"}}
    assert import_graph.cycles(edges) == []
    assert import_graph.package_graph(edges) == {"p.a": {"p.b"}, "p.b": {"p.a"}, "p.c": {"p.a"}}
    assert import_graph.cycles(import_graph.package_graph(edges)) == [["p.a", "p.b"]]


#: The front ends, each in its own package.
FRONT_ENDS = ("nbmemory.cli", "nbmemory.jupyter", "nbmemory.mcp", "nbmemory.server")
# Lowest first, in the order the code already mostly followed: values < vectors < rows < chunks < ranking < facade < evaluation < front ends.
LAYERS = (
    # values, settings and process-wide helpers, standard library (or nearly) only
    (
        "nbmemory.errors",
        "nbmemory.config",
        "nbmemory.private",
        "nbmemory.items",
        "nbmemory.own_output",
        "nbmemory.progress",
        "nbmemory.long_lived",
        "nbmemory.model_use",
        "nbmemory.safety",
        "nbmemory.runtime",
        "nbmemory.charts",
    ),
    ("nbmemory.embed",),
    ("nbmemory.store",),
    ("nbmemory.ingest",),
    ("nbmemory.search",),
    # the facade's parts
    (
        "nbmemory.api",
        "nbmemory.validate",
        "nbmemory.executions",
        "nbmemory.refine",
        "nbmemory.active_model",
        "nbmemory.team",
        "nbmemory.tune",
        "nbmemory.jobs",
    ),
    ("nbmemory.memory",),
    # what opens a memory (in this process or shared) or acts through one
    ("nbmemory.options", "nbmemory.remote", "nbmemory.live", "nbmemory.demo", "nbmemory.forget_source"),
    ("nbmemory.eval",),
    FRONT_ENDS,
    # the package's own entry points (``load_ipython_extension``, the lazy public names)
    ("nbmemory",),
)


def test_no_module_imports_from_a_higher_layer() -> None:
    edges = import_graph.graph()
    assert len(edges) > 100
    assert import_graph.upward_imports(edges, LAYERS) == {}


def test_the_layer_check_finds_an_upward_import_and_an_unplaced_unit() -> None:
    edges = {"p.low.a": {"p.high"}, "p.high": {"p.low.b"}, "p.low.b": set()}
    assert import_graph.upward_imports(edges, [("p.low",), ("p.high",)]) == {"p.low.a": ["p.high"]}
    with pytest.raises(ValueError, match=r"p\.high"):
        import_graph.upward_imports(edges, [("p.low",)])


def test_sql_lives_only_in_the_store() -> None:
    assert len(import_graph.SQL_ELSEWHERE) <= 2  # SQL on something else than the memory's file
    assert import_graph.sql_outside(elsewhere=list(import_graph.SQL_ELSEWHERE)) == []


def test_the_sql_finder_finds_statements_and_calls(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "store").mkdir(parents=True)
    (tmp_path / "pkg" / "store" / "rows.py").write_text("def n(db):\n    return db.scalar('SELECT 1')\n")
    (tmp_path / "pkg" / "a.py").write_text(
        "Q = 'SELECT id FROM chunks'\nNOTE = 'Select the rows you want'\n\n\ndef n(con):\n    return con.execute(Q)\n"
    )
    assert import_graph.sql_outside(root=tmp_path, package="pkg") == [
        "pkg/a.py:1: 'SELECT id FROM chunks'",
        "pkg/a.py:6: con.execute(...)",
    ]
    assert import_graph.sql_outside(root=tmp_path, package="pkg", elsewhere=["pkg/a.py:n"]) == [
        "pkg/a.py:1: 'SELECT id FROM chunks'"
    ]


def test_lower_layers_never_import_the_facade() -> None:
    edges = import_graph.graph()
    lower = ("nbmemory.store", "nbmemory.search", "nbmemory.embed", "nbmemory.ingest", "nbmemory.tune")
    offenders = {m: t for m, t in edges.items() if m.startswith(lower) and "nbmemory.memory" in t}
    assert offenders == {}


def test_the_store_never_imports_search_code() -> None:
    # store/ holds rows, files and migrations; the indexes a search reads, the memory-resident
    # ones included, live in search/ and hear of writes through the store (Database.chunks_written).
    edges = import_graph.graph()
    assert any(m.startswith("nbmemory.search.hot") for m in edges)
    offenders = {
        m: sorted(t for t in targets if t == "nbmemory.search" or t.startswith("nbmemory.search."))
        for m, targets in edges.items()
        if m == "nbmemory.store" or m.startswith("nbmemory.store.")
    }
    assert {m: t for m, t in offenders.items() if t} == {}


#: The serving code: what answers a search or takes a write. It never reads evaluation code or data.
SERVING = ("nbmemory.store", "nbmemory.search", "nbmemory.ingest", "nbmemory.embed", "nbmemory.remote")
FACADE = (
    "nbmemory.memory",
    "nbmemory.api",
    "nbmemory.jobs",
    "nbmemory.live",
    "nbmemory.options",
    "nbmemory.config",
)
#: What a front end may import: the facade (in one process or shared), its jobs, the option
#: specs, the value types it hands out, and other front ends.
FRONT_END_MAY_IMPORT = (
    "nbmemory.memory",
    "nbmemory.api",
    "nbmemory.remote",
    "nbmemory.jobs",
    "nbmemory.live",
    "nbmemory.options",
    "nbmemory.errors",
    "nbmemory.items",
    "nbmemory.config",
    "nbmemory.private",
    "nbmemory.safety",
    "nbmemory.own_output",
    "nbmemory.progress",
    "nbmemory.demo",
    # Where processes sharing a memory publish their status; the offline chart renderer.
    "nbmemory.runtime",
    "nbmemory.charts",
    # Reads IPython's history.sqlite in the caller's process and writes through the facade.
    "nbmemory.ingest.history",
    # A query's words as the index reads them: refused before anything loads, the last one read
    # as a prefix (in the owner only: a facade operation would serve clients too).
    "nbmemory.search.prefix",
    # Forget a hit's whole file: two facade calls (get, forget by path).
    "nbmemory.forget_source",
    *FRONT_ENDS,
)


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_serving_code_never_imports_evaluation() -> None:
    edges = import_graph.graph()
    offenders = {
        m: sorted(t for t in targets if _under(t, ("nbmemory.eval",)))
        for m, targets in edges.items()
        if _under(m, SERVING + FACADE)
    }
    assert {m: t for m, t in offenders.items() if t} == {}


def test_front_ends_import_only_the_facade_and_the_option_specs() -> None:
    edges = import_graph.graph()
    assert any(_under(m, ("nbmemory.jupyter",)) for m in edges)  # the walk found the front ends
    offenders = {}
    for module, targets in edges.items():
        if not _under(module, FRONT_ENDS):
            continue
        # ``nbmemory eval ...`` is the evaluation's own command line, mounted by the CLI.
        allowed = (
            *FRONT_END_MAY_IMPORT,
            *(("nbmemory.eval.cli",) if _under(module, ("nbmemory.cli",)) else ()),
        )
        bad = sorted(t for t in targets if t.startswith("nbmemory.") and not _under(t, allowed))
        if bad:
            offenders[module] = bad
    assert offenders == {}


def test_nothing_below_the_front_ends_imports_one() -> None:
    edges = import_graph.graph()
    offenders = {
        m: sorted(t for t in targets if _under(t, FRONT_ENDS))
        for m, targets in edges.items()
        if not _under(m, FRONT_ENDS) and m != "nbmemory"
    }
    assert {m: t for m, t in offenders.items() if t} == {}


def test_memory_implements_every_declared_operation_with_its_signature() -> None:
    assert len(api.API_METHODS) >= 15
    for name in api.API_METHODS:
        ours = inspect.signature(getattr(Memory, name))
        assert list(ours.parameters)[1:] == list(api.signature(name).parameters), name
        assert getattr(Memory, name).__doc__, name


def test_the_wire_serves_exactly_the_declared_operations() -> None:
    assert {*api.API_METHODS, "ping"} == wire.METHODS


def test_every_operation_is_reachable_through_connect_with_the_declared_signature(tmp_path: Path) -> None:
    for name in api.API_METHODS:
        proxy = inspect.signature(getattr(SharedMemory, name))
        assert list(proxy.parameters)[1:] == list(api.signature(name).parameters), name
        assert str(proxy).replace("self, /, ", "").replace("(self, /)", "()") == str(api.signature(name)), (
            name
        )

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "vpn.md").write_text("# VPN\n\nDeploys need the VPN on.\n")
    owner = connect(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=32))
    client = connect(tmp_path / "m.duckdb", allow_owner=False)
    try:
        assert owner.role == "owner" and client.role == "client"
        item = client.remember("the staging database is db-stg-12", tags=["ops"])
        other = client.remember("kafka lag pages the on-call engineer")
        calls: dict[str, Any] = {
            "index": lambda m: m.index(notes).files_changed == 1,
            "remember": lambda m: m.remember("polars lazy frames").text == "polars lazy frames",
            "remember_many": lambda m: len(m.remember_many(["a note", "another note"])) == 2,
            "capture": lambda m: m.get(m.capture([{"source": "print(1)"}])[0]).kind == "execution",
            "get": lambda m: m.get(item.id).text == item.text,
            "update": lambda m: m.update(item.id, importance=0.9).importance == 0.9,
            "link": lambda m: m.link(item.id, other.id, "related") is None,
            "links": lambda m: m.links(item.id)[0]["dst"] == other.id,
            "related": lambda m: other.id in [h.id for h in m.related(item.id, k=3)],
            "search": lambda m: item.id in m.search("staging database", k=3).ids,
            "forget": lambda m: m.forget(query="polars lazy frames", k=1) != [],
            "restore": lambda m: m.restore(iter(m.forget(other.id))) == [other.id],
            "stats": lambda m: m.stats()["role"] == "client",
            "wait_refined": lambda m: m.wait_refined(30) is True,
            "doctor": lambda m: m.doctor().ok,
            "export": lambda m: m.export(tmp_path / "out.jsonl") >= 3,
            "reembed": lambda m: m.reembed() >= 3,
            "models": lambda m: isinstance(m.models(), list),
            "roots": lambda m: [r["path"] for r in m.roots()] == [str(notes)],
            "remove_root": lambda m: m.remove_root(notes) == 1 and m.roots() == [],
        }
        assert set(calls) == set(api.API_METHODS), "a declared operation has no call here"
        for name in api.API_METHODS:
            assert calls[name](client), name
    finally:
        client.close()
        owner.close()


def test_a_class_lacking_an_operation_is_refused() -> None:
    class Partial:
        def search(self, query: str) -> None: ...

    with pytest.raises(TypeError, match="lacks the memory operation"):
        api.implements(Partial)
