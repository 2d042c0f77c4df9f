"""The evaluation store cache (:func:`nbmemory.eval.cache.cached_store`), which the BEIR harness
and the notes evaluation share: a store is reused only while nothing that decides its contents
has changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nbmemory.eval import cache
from nbmemory.eval.cache import StoreInfo, cached_store, code_version

BASE: dict[str, Any] = {
    "name": "notes-a-b",
    "corpus": "corpus-digest-1",
    "fingerprint": "model-fingerprint-1",
    "settings": {"title": "heading", "chunking": "none", "max_chars": 1200},
}


class Builds:
    """A build that writes a small file and counts its calls."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, path: Path) -> StoreInfo:
        self.count += 1
        path.write_text(f"store {self.count}")
        return StoreInfo(path=path, documents=2, items=3, reused=False)


@pytest.fixture(autouse=True)
def _pinned_code(monkeypatch: pytest.MonkeyPatch) -> None:
    # An edit of the package while the suite runs must not look like a change of the code.
    monkeypatch.setattr(cache, "code_version", lambda: "code-1")


def test_nothing_changed_reuses_the_store() -> None:
    build = Builds()
    first = cached_store(**BASE, build=build)
    again = cached_store(**BASE, build=build)
    assert build.count == 1 and not first.reused
    assert again.reused and again.path == first.path
    assert (again.documents, again.items) == (2, 3)


def _other_corpus(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    return {**BASE, "corpus": "corpus-digest-2"}


def _other_model(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    return {**BASE, "fingerprint": "model-fingerprint-2"}


def _other_chunking(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    return {**BASE, "settings": {**BASE["settings"], "chunking": "maxp"}}


def _other_chunk_size(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    return {**BASE, "settings": {**BASE["settings"], "max_chars": 800}}


def _another_setting(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    return {**BASE, "settings": {**BASE["settings"], "files": 3}}


def _other_schema(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setattr(cache, "SCHEMA_VERSION", cache.SCHEMA_VERSION + 1)
    return BASE


def _other_code(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setattr(cache, "code_version", lambda: "code-2")
    return BASE


@pytest.mark.parametrize(
    "change",
    [
        _other_corpus,
        _other_model,
        _other_chunking,
        _other_chunk_size,
        _another_setting,
        _other_schema,
        _other_code,
    ],
)
def test_a_change_to_what_decides_the_contents_builds_again(change: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    build = Builds()
    first = cached_store(**BASE, build=build)
    changed = cached_store(**change(monkeypatch), build=build)
    assert build.count == 2 and not changed.reused
    assert changed.path != first.path and changed.path.read_text() == "store 2"


def test_a_rebuilt_store_replaces_the_one_of_the_same_name_model_and_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    build = Builds()
    first = cached_store(**BASE, build=build)
    other_model = cached_store(**_other_model(monkeypatch), build=build)
    newer = cached_store(**_other_corpus(monkeypatch), build=build)
    # The store of the older corpus can never be reused: it is gone; another model's stays.
    assert not first.path.exists() and not first.path.with_suffix(".json").exists()
    assert other_model.path.exists() and newer.path.exists()


def test_the_code_version_covers_every_module_of_memory_store_and_ingest(tmp_path: Path) -> None:
    package = tmp_path / "nbmemory"
    files = [
        "memory.py",
        "store/db.py",
        "store/windows.py",
        "ingest/chunking.py",
        "ingest/notebook.py",
        "ingest/redact/patterns.py",
        "search/pipeline.py",
    ]
    for name in files:
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(f"# {name}\n")
    before = code_version(package)
    assert code_version(package) == before
    for name in files[:-1]:
        (package / name).write_text(f"# {name}, edited\n")
        assert code_version(package) != before, name
        before = code_version(package)
    # Search code reads a store; it does not decide what the store holds.
    (package / "search/pipeline.py").write_text("# edited\n")
    assert code_version(package) == before
