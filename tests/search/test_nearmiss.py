"""The memory's near-miss cosine (:mod:`nbmemory.search.nearmiss`) and the no-answer rule that
reads it (:func:`nbmemory.search.reject.far_from_everything`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nbmemory import Memory
from nbmemory.embed import FakeEmbedder
from nbmemory.search import nearmiss
from nbmemory.search.reject import KEYWORD_HALF, far_from_everything

TOPICS = [
    f"{a} {b}"
    for a in ("rust", "jazz", "tomato", "glacier", "violin", "tax", "kayak", "opal")
    for b in ("basics", "history", "pitfalls", "recipes", "tools", "tricks", "myths", "sizes")
]


def remember_notes(mem: Memory, topics: list[str], text: str = "notes on {}, written down") -> None:
    """One titled note per topic, as indexing a folder of markdown notes stores them."""
    mem.remember_many(
        [text.format(t) for t in topics], sources=[f"notes/{t}.md" for t in topics], headings=list(topics)
    )


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per measurement of a near-miss cosine (``nearmiss._measure``) in the test."""
    made: list[int] = []
    real = nearmiss._measure

    def counted(*args):  # type: ignore[no-untyped-def]
        made.append(1)
        return real(*args)

    monkeypatch.setattr(nearmiss, "_measure", counted)
    return made


def test_flagged_only_below_the_near_miss_cosine_with_no_keyword_match_holding_half() -> None:
    flagged, reason, numbers = far_from_everything(0.30, 0.38, 0.2)
    assert flagged and reason.startswith("no confident match") and "0.380" in numbers
    assert not far_from_everything(0.40, 0.38, 0.2)[0]  # something is as close as notes are to each other
    assert not far_from_everything(0.30, 0.38, KEYWORD_HALF)[0]  # a keyword match holds half its words
    assert not far_from_everything(0.38, 0.38, 0.0)[0]  # at the near-miss cosine itself: not below it


def test_a_best_hit_whose_fused_score_is_below_the_near_miss_cosine_is_flagged_too() -> None:
    # A cosine just above the near-miss cosine that no keyword supports: the fused score
    # (0.8 x cosine + 0.2 x keyword share) says the best hit is no better than a near miss.
    flagged, _, numbers = far_from_everything(0.42, 0.38, 0.2, top_score=0.8 * 0.42 + 0.2 * 0.1)
    assert flagged and "best fused score 0.356" in numbers
    assert not far_from_everything(0.42, 0.38, 0.2, top_score=0.39)[0]
    assert not far_from_everything(0.42, 0.38, KEYWORD_HALF, top_score=0.30)[0]  # half its words held


def test_a_small_memory_has_no_near_miss_cosine(tmp_path: Path, calls: list[int]) -> None:
    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=64)) as mem:
        remember_notes(mem, TOPICS[: nearmiss.MIN_SOURCES - 1])
        assert nearmiss.near_miss(mem.db, mem.embedder) is None
        assert nearmiss.near_miss(mem.db, mem.embedder) is None and calls == [1]  # not counted again
        # Items remembered without a title do not count: their first line is most of their text.
        mem.remember_many([f"untitled thought about {t}" for t in TOPICS])
        assert nearmiss.near_miss(mem.db, mem.embedder) is None and calls == [1, 1]


def test_the_near_miss_cosine_is_kept_in_the_file_and_measured_again_after_growth(
    tmp_path: Path, calls: list[int]
) -> None:
    path = tmp_path / "m.duckdb"
    with Memory(path, embedder=FakeEmbedder(dim=64)) as mem:
        remember_notes(mem, TOPICS[:60])
        first = nearmiss.near_miss(mem.db, mem.embedder)
        assert first is not None and nearmiss.MIN_SOURCES <= first.sampled <= 60 and first.chunks == 60
        assert -1.0 <= first.cosine <= 1.0 and calls == [1]
    calls.clear()
    with Memory(path, embedder=FakeEmbedder(dim=64)) as mem:
        stored = json.loads(mem.db.get_meta(f"near_miss:{mem.embedder.fingerprint}") or "{}")
        assert stored["cosine"] == pytest.approx(first.cosine)
        assert nearmiss.near_miss(mem.db, mem.embedder) == first and not calls  # read, not measured
        remember_notes(mem, TOPICS[60:63])  # 5 % more: still valid
        assert nearmiss.near_miss(mem.db, mem.embedder) == first and not calls
        remember_notes(mem, TOPICS[63:])
        mem.remember_many([f"another thought on {t}" for t in TOPICS[:4]])  # now 13 % more
        again = nearmiss.near_miss(mem.db, mem.embedder)
        assert calls == [1] and again is not None and again.chunks == 68


def test_a_value_kept_by_another_method_or_quantile_is_measured_again(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=64)) as mem:
        remember_notes(mem, TOPICS[:60])
        measured = nearmiss.near_miss(mem.db, mem.embedder)
        assert measured is not None
        key = f"near_miss:{mem.embedder.fingerprint}"
        for kept in (
            {"cosine": 0.9, "sampled": 60, "chunks": 60},  # before the method was recorded
            {"cosine": 0.9, "sampled": 60, "chunks": 60, "quantile": 0.5, "method": nearmiss.METHOD},
            {"cosine": 0.9, "sampled": 60, "chunks": 60, "quantile": nearmiss.QUANTILE, "method": -1},
        ):
            mem.db.set_meta(key, json.dumps(kept))
            mem.db.cache.pop(key, None)
            assert nearmiss.near_miss(mem.db, mem.embedder) == measured, kept


def test_a_title_finds_neither_its_own_note_nor_copies_of_it(tmp_path: Path) -> None:
    # Each note is its title and nothing else: a title finding its own note, or the same note
    # stored again under another name, would reach cosine 1.0.
    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=64)) as mem:
        remember_notes(mem, TOPICS, text="{}")
        mem.remember_many(list(TOPICS), sources=[f"copies/{t}.md" for t in TOPICS], headings=list(TOPICS))
        near = nearmiss.near_miss(mem.db, mem.embedder)
        assert near is not None and near.cosine < 0.99
