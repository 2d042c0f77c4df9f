"""Smaller memories cut from a notes corpus (:mod:`nbmemory.eval.subsets`), as the benchmarks cut them."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbmemory.eval.notes import NotesQuery
from nbmemory.eval.subsets import fitting, present_notes, subset

TIL = Path(__file__).resolve().parents[1] / "data" / "til"


def _notes() -> list[str]:
    return sorted(present_notes(TIL))


def test_a_subset_holds_size_notes_a_quarter_of_them_targets_and_is_the_same_for_a_seed(tmp_path):
    every = _notes()
    targets = every[::3]  # 294 of the 882 notes
    first = present_notes(subset(TIL, targets, 100, 7, tmp_path / "a"))
    again = present_notes(subset(TIL, targets, 100, 7, tmp_path / "b"))
    other = present_notes(subset(TIL, targets, 100, 8, tmp_path / "c"))
    assert len(first) == 100
    assert len(first & set(targets)) == 25
    assert first == again
    assert first != other
    some = sorted(first)[0]
    assert (tmp_path / "a" / some).read_bytes() == (TIL / some).read_bytes()


def test_the_questions_that_fit_a_subset_keep_misses_cut_targets_and_drop_the_rest():
    kept, gone = "git/a.md", "git/b.md"
    queries = [
        NotesQuery("q1", "both targets", "question", (kept, gone)),
        NotesQuery("q2", "target gone", "paraphrase", (gone,)),
        NotesQuery("q3", "no answer", "miss"),
    ]
    fit = fitting(queries, {kept, "vim/c.md"})
    assert [q.qid for q in fit] == ["q1", "q3"]
    assert fit[0].targets == (kept,)
    assert fit[1].targets == ()


def test_a_subset_larger_than_the_corpus_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match=r"a subset of 5000 notes: .* holds 882"):
        subset(TIL, _notes()[:10], 5000, 1, tmp_path)


def test_a_subset_needing_more_other_notes_than_there_are_is_refused_by_name(tmp_path):
    every = _notes()
    # 800 notes: 200 from the targets, 600 from the 588 others, which is 12 too many.
    with pytest.raises(ValueError, match="588 of them not targets"):
        subset(TIL, every[::3], 800, 1, tmp_path)
