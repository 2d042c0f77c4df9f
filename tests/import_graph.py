"""The package's import graph, its cycles, and reads of other objects' private attributes.

    python -m tests.import_graph            # edges per module, cycles, private accesses
    python -m tests.import_graph --json     # the same as JSON

``tests/test_structure.py`` asserts on it.

Every ``import`` counts, at module level or inside a function, except those under
``if TYPE_CHECKING:`` (they never run). The parent packages that Python initialises on the way
to ``a.b.c`` are not counted (they are always initialised first); ``from a import name`` of
something that is not a submodule counts as importing ``a``. A private access is ``obj._name`` in one module where
``obj`` is not ``self``/``cls`` and ``_name`` is not a dunder: the issue's "no module touches
another object's private attributes".
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "nbmemory"


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
    files = {_module_name(p, root): p for p in (root / package).rglob("*.py")}
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
    for path in sorted((root / package).rglob("*.py")):
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
