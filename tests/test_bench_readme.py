"""``bench/README.md`` lists every benchmark script with the command that runs it, names no script
that is gone, and accounts for every kept result."""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
README = (BENCH / "README.md").read_text(encoding="utf-8")


def _scripts() -> list[str]:
    """Every module under bench/, as a path relative to it (``search/bench_search.py``)."""
    return sorted(p.relative_to(BENCH).as_posix() for p in BENCH.rglob("*.py") if p.name != "__init__.py")


def _module(script: str) -> str:
    return "bench." + script.removesuffix(".py").replace("/", ".")


def _runnable(script: str) -> bool:
    return 'if __name__ == "__main__":' in (BENCH / script).read_text(encoding="utf-8")


def test_the_readme_lists_every_script_under_bench() -> None:
    missing = [s for s in _scripts() if f"`{s}`" not in README]
    assert missing == [], f"add these to bench/README.md: {missing}"


def test_the_readme_gives_every_runnable_script_its_command() -> None:
    missing = [_module(s) for s in _scripts() if _runnable(s) and f"python -m {_module(s)}" not in README]
    assert missing == [], f"bench/README.md lacks the command of: {missing}"


def test_the_readme_names_no_script_that_does_not_exist() -> None:
    paths = set(re.findall(r"`((?:\w+/)+\w+\.py)`", README))
    gone = sorted(p for p in paths if not (BENCH / p).exists() and not (ROOT / p).exists())
    modules = set(re.findall(r"python -m ((?:bench|tests)(?:\.\w+)+)", README))
    gone += sorted(m for m in modules if not (ROOT / (m.replace(".", "/") + ".py")).exists())
    assert gone == []


def test_every_script_says_how_to_run_it() -> None:
    # The usage in each docstring is what --help shows: it must be the module form the README uses.
    stale = [
        s
        for s in _scripts()
        if _runnable(s)
        and f"python -m {_module(s)}" not in (ast.get_docstring(ast.parse((BENCH / s).read_text())) or "")
    ]
    assert stale == []


def test_every_kept_result_is_in_the_readme() -> None:
    # Named exactly or by a pattern such as `tune-beir-gpu-*.json`: a new dated copy fails here.
    named = re.findall(r"`(?:bench/results/)?([\w*.-]+\.(?:json|txt|log))`", README)
    unlisted = [
        p.name
        for p in sorted((BENCH / "results").iterdir())
        if not any(fnmatch.fnmatchcase(p.name, pattern) for pattern in named)
    ]
    assert unlisted == [], f"bench/results/ holds files bench/README.md does not explain: {unlisted}"
