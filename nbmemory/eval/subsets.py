"""Smaller memories cut from a notes corpus, and the judged questions that still fit them.

Used by the benchmarks ``bench/quality/noanswer_signals.py`` (the no-answer signals per memory
size) and ``bench/quality/notes_compare.py --subset`` (the side-by-side table on a memory the size
of one's own).
"""

from __future__ import annotations

import random
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from nbmemory.eval.notes import NotesQuery


def subset(root: Path, targets: list[str], size: int, seed: int, into: Path) -> Path:
    """``size`` notes of ``root`` copied to ``into``: a quarter-size sample of ``targets``, then others."""
    rng = random.Random(seed)
    every = sorted(present_notes(root))
    wanted = set(targets)
    others = [f for f in every if f not in wanted]
    quarter = min(len(targets), size // 4)
    if size <= 0 or size - quarter > len(others):
        raise ValueError(
            f"a subset of {size} notes: {root} holds {len(every)}, {len(others)} of them not targets "
            f"(a quarter of the subset is drawn from the {len(targets)} targets, the rest from the others)"
        )
    keep = set(rng.sample(targets, k=quarter))
    chosen = keep | set(rng.sample(others, k=size - len(keep)))
    for name in chosen:
        (into / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / name, into / name)
    return into


def cut_folder(name: str) -> Path:
    """The temporary folder benchmarks cut smaller memories into: the same path each run, so the
    evaluation store cache reuses a cut's indexed store instead of keeping one per run."""
    return Path(tempfile.gettempdir()) / name


def present_notes(corpus: Path) -> set[str]:
    """The ``.md`` files of ``corpus``, as paths relative to it."""
    return {p.relative_to(corpus).as_posix() for p in corpus.rglob("*.md")}


def fitting(queries: list[NotesQuery], present: set[str]) -> list[NotesQuery]:
    """The questions a memory holding ``present`` can be judged on: those without an answer, and
    the answerable ones with a target left (their targets cut to those left)."""
    out = []
    for q in queries:
        if not q.answerable:
            out.append(q)
            continue
        left = tuple(t for t in q.targets if t in present)
        if left:
            out.append(replace(q, targets=left))
    return out
