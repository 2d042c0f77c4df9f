"""A record of what each search stage did, for ``explain``.

A stage that sets or changes scores records, per item, the named *parts* its score is made of
(``Stage.parts``): they sum to the score the stage put out, so a chart or a line of text that
breaks a score down reads the same numbers the ranking used (:meth:`Trace.parts`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

#: An item a detail or a dropped item's reason refers to (``duplicate of #42``, ``most like #7``),
#: named by its place when the trace knows it; ``bm25 #3`` is a rank and stays as it is.
_ITEM_REF = re.compile(r"\b(of|by|like|as) #(\d+)")


@dataclass
class Stage:
    """One named step: its output ranking (ids best first), time taken and notes.

    ``parts`` maps an item to the named parts of the score this stage gave it (they sum to
    ``scores[item]``); a stage that leaves scores as they were records none.
    """

    name: str
    output: list[int] = field(default_factory=list)
    scores: dict[int, float] = field(default_factory=dict)
    ms: float = 0.0
    notes: dict[str, Any] = field(default_factory=dict)
    detail: dict[int, str] = field(default_factory=dict)
    compare_to: str | None = None
    dropped: dict[int, str] = field(default_factory=dict)
    parts: dict[int, dict[str, float]] = field(default_factory=dict)


@dataclass
class Trace:
    """Every stage of one search, in order, and where the items it names are (``labels``:
    item -> ``git/undo.md:3-20``, for :meth:`explain`)."""

    query: str
    stages: list[Stage] = field(default_factory=list)
    #: Passes the pipeline ran (a grouped search takes deeper candidates when the first pass
    #: found fewer than k sources); only the last pass's stages are kept.
    passes: int = 1
    #: Time spent in the passes before the last one.
    earlier_ms: float = 0.0
    #: Garbage collections that ran during the search (every pass), per generation (2: full).
    gc_collections: list[int] = field(default_factory=lambda: [0, 0, 0])
    #: Objects tracked by the garbage collector that the search left alive beyond those it freed
    #: (its net allocations), known only when no collection ran during it.
    gc_objects: int | None = None
    #: Each item's place (file and lines or cell, or "remembered") for explain.
    labels: dict[int, str] = field(default_factory=dict)
    #: What the query's own time words did (:mod:`nbmemory.search.when`): the words, the window,
    #: the items that happened then and whether the search was narrowed to them; None without.
    when: dict[str, Any] | None = None
    #: The team replica searched (:mod:`nbmemory.team`): the lake snapshot it holds, and why the
    #: lake could not be reached when it could not (its hits are then as of that snapshot).
    team: dict[str, Any] | None = None

    def add(self, stage: Stage) -> Stage:
        self.stages.append(stage)
        return stage

    @contextmanager
    def step(self, name: str, *, compare: bool = False) -> Iterator[Stage]:
        """Record the block as stage ``name``: the block fills in the stage, the step times it.

        Parameters
        ----------
        name:
            The stage's name in the trace and in ``explain``.
        compare:
            The stage reorders what the stage before it put out: ``explain`` shows what moved.

        An exception inside the block is recorded in the stage's notes (``error``) and raised.
        A stage that turns out to have nothing to show is taken back with :meth:`discard`.
        """
        stage = self.add(Stage(name, compare_to=self.stages[-1].name if compare and self.stages else None))
        started = time.perf_counter()
        try:
            yield stage
        except Exception as exc:
            stage.notes["error"] = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            stage.ms = (time.perf_counter() - started) * 1000

    def discard(self, stage: Stage) -> None:
        """Remove ``stage`` (a step that changed nothing)."""
        self.stages = [s for s in self.stages if s is not stage]

    def stage(self, name: str) -> Stage | None:
        return next((s for s in self.stages if s.name == name), None)

    def parts(self, item: int) -> dict[str, float]:
        """The named parts of ``item``'s final score, as the last stage that scored it recorded
        them; they sum to that score. Empty when no stage recorded any (a hand-made trace)."""
        for stage in reversed(self.stages):
            if item in stage.parts:
                return dict(stage.parts[item])
        return {}

    def name(self, item: int) -> str:
        """``git/undo.md:3-20 #42``: where the item is, when the trace knows, and its id."""
        where = self.labels.get(item)
        return f"{where} #{item}" if where else f"#{item}"

    def _names(self, text: str) -> str:
        return _ITEM_REF.sub(lambda m: f"{m.group(1)} {self.name(int(m.group(2)))}", text)

    @property
    def total_ms(self) -> float:
        """Every pass's stages, the earlier passes included."""
        return self.earlier_ms + sum(s.ms for s in self.stages)

    def explain(self, top: int = 10) -> str:
        """Stage by stage: what came out, in what order, what moved (``was N``) and why.

        A stage that reorders compares itself with the stage before it; items it removed are
        listed as ``dropped`` with the reason. Items are named by their place (``labels``) and id;
        a score a stage broke down is followed by its parts.
        """
        passes = f", {self.passes} passes ({self.earlier_ms:.1f} ms before the last)" if self.passes > 1 else ""
        collected = ", ".join(f"gen{g} x{n}" for g, n in enumerate(self.gc_collections) if n)
        gc_note = f", garbage collections: {collected}" if collected else ""
        lines = [f"query: {self.query!r}  ({self.total_ms:.1f} ms{passes}{gc_note})"]
        if self.when is not None:
            lines.append("[when] " + ", ".join(f"{k}={v}" for k, v in self.when.items()))
        for stage in self.stages:
            base = self.stage(stage.compare_to) if stage.compare_to else None
            previous = base.output if base is not None else None
            notes = ", ".join(f"{k}={v}" for k, v in stage.notes.items())
            lines.append(
                f"[{stage.name}] {stage.ms:.1f} ms, {len(stage.output)} out" + (f"; {notes}" if notes else "")
            )
            for rank, item in enumerate(stage.output[:top], start=1):
                move = ""
                if previous is not None:
                    if item in previous:
                        before = previous.index(item) + 1
                        if before != rank:
                            move = f"  (was {before})"
                    else:
                        move = "  (new)"
                score = stage.scores.get(item)
                shown = f" score={score:.4f}" if score is not None else ""
                if item in stage.parts:
                    shown += " = " + " + ".join(f"{n} {v:.4f}" for n, v in stage.parts[item].items() if v)
                extra = f"  [{self._names(stage.detail[item])}]" if item in stage.detail else ""
                lines.append(f"    {rank:>3}. {self.name(item)}{shown}{extra}{move}")
            for item, why in list(stage.dropped.items())[:top]:
                lines.append(f"      dropped {self.name(item)}: {self._names(why)}")
            if previous is not None and stage.output[:top] == previous[:top] and not stage.dropped:
                lines.append("      (top unchanged)")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "passes": self.passes,
            "earlier_ms": round(self.earlier_ms, 3),
            "gc_collections": list(self.gc_collections),
            "gc_objects": self.gc_objects,
            "when": self.when,
            "stages": [
                {
                    "name": s.name,
                    "ms": round(s.ms, 3),
                    "output": s.output[:100],
                    "scores": {str(k): v for k, v in list(s.scores.items())[:100]},
                    "notes": s.notes,
                    "detail": {str(k): v for k, v in list(s.detail.items())[:100]},
                    "dropped": {str(k): v for k, v in s.dropped.items()},
                    "parts": {str(k): v for k, v in list(s.parts.items())[:100]},
                }
                for s in self.stages
            ],
            "labels": {str(k): v for k, v in self.labels.items()},
        }
