"""pyproject.toml states ranges that fit an existing environment; requirements.lock pins the tested
set inside them."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def requirements() -> list[Requirement]:
    found = [Requirement(line) for line in PROJECT["dependencies"]]
    for lines in PROJECT["optional-dependencies"].values():
        found += [Requirement(line) for line in lines]
    return [req for req in found if canonicalize_name(req.name) != "nbmemory"]


def locked() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in (REPO / "requirements.lock").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


def test_python_is_a_lower_bound_only() -> None:
    assert PROJECT["requires-python"] == ">=3.11"


def test_dependencies_are_ranges_not_pins() -> None:
    pinned = [str(req) for req in requirements() if any(spec.operator == "==" for spec in req.specifier)]
    assert pinned == [], "state a range in pyproject.toml; exact versions go in requirements.lock"


def test_every_dependency_is_locked_inside_its_range() -> None:
    pins = locked()
    for req in requirements():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not in requirements.lock: regenerate it (python -m tools.lock)"
        # The lock's torch is the CPU build, 2.13.0+cpu: its local label is not part of the range.
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"locked {name}=={pins[name]} is outside {req}"
        )


def test_the_version_is_written_once_and_the_labextension_carries_it() -> None:
    import json

    import nbmemory

    project = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert 'dynamic = ["version"]' in project and 'attr = "nbmemory.__version__"' in project
    # npm needs the version in package.json; the prebuilt copy is made from it.
    for package in (REPO / "labextension" / "package.json", REPO / "nbmemory" / "labextension" / "package.json"):
        assert json.loads(package.read_text(encoding="utf-8"))["version"] == nbmemory.__version__, package
