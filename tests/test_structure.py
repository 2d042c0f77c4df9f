"""The package's structure: no import cycles, no reads of other objects' private attributes, and
the memory API declared once and reachable through ``connect()`` with the declared signatures."""

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
#: The front ends, each in its own package.
FRONT_ENDS = ("nbmemory.cli", "nbmemory.jupyter", "nbmemory.mcp", "nbmemory.server")
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
        # The evaluation notebooks' helpers draw with the notebook's charts.
        if not _under(m, (*FRONT_ENDS, "nbmemory.eval")) and m != "nbmemory"
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
