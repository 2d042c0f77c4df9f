"""Shared fixtures: a real DuckDB file per test, the real bundled model once per session."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# A CLI run starts a background owner that outlives it: in tests, let it go soon after.
os.environ.setdefault("NBMEMORY_IDLE_SECONDS", "10")
# One test process opens hundreds of memories: a freeze at each (nbmemory.long_lived) would keep
# every earlier test's cyclic garbage for good. tests/test_long_lived.py checks it in a child.
os.environ.setdefault("NBMEMORY_GC_FREEZE", "0")
# A shell or kernel that loads the extension captures its cells: not into the memories of tests
# about something else (tests/test_capture*.py turn it on).
os.environ.setdefault("NBMEMORY_CAPTURE", "0")
# Passages made with each write, so a test's rankings do not depend on how far the background
# refiner got (tests/test_refine.py and tests/reliability/test_refine_kill.py test that path).
os.environ.setdefault("NBMEMORY_REFINE", "inline")

from hypothesis import HealthCheck, settings

from nbmemory import Memory
from nbmemory.config import cache_folder
from nbmemory.embed import FakeEmbedder, SentenceTransformerEmbedder
from tests.quick import QUICK, examples

# A timing never decides a test: no example fails for taking long (hypothesis' deadline) and no
# test for generating its examples slowly (too_slow), as on a busy machine.
settings.register_profile("nbmemory", deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Property tests that name no count of their own: fewer in `make check` (tests/quick.py).
settings.register_profile("quick", settings.get_profile("nbmemory"), max_examples=examples(100))
settings.load_profile("quick" if QUICK else "nbmemory")


#: Document vectors shared by the test processes that index the same texts with the bundled model
#: (the Jupyter servers and kernels of the UI tests, the demo notebook's kernel, the wheel's
#: demo): handed to them as ``NBMEMORY_VECTOR_CACHE`` (nbmemory.embed.cache), so only the first
#: of them runs the model over the sample notes. Not for a test whose subject is the model's work
#: (progress while embedding, a kill mid-embedding).
SHARED_VECTORS = cache_folder("tests", "vectors")


class CountingEmbedder:
    """Wraps an embedder and records every text it was asked to embed."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.texts: list[str] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    @property
    def name(self) -> str:
        return self.inner.name  # type: ignore[attr-defined]

    @property
    def fingerprint(self) -> str:
        return self.inner.fingerprint  # type: ignore[attr-defined]

    @property
    def dim(self) -> int:
        return self.inner.dim  # type: ignore[attr-defined]

    def embed_documents(self, texts: Sequence[str], progress: object = None) -> np.ndarray:
        self.texts.extend(texts)
        return self.inner.embed_documents(texts)  # type: ignore[attr-defined]

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)  # type: ignore[attr-defined]


# The modules that take longest, longest first (seconds summed per module from `--durations=0` of
# a full `make test` on 2 cores; the real-notes index is ~450 s on a first run, ~16 s once its
# vectors are cached). Test processes take modules in this order: the Makefile passes
# `--no-loadscope-reorder`, without which pytest-xdist hands out the modules with the most tests
# first, and the wheel check (one test, four minutes) started last, on one core, the other idle.
LONGEST_FIRST = (
    "tests/search/test_real_notes.py",  # 446 (first run, or after a change to nbmemory/embed/); 29
    "tests/test_wheel.py",  # 215
    "tests/server/test_ui_lab.py",  # 162
    "tests/reliability/test_crash.py",  # 112
    "tests/tune/test_tune_memory.py",  # 82
    "tests/test_warm_owner.py",  # 61
    "tests/tune/test_memtune_magic.py",  # 57
    "tests/test_magics.py",  # 56
    "tests/server/test_ui_progress.py",  # 51
    "tests/server/test_ui_notebook.py",  # 50
    "tests/test_mcp.py",  # 40
    "tests/search/test_hot.py",  # 37
    "tests/server/test_ui.py",  # 31
    "tests/reliability/test_bad_input.py",  # 29
    "tests/server/test_handlers.py",  # 26
    "tests/test_fts_tokenizer.py",  # 25
    "tests/test_memory.py",  # 23
    "tests/notebooks/test_builtin_notebooks.py",  # 22
)
if _gone := [m for m in LONGEST_FIRST if not (Path(__file__).parents[1] / m).exists()]:
    raise RuntimeError(f"tests/conftest.py LONGEST_FIRST names modules that are gone: {_gone}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A test that reaches the session's real model (directly or through a fixture: ``mem``,
    # ``notes_store``) is a `model` test, marked or not: `make check` leaves them out.
    # Likewise a test on a Jupyter server (pytest-jupyter's ``jp_serverapp``) is `integration`.
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "real_embedder" in fixtures:
            item.add_marker(pytest.mark.model)
        if "jp_serverapp" in fixtures:
            item.add_marker(pytest.mark.integration)
    rank = {module: i for i, module in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing a test does may touch the real ~/.nbmemory.
    monkeypatch.setenv("NBMEMORY_HOME", str(tmp_path / "home"))


@pytest.fixture(scope="session")
def real_embedder() -> SentenceTransformerEmbedder:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        # Test processes side by side (`make test`): each encodes on its share of the cores.
        from nbmemory.config import set_torch_threads

        set_torch_threads(max(1, (os.cpu_count() or 1) // workers))
    return SentenceTransformerEmbedder(device="cpu")


@pytest.fixture
def shared_default_model(monkeypatch: pytest.MonkeyPatch, real_embedder: SentenceTransformerEmbedder) -> None:
    """A memory opened by name with the bundled model gets :func:`real_embedder` instead of a
    fresh load: in-process front ends (the CLI's ``main``) open one per command, and each fresh
    load pays seconds for its first query (the ONNX session). The same weights, the same vectors."""
    from nbmemory.embed import loader

    load = loader.load_model

    def shared(model: str, device: str | None = None) -> SentenceTransformerEmbedder:
        if model == real_embedder.name and device in (None, "cpu"):
            return real_embedder
        return load(model, device)

    monkeypatch.setattr(loader, "load_model", shared)


@pytest.fixture
def fake_embedder() -> FakeEmbedder:
    return FakeEmbedder(dim=32)


@pytest.fixture(scope="session")
def empty_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A closed memory file with every migration applied and nothing stored: the start of
    :func:`mem` and :func:`fake_mem`. A copy opens in half the time of a new file (no migrations,
    no first FTS build); it holds no model yet, so any embedder may take it."""
    folder = tmp_path_factory.mktemp("empty")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NBMEMORY_HOME", str(folder / "home"))
        Memory(folder / "empty.duckdb", embedder=FakeEmbedder(dim=32)).close()
    return folder / "empty.duckdb"


def copy_store(store: Path, target: Path) -> Path:
    """``target``: a private copy of the closed memory file ``store`` (tests may change it)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(store, target)
    return target


@pytest.fixture
def mem(tmp_path: Path, real_embedder: SentenceTransformerEmbedder, empty_store: Path) -> Iterator[Memory]:
    with Memory(copy_store(empty_store, tmp_path / "m.duckdb"), embedder=real_embedder) as memory:
        yield memory


@pytest.fixture
def fake_mem(tmp_path: Path, fake_embedder: FakeEmbedder, empty_store: Path) -> Iterator[Memory]:
    with Memory(copy_store(empty_store, tmp_path / "f.duckdb"), embedder=fake_embedder) as memory:
        yield memory


@pytest.fixture
def sql_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Searches through SQL with a persisted HNSW index (``NBMEMORY_HOT=0``), here and in child
    processes: for tests of that machinery, which the memory-resident index replaces by default."""
    from nbmemory.store import vectors

    monkeypatch.setattr(vectors, "IN_MEMORY", False)
    monkeypatch.setenv("NBMEMORY_HOT", "0")


@pytest.fixture
def run_on_server(jp_asyncio_loop: Any) -> Callable[[Awaitable[Any]], Any]:
    """Runs an awaitable on the test Jupyter server's event loop (for tests whose modules import
    pytest-jupyter's fixtures). The loop is made this thread's current loop first: ``jp_fetch``
    makes its future before the loop runs, on the current loop, and an earlier test in the same
    process (an ``asyncio.run``, an ``anyio.run``) may have left none."""
    asyncio.set_event_loop(jp_asyncio_loop)
    return jp_asyncio_loop.run_until_complete
