"""Superseded items rank below what superseded them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nbmemory.store import search_reads
from nbmemory.store.db import Database

if TYPE_CHECKING:
    from nbmemory.search.base import Ranked
    from nbmemory.search.trace import Trace


def superseded_by(db: Database, ids: list[int]) -> dict[int, int]:
    """``{old id: newest live id that supersedes it}`` for the ``ids`` that have one.

    A ``supersedes`` link goes from the newer item to the older one (``link(new, old,
    "supersedes")``); a forgotten newer item supersedes nothing.
    """
    if not ids or not _any_links(db):
        return {}
    return {int(old): int(new) for old, new in search_reads.superseding(db, ids)}


def demote(order: list[tuple[int, float]], newer: dict[int, int]) -> list[tuple[int, float]]:
    """Move each superseded item to right below its superseder, or to the end when that is absent.

    Scores are rewritten so they stay in descending order.
    """
    present = {i for i, _ in order}
    scores = dict(order)
    below: dict[int, list[int]] = {}
    for old, _ in order:
        if old in newer and newer[old] in present:
            below.setdefault(newer[old], []).append(old)
    out: list[tuple[int, float]] = []
    emitted: set[int] = set()

    def emit(i: int, score: float) -> None:
        if i in emitted:
            return
        emitted.add(i)
        out.append((i, score))
        for old in below.get(i, []):
            emit(old, score)

    for i, s in order:
        if i not in newer:
            emit(i, s)
    # Superseded by something not among the results (or a cycle): at the end, in their order.
    for i, _ in order:
        emit(i, min(scores.values()))
    # Equal scores below a superseder: nudge each down so the order is strict.
    fixed: list[tuple[int, float]] = []
    for i, s in out:
        if fixed and s >= fixed[-1][1]:
            s = fixed[-1][1] - 1e-9
        fixed.append((i, s))
    return fixed


def supersede_stage(db: Database, order: Ranked, trace: Trace) -> Ranked:
    """The ``supersede`` stage: :func:`demote` by the links :func:`superseded_by` finds among
    ``order``; each demoted score's change is a part of it (``superseded``). No stage when
    nothing in ``order`` is superseded."""
    with trace.step("supersede", compare=True) as stage:
        newer = superseded_by(db, [i for i, _ in order])
        if not newer:
            trace.discard(stage)
            return order
        moved = demote(order, newer)
        for old, new in newer.items():
            stage.detail[old] = f"superseded by #{new}"
        stage.output = [i for i, _ in moved]
        stage.scores = dict(moved)
        was = dict(order)
        for i, score in moved:
            # A superseded item takes a score just below what superseded it: the change is a part.
            parts = trace.parts(i)
            if score != was[i]:
                parts["superseded"] = score - was[i]
            stage.parts[i] = parts
        stage.notes = {"superseded": len(newer)}
    return moved


def _any_links(db: Database) -> bool:
    # Cached per open file until a link is added (nbmemory.store.item_rows.add_link): most memories
    # have none, and the question costs a statement per search.
    cached = db.cache.get("supersedes_links")
    if not isinstance(cached, bool):
        cached = search_reads.any_supersedes_links(db)
        db.cache["supersedes_links"] = cached
    return cached
