"""Write requirements.lock: the exact versions of nbmemory[dev] and everything it pulls in, read from
the environment this runs in (the tested one). Usage: python -m tools.lock [OUTPUT]

`make` and CI install from the lock; pyproject.toml states ranges. Only the dependency closure of
nbmemory[dev] is written, so a tool installed into the environment by hand does not creep in.
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
HEADER = """\
# The tested set: exact versions of nbmemory[dev] and all it pulls in, on Python {python} (Linux).
# `make` installs it (`pip install -r requirements.lock -e '.[dev]'`); pyproject.toml states ranges.
# torch is its CPU build: pip finds it through find-links (/opt/wheels here); elsewhere add
# `--extra-index-url https://download.pytorch.org/whl/cpu`.
# Regenerate from a working .venv: .venv/bin/python -m tools.lock
"""


def closure(roots: list[Requirement]) -> dict[str, metadata.Distribution]:
    """Installed distributions reachable from ``roots``, extras and environment markers applied."""
    found: dict[str, metadata.Distribution] = {}
    extras_seen: dict[str, set[str]] = {}
    todo = list(roots)
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        extras = set(req.extras)
        if name in extras_seen and extras <= extras_seen[name]:
            continue
        extras_seen[name] = extras_seen.get(name, set()) | extras
        dist = metadata.distribution(name)
        found[name] = dist
        for line in dist.requires or []:
            sub = Requirement(line)
            wanted = ["", *sorted(extras_seen[name])]
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in wanted):
                todo.append(sub)
    return found


def main(argv: list[str]) -> int:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    roots = [Requirement(line) for line in project["dependencies"]]
    for lines in project["optional-dependencies"].values():
        roots += [
            Requirement(line) for line in lines if canonicalize_name(Requirement(line).name) != "nbmemory"
        ]
    found = closure(roots)
    out = Path(argv[0]) if argv else REPO / "requirements.lock"
    python = ".".join(map(str, sys.version_info[:2]))
    lines = sorted((f"{dist.metadata['Name']}=={dist.version}" for dist in found.values()), key=str.lower)
    out.write_text(HEADER.format(python=python) + "\n".join(lines) + "\n", encoding="utf-8")
    print(f"{out}: {len(lines)} packages")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
