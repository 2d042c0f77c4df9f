"""Fixtures for the server extension: a real Jupyter server (pytest-jupyter) with nbmemory loaded.

The server forbids unauthenticated access; its memory is a real DuckDB file in ``tmp_path``
with a fake embedder (these tests are about plumbing, not retrieval quality). A test that tunes
overrides :func:`open_memory` with the sample notes and the bundled model (``notes_copy``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# The pytest-jupyter fixtures, scoped to this folder (its autouse event-loop fixtures stay out
# of the rest of the suite).
from pytest_jupyter.jupyter_server import *  # noqa: F403
from traitlets.config import Config

import nbmemory.server
from nbmemory.embed import FakeEmbedder
from tests.conftest import copy_store
from tests.tune.conftest import notes_copy, notes_store  # noqa: F401 (a small real memory to tune)


@pytest.fixture
def memory_path(tmp_path: Path, empty_store: Path) -> Path:
    return copy_store(empty_store, tmp_path / "server-home" / "memory.duckdb")


@pytest.fixture
def open_memory(memory_path: Path) -> Callable[[], Any]:
    """How the server opens its memory: overridden where a test needs a real model."""
    from nbmemory.remote import connect

    return lambda: connect(memory_path, embedder=FakeEmbedder(dim=32))


@pytest.fixture
def nbmemory_watch() -> bool:
    """Whether the server's live indexer runs (``c.NbMemory.watch``): off where a test is not
    about it, so that files a test saves change nothing else it checks."""
    return False


@pytest.fixture
def jp_server_config(open_memory: Callable[[], Any], nbmemory_watch: bool) -> Iterator[Config]:
    opened: list[Any] = []

    def factory() -> Any:
        memory = open_memory()
        opened.append(memory)
        return memory

    nbmemory.server.set_memory_factory(factory)
    yield Config(
        {
            "ServerApp": {
                "jpserver_extensions": {"nbmemory": True, "jupyter_server_terminals": False},
                "allow_unauthenticated_access": False,
            },
            "NbMemory": {"watch": nbmemory_watch},
        }
    )
    nbmemory.server.set_memory_factory(None)
    for memory in opened:
        memory.close()


@pytest.fixture
def nbm_state(jp_serverapp: Any) -> nbmemory.server.ServerState:
    return jp_serverapp.web_app.settings["nbmemory"]
