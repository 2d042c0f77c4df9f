"""The package's import graph, its cycles, and reads of other objects' private attributes.

    python -m tests.import_graph            # edges per module, cycles, private accesses
    python -m tests.import_graph --json     # the same as JSON

``tests/test_structure.py`` asserts on it.

Every ``import`` counts, at module level or inside a function, except those under
``if TYPE_CHECKING:`` (they never run). The parent packages that Python initialises on the way
to ``a.b.c`` are not counted (they are always initialised first); ``from a import name`` of
something that is not a submodule counts as importing ``a``. A private access is ``obj._name`` in one module where
``obj`` is not ``self``/``cls`` and ``_name`` is not a dunder: the issue's "no module touches
another object's private attributes" (``module._name`` on an imported module included). A private
import is ``from m import _name``: a name another module keeps to itself.

The package graph collapses each module to its unit, the first level under the package
(``nbmemory.store.db`` -> ``nbmemory.store``; a top-level module such as ``nbmemory.memory`` is its
own unit): a cycle between packages is one the module graph does not show. SQL outside the store
is a string literal that starts with an SQL statement's keyword, or a call of a database's
``execute``/``fetchall``/``fetchone``/``scalar``.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "nbmemory"
#: Folders of the package that hold data, not code: the sample corpus is other people's code.
DATA = ("sample_corpus",)


def _code(root: Path, package: str) -> list[Path]:
    """The package's Python files, data folders left out."""
    return sorted(
        p for p in (root / package).rglob("*.py") if p.relative_to(root / package).parts[0] not in DATA
    )


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, is_package: bool, modules: set[str]) -> set[str]:
    """Modules imported anywhere in ``tree`` outside ``if TYPE_CHECKING:`` blocks."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # ``from pkg import mod`` imports the submodule ``pkg.mod``; ``from pkg import name``
            # needs the package itself.
            submodules = {f"{target}.{alias.name}" for alias in node.names} & modules
            found.update(submodules)
            if len(submodules) < len(node.names):
                found.add(target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def graph(root: Path = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    """``{module: {modules of the package it imports}}``, parent packages included."""
    files = {_module_name(p, root): p for p in _code(root, package)}
    edges: dict[str, set[str]] = {}
    for name, path in files.items():
        raw = _imports(ast.parse(path.read_text()), name, path.name == "__init__.py", set(files))
        edges[name] = {t for t in raw if t in files and t != name}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def connect(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            connect(v)
    # A package importing its own submodules (``__init__`` re-exports) is not a layering cycle
    # unless a submodule imports the package back; the component shows it either way.
    return sorted(found)


def private_accesses(root: Path = ROOT, package: str = PACKAGE) -> list[str]:
    """``file:line: expr`` for each ``x._name`` where ``x`` is not ``self`` or ``cls``."""
    out = []
    for path in _code(root, package):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute):
                continue
            attr = node.attr
            if not attr.startswith("_") or attr.endswith("_"):
                continue  # public, a dunder, or a protocol hook such as IPython's _repr_html_
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            out.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return out


def private_imports(root: Path = ROOT, package: str = PACKAGE) -> list[str]:
    """``file:line: from m import _name`` for each private name imported from another module."""
    out = []
    for path in _code(root, package):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            names = [a.name for a in node.names if a.name.startswith("_") and not a.name.endswith("__")]
            if names:
                where = "." * node.level + (node.module or "")
                out.append(f"{path.relative_to(root)}:{node.lineno}: from {where} import {', '.join(names)}")
    return out


def unit(module: str) -> str:
    """The first level under the package: ``nbmemory.store.db`` -> ``nbmemory.store``."""
    return ".".join(module.split(".")[:2])


def package_graph(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """``edges`` with each module collapsed to its :func:`unit`; a unit's imports of itself dropped."""
    units: dict[str, set[str]] = {}
    for module, targets in edges.items():
        units.setdefault(unit(module), set()).update(unit(t) for t in targets)
    return {u: targets - {u} for u, targets in units.items()}


def upward_imports(edges: dict[str, set[str]], layers: Sequence[Sequence[str]]) -> dict[str, list[str]]:
    """``{module: [modules of a higher layer it imports]}``; ``layers`` lists units, lowest first.

    A unit in no layer raises ``ValueError``: a new package or top-level module needs a place."""
    rank = {u: n for n, layer in enumerate(layers) for u in layer}
    unplaced = sorted({unit(m) for m in edges} - set(rank))
    if unplaced:
        raise ValueError(f"units in no layer: {', '.join(unplaced)}; add each to one of LAYERS")
    found = {m: sorted(t for t in targets if rank[unit(t)] > rank[unit(m)]) for m, targets in edges.items()}
    return {m: t for m, t in sorted(found.items()) if t}


#: What starts an SQL statement; a string literal starting so is SQL (``BEGIN`` and the like
#: followed by a word, so that prose such as "BEGIN" alone is not).
SQL_START = re.compile(
    r"\s*(SELECT|INSERT INTO|UPDATE \w+ SET|DELETE FROM|CREATE|DROP|ALTER|WITH \w+ AS|PRAGMA|CHECKPOINT|BEGIN TRANSACTION)\b"
)
#: SQL that is not the memory's and so stays outside the store, each with its reason.
SQL_ELSEWHERE = {
    # IPython's own history.sqlite, read with sqlite3 in the kernel's process, not the memory file.
    "nbmemory/ingest/history.py": "IPython's history database",
    # DuckDB's GLOB over an Arrow array of sources in a private in-memory connection: the same
    # matching as the SQL filter, on the index's columns, no table of the memory involved.
    "nbmemory/search/filter_mask.py:_duckdb_glob": "GLOB matching in memory",
}
#: The calls that run SQL on a database or a DuckDB connection.
SQL_CALLS = frozenset({"execute", "executemany", "fetchall", "fetchone", "scalar"})


def sql_outside(
    under: str = "store", root: Path = ROOT, package: str = PACKAGE, elsewhere: Sequence[str] = ()
) -> list[str]:
    """``file:line: code`` for each SQL literal or SQL call outside ``package/under/``.

    ``elsewhere`` names the SQL allowed outside: a file (``nbmemory/x.py``) or one function of it
    (``nbmemory/x.py:name``)."""
    out = []
    for path in _code(root, package):
        if path.relative_to(root / package).parts[0] == under:
            continue
        name = str(path.relative_to(root))
        if name in elsewhere:
            continue
        found: dict[int, str] = {}

        def visit(node: ast.AST, name: str = name, found: dict[int, str] = found) -> None:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and f"{name}:{node.name}" in elsewhere:
                return
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL_START.match(node.value):
                found.setdefault(node.lineno, repr(node.value.strip()[:60]))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SQL_CALLS:
                found[node.lineno] = f"{ast.unparse(node.func.value)[:40]}.{node.func.attr}(...)"
            for child in ast.iter_child_nodes(node):
                visit(child)

        visit(ast.parse(path.read_text()))
        out.extend(f"{name}:{line}: {code}" for line, code in sorted(found.items()))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    edges = graph()
    report = {
        "modules": len(edges),
        "edges": sum(len(v) for v in edges.values()),
        "cycles": cycles(edges),
        "private_accesses": private_accesses(),
        "private_imports": private_imports(),
        "package_cycles": cycles(package_graph(edges)),
        "sql_outside_store": sql_outside(elsewhere=SQL_ELSEWHERE),
    }
    if args.json:
        print(json.dumps({**report, "graph": {k: sorted(v) for k, v in sorted(edges.items())}}, indent=1))
        return 0
    print(f"{report['modules']} modules, {report['edges']} import edges")
    print(f"cycles: {len(report['cycles'])}")
    for component in report["cycles"]:
        print("  " + " <-> ".join(component))
    print(f"private attributes read across objects: {len(report['private_accesses'])}")
    for line in report["private_accesses"]:
        print("  " + line)
    print(f"private names imported across modules: {len(report['private_imports'])}")
    for line in report["private_imports"]:
        print("  " + line)
    print(f"package cycles: {len(report['package_cycles'])}")
    for component in report["package_cycles"]:
        print("  " + " <-> ".join(component))
    print(f"SQL outside the store: {len(report['sql_outside_store'])}")
    for line in report["sql_outside_store"]:
        print("  " + line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
