"""What a searching magic's line searches for: a ``--`` inside a pasted command is part of it, and
a line with no word to search for is a UsageError (a real IPython shell, the fake embedder)."""

from __future__ import annotations

from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from nbmemory import Memory
from tests.test_magics import ip, shell  # noqa: F401 (the shell with nbmemory loaded)


@pytest.fixture
def searched(
    ip: InteractiveShell,  # noqa: F811
    fake_mem: Memory,
    monkeypatch: pytest.MonkeyPatch,
) -> list[tuple[str, int]]:
    """(query, k) of every search the magics run."""
    fake_mem.remember("git checkout stash@{1} -- README.md grabs one file from a stash")
    seen: list[tuple[str, int]] = []
    search = fake_mem.search

    def spy(text: str, *args: Any, **kwargs: Any) -> Any:
        seen.append((text, kwargs["k"]))
        return search(text, *args, **kwargs)

    monkeypatch.setattr(fake_mem, "search", spy)
    return seen


@pytest.mark.parametrize(
    ("cell", "query", "k"),
    [
        # A pasted command keeps its `--` (#47: it was dropped, and the query lost its meaning).
        ("%memsearch stash@{1} -- README.md", "stash@{1} -- README.md", 10),
        ("%memsearch git checkout stash@{1} -- README.md -k 2", "git checkout stash@{1} -- README.md", 2),
        ("%memcontext git checkout -- README.md", "git checkout -- README.md", 10),
        # A `--` before the query still ends the options.
        ("%memsearch -- stash@{1} -- README.md", "stash@{1} -- README.md", 10),
        ("%memsearch -k 3 -- -k is text here", "-k is text here", 3),
    ],
)
def test_only_a_leading_double_dash_ends_the_options(
    ip: InteractiveShell,  # noqa: F811
    searched: list[tuple[str, int]],
    cell: str,
    query: str,
    k: int,
) -> None:
    with capture_output():
        result = ip.run_cell(cell)
    assert result.error_in_exec is None, result.error_in_exec
    assert searched == [(query, k)]


@pytest.mark.parametrize("line", ["?!...", "-- ...", "'?!'", "___ --- ***"])
@pytest.mark.parametrize("magic", ["memsearch", "memcontext"])
def test_a_query_without_a_word_is_a_usage_error(
    ip: InteractiveShell,  # noqa: F811
    searched: list[tuple[str, int]],
    magic: str,
    line: str,
) -> None:
    with (
        pytest.raises(UsageError, match=r"has no words to search for: give a letter or a digit"),
        capture_output(),
    ):
        ip.run_line_magic(magic, line)
    assert searched == []
