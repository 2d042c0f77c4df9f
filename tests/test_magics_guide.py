"""The magics guide (docs/guide/magics.md) says exactly what each magic accepts, and names every setting."""

from __future__ import annotations

import re
from pathlib import Path

from nbmemory.jupyter.magics import MemoryMagics

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide" / "magics.md"
OPTION = re.compile(r"(?<![\w-])--?[a-z][\w-]*")


def magic_section() -> str:
    return GUIDE.read_text(encoding="utf-8")


def documented() -> dict[str, set[str]]:
    """Magic name -> options, from the first column of the reference table."""
    found: dict[str, set[str]] = {}
    for line in magic_section().splitlines():
        if not line.startswith("| `%"):
            continue
        first_cell = re.split(r"(?<!\\)\|", line)[1]
        for span in re.findall(r"`([^`]+)`", first_cell):
            name = span.lstrip("%").split()[0]
            found.setdefault(name, set()).update(OPTION.findall(span))
    return found


def accepted() -> dict[str, set[str]]:
    """Magic name -> options its argument parser takes."""
    registered = MemoryMagics.magics
    names = set(registered["line"]) | set(registered["cell"])
    out: dict[str, set[str]] = {}
    for name in names:
        method = getattr(MemoryMagics, registered["line"].get(name) or registered["cell"][name])
        parser = getattr(method, "parser", None)
        actions = parser._actions if parser is not None else []
        out[name] = {opt for action in actions for opt in action.option_strings}
    return out


def test_every_magic_is_in_the_guide_and_every_documented_magic_exists() -> None:
    assert set(documented()) == set(accepted())


def test_every_option_is_documented_and_every_documented_option_exists() -> None:
    docs, real = documented(), accepted()
    for name, options in real.items():
        assert options <= docs[name], f"%{name}: docs/guide/magics.md misses {sorted(options - docs[name])}"
        assert docs[name] <= options, (
            f"%{name}: docs/guide/magics.md names {sorted(docs[name] - options)}, not accepted"
        )


def test_every_setting_is_documented() -> None:
    section = magic_section()
    for name in MemoryMagics.class_traits(config=True):
        assert f"`{name}`" in section, f"MemoryMagics.{name} is not in docs/guide/magics.md"
