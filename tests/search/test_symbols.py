"""Symbols (``g??``, ``$0``, ``:/``): query tokens the full-text index drops count as keyword terms
where they are written as such."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nbmemory import Memory, PipelineConfig
from nbmemory.embed.fake import FakeEmbedder
from nbmemory.search import symbols
from nbmemory.search.filters import Filters
from nbmemory.store import rows, vectors

TIL = Path(__file__).resolve().parents[1] / "data" / "til"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("g??", ["g??"]),
        ("git show :/", [":/"]),
        ("$0 console", ["$0"]),
        ("`%>%` in R and a && b", ["%>%", "&&"]),
        ('press "g??" twice, then g??', ["g??"]),
        ("nginx -t", ["-t"]),
        ("c++ templates in C#", ["c++", "c#"]),
        # quotes and sentence marks around a symbol, in any order
        ("what does `g??`? do", ["g??"]),
        ('select "$0", then `$0`.', ["$0"]),
        ("quit with :q!", [":q"]),
        # prose punctuation is not a symbol
        ("i.e., e.g. p.m., it 's **bold**", []),
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


def test_a_pasted_block_of_code_looks_up_a_bounded_number_of_symbols() -> None:
    code = " ".join(f"x{'?' * n}" for n in range(1, 40))
    # `x?` ends a sentence; `x??` onwards are symbols
    assert symbols.of_query(code) == [f"x{'?' * n}" for n in range(2, 2 + symbols.MAX_SYMBOLS)]


@pytest.mark.parametrize(
    ("symbol", "text", "written"),
    [
        (":/", "git show :/typo", True),
        (":/", "see https://example.com", False),
        (":/", "not `://` either", False),
        ("$0", "> $0.lang", True),
        ("$0", "$($0).html('x')", True),
        ("$0", "costs $05", False),  # ending in a digit, another digit continues it
        ("-t", "find . -type f", False),
        ("-t", "check it with nginx -t.", True),
        (":q", "use :quit", False),
        (":q", "force it with :q!", True),
        ("#1", "issue #123", False),
        ("-i", "run -İ", False),  # case is folded for ASCII letters only, on every path
        (":/", ":/typo", True),  # ending in punctuation, a letter may follow
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
    monkeypatch.setattr(vectors, "IN_MEMORY", served)
    ids = {name: fake_mem.remember(text, namespace="work").id for name, text in NOTES.items()}
    other = fake_mem.remember("Elsewhere: g?? rotates this line as well.", namespace="home").id
    bm25_only = PipelineConfig(retrievers=("bm25",))
    # `g??` is searched as `g` by the index, which no note holds as a word; the symbol finds them.
    found = fake_mem.search("g??", k=5, log=False, config=bm25_only)
    # From the head index of the preloaded rows when the memory-resident index serves, else by a scan.
    assert (rows.preloaded(fake_mem.db) is not None) is served
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


@pytest.mark.integration
def test_the_head_index_and_the_scan_find_the_same_chunks(tmp_path: Path) -> None:
    # 882 real notes, many with code: every symbol's holders, from the head index of the
    # preloaded rows and from the DuckDB scan, before and after writes.
    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=32)) as mem:
        mem.index(TIL)
        mem.search("warm up", k=1, log=False)
        assert rows.preloaded(mem.db) is not None
        wanted = ["$0", "g??", ":/", "->", "&&", "-t", "--", "<c-r>", "%>%", ":x", "$(", "||", "\\g", "5%"]

        def both() -> dict[str, tuple[tuple[list[int], int], tuple[list[int], int]]]:
            heads = symbols.holders(mem.db, wanted, "TRUE", [])
            return {s: (heads[s], symbols._scanned(mem.db, s, "TRUE", [])) for s in wanted}

        before = both()
        assert sum(1 for heads, _ in before.values() if heads[1]) >= 8  # most are in these notes
        for s, (heads, scanned) in before.items():
            assert heads == scanned, s
        holder = before["->"][0][0][0]
        mem.forget(holder)
        new = mem.remember("Run `nginx -t` first; then $(cat pid) -> kill.").id
        after = both()
        for s, (heads, scanned) in after.items():
            assert heads == scanned, s
        assert holder not in after["->"][0][0] and new in after["->"][0][0]
        assert new in after["-t"][0][0] and new in after["$("][0][0]
        where, params = Filters(namespace="nowhere").sql()
        assert symbols.holders(mem.db, ["->"], where, params) == {"->": ([], after["->"][0][1])}


def _bm25_share(stage_detail: str) -> float:
    match = re.search(r"bm25 (?:#\d+|-) \(([\d.]+)\)", stage_detail)
    assert match, stage_detail
    return float(match.group(1))


def test_a_symbol_is_an_identifier_for_fusion_and_its_digits_alone_do_not_count(fake_mem: Memory) -> None:
    console = fake_mem.remember("In the browser console, $0 is the node selected in the elements panel.").id
    port = fake_mem.remember("Binding to port 0 lets the system pick any free port: 0 means any.").id
    # `$0` inside `$05` is not written as such: the literal test is the symbol's, not a substring.
    price = fake_mem.remember("Set x=$05 in the script and use 0 as the default.").id
    fused = fake_mem.search("$0", k=3, log=False)
    stage = fused.trace.stage("convex")
    assert stage is not None
    # All of the query's IDF mass is on the identifier: the weights lean to BM25.
    assert "identifier '$0'" in stage.notes["why"] and stage.notes["weights"]["bm25"] > 0.2
    assert fused.ids[0] == console
    # The note holding `0` only as a word loses what `0` gave it, since another holds `$0`.
    assert _bm25_share(stage.detail[port]) == 0.0 and _bm25_share(stage.detail[price]) == 0.0
    words = fake_mem.search("$0", k=3, log=False, config=PipelineConfig(symbols=False)).trace.stage("convex")
    assert words is not None and _bm25_share(words.detail[port]) > 0.0


def test_a_symbol_no_note_holds_changes_nothing(fake_mem: Memory) -> None:
    for text in NOTES.values():
        fake_mem.remember(text)
    query = "how do I show a git commit -q"
    with_symbol = fake_mem.search(query, k=5, log=False)
    without = fake_mem.search(query, k=5, log=False, config=PipelineConfig(symbols=False))
    bm25 = with_symbol.trace.stage("bm25")
    assert bm25 is not None and bm25.notes["symbols"] == {"-q": 0} and "-q" not in bm25.notes["terms"]
    assert [(h.id, h.score) for h in with_symbol.hits] == [(h.id, h.score) for h in without.hits]
    convex, plain = with_symbol.trace.stage("convex"), without.trace.stage("convex")
    assert convex is not None and plain is not None
    assert convex.notes["evidence"] == plain.notes["evidence"] and convex.notes["mass"] == plain.notes["mass"]
