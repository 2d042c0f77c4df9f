"""Symbols (``g??``, ``$0``, ``:/``): query tokens the full-text index drops count as keyword terms
where they are written as such."""

from __future__ import annotations

import pytest

from nbmemory import Memory, PipelineConfig
from nbmemory.search import symbols
from nbmemory.store import hot


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("g??", ["g??"]),
        ("git show :/", [":/"]),
        ("$0 console", ["$0"]),
        ("`%>%` in R and a && b", ["%>%", "&&"]),
        ('press "g??" twice, then g??', ["g??"]),
        ("nginx -t", ["-t"]),
        # prose punctuation is not a symbol
        ("what is in this file?", []),
        ("Vitamin D: new recommendations", []),
        ("Active H. pylori urease (SLE).", []),
        ("the ureABIEFGH gene (II) cluster", []),
        ("e.g. INC-2307 and init.defaultBranch", []),
        ("a - b & c — d", []),
    ],
)
def test_symbols_of_a_query(query: str, expected: list[str]) -> None:
    assert symbols.of_query(query) == expected


@pytest.mark.parametrize(
    ("symbol", "text", "written"),
    [
        (":/", "git show :/typo", True),
        (":/", "see https://example.com", False),
        (":/", "not `://` either", False),
        ("$0", "> $0.lang", True),
        ("$0", "$($0).html('x')", True),
        ("$0", "costs $05", True),  # continued by a digit, not by punctuation
        ("g??", "hit `g??` on the line", True),
        ("g??", "G?? works too", True),
        ("&&", "a&&b", False),
    ],
)
def test_where_a_symbol_is_written_as_such(symbol: str, text: str, written: bool) -> None:
    assert bool(symbols.pattern(symbol).search(text)) is written


NOTES = {
    "rot13": "Vim: hit g?? on a line and every letter of it is rotated by 13 places.",
    "console": "In the browser console, $0 is the node selected in the elements panel.",
    "links": "Links: https://example.com/a and https://example.com/b for the git docs.",
    "message": "Find a commit by its message with git show :/typo and git will search for it.",
    "filler": "Git show prints a commit; git log lists many commits.",
}


@pytest.mark.parametrize("served", [True, False], ids=["memory", "sql"])
def test_a_note_holding_the_symbol_ranks_first_and_filters_and_deletions_hold(
    fake_mem: Memory, served: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hot, "ENABLED", served)
    ids = {name: fake_mem.remember(text, namespace="work").id for name, text in NOTES.items()}
    other = fake_mem.remember("Elsewhere: g?? rotates this line as well.", namespace="home").id
    bm25_only = PipelineConfig(retrievers=("bm25",))
    # `g??` is searched as `g` by the index, which no note holds as a word; the symbol finds them.
    found = fake_mem.search("g??", k=5, log=False, config=bm25_only)
    assert set(found.ids) == {ids["rot13"], other}
    stage = found.trace.stage("bm25")
    assert stage is not None and stage.notes["symbols"] == {"g??": 2}
    assert fake_mem.search("g??", k=5, log=False, config=bm25_only, namespace="work").ids == [ids["rot13"]]
    without = fake_mem.search(
        "g??", k=5, log=False, config=PipelineConfig(retrievers=("bm25",), symbols=False)
    )
    assert without.ids == []
    # `:/` in a URL is not `:/` as written; the note that writes it gains the symbol's IDF.
    assert fake_mem.search(":/", k=5, log=False, config=bm25_only).ids == [ids["message"]]
    with_symbol = fake_mem.search("git show :/", k=5, log=False, config=bm25_only)
    words = fake_mem.search(
        "git show :/", k=5, log=False, config=PipelineConfig(retrievers=("bm25",), symbols=False)
    )
    assert with_symbol.ids[0] == ids["message"]
    bm25 = {h.id: h.retriever_scores["bm25"] for h in words.hits}
    gain = {h.id: h.retriever_scores["bm25"] - bm25[h.id] for h in with_symbol.hits}
    assert gain[ids["message"]] > 0 and all(
        g == pytest.approx(0) for i, g in gain.items() if i != ids["message"]
    )
    # A forgotten note no longer holds the symbol, nor counts in its document frequency.
    fake_mem.forget(other)
    again = fake_mem.search("g??", k=5, log=False, config=bm25_only)
    assert again.ids == [ids["rot13"]]
    stage = again.trace.stage("bm25")
    assert stage is not None and stage.notes["symbols"] == {"g??": 1}
