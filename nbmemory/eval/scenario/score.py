"""Scoring a configuration's answers: Hit@1/3/5, MRR, coverage, Miss-Empty, with Wilson intervals."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nbmemory.eval.margins import wilson
from nbmemory.eval.scenario.generate import Scenario
from nbmemory.eval.scenario.world import KINDS

if TYPE_CHECKING:
    import polars as pl

# -- scoring -----------------------------------------------------------------------------------


@dataclass
class QueryOutcome:
    """What one configuration returned for one question."""

    query_id: str
    kind: str
    topics: list[str]
    targets: tuple[str, ...]
    latency_ms: float
    top_vector_sim: float | None = None
    top_bm25_score: float | None = None
    lexical_evidence: float | None = None
    flagged: bool = False

    @property
    def first_rank(self) -> int | None:
        """Rank (1-based) of the first result of any target topic."""
        for rank, topic in enumerate(self.topics, start=1):
            if topic in self.targets:
                return rank
        return None

    def covered(self, depth: int = 5) -> int:
        """How many target topics appear in the top ``depth``."""
        return len(set(self.targets) & set(self.topics[:depth]))


def score(outcomes: Sequence[QueryOutcome]) -> list[dict[str, Any]]:
    """Per kind (and ``all`` over answerable kinds): Hit@1/3/5, MRR, coverage, Miss-Empty + intervals."""
    rows = []
    groups: dict[str, list[QueryOutcome]] = {kind: [] for kind in KINDS}
    for outcome in outcomes:
        groups.setdefault(outcome.kind, []).append(outcome)
    groups["answerable"] = [o for o in outcomes if o.kind != "miss"]
    for kind, group in groups.items():
        n = len(group)
        if n == 0:
            continue
        row: dict[str, Any] = {"kind": kind, "n": n}
        if kind != "miss":
            for depth in (1, 3, 5):
                hits = sum(1 for o in group if (r := o.first_rank) is not None and r <= depth)
                row[f"hit@{depth}"] = hits / n
                row[f"hit@{depth}_ci"] = wilson(hits, n)
            mrr = sum(1.0 / r for o in group if (r := o.first_rank) is not None and r <= 10) / n
            row["mrr"] = mrr
            row["mrr_ci"] = wilson(mrr * n, n)
            # Answerable questions flagged "no confident match": each one is a false flag.
            row["flagged"] = sum(1 for o in group if o.flagged) / n
        if kind == "multi-topic":
            slots = sum(len(o.targets) for o in group)
            covered = sum(o.covered(5) for o in group)
            row["coverage@5"] = covered / slots
            row["coverage@5_ci"] = wilson(covered, slots)
        if kind == "miss":
            empty = sum(1 for o in group if o.flagged or not o.topics)
            row["miss_empty"] = empty / n
            row["miss_empty_ci"] = wilson(empty, n)
        rows.append(row)
    return rows


@dataclass
class ScenarioResult:
    """Outcomes of every configuration on one generated scenario."""

    scenario: Scenario
    model: str
    fingerprint: str
    outcomes: dict[str, list[QueryOutcome]]
    build_s: float = 0.0
    wall_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def scores(self) -> dict[str, list[dict[str, Any]]]:
        """``{config: score rows}``."""
        return {name: score(outcomes) for name, outcomes in self.outcomes.items()}

    def table(self) -> pl.DataFrame:
        """One row per (config, kind), each metric as ``value`` plus ``[low, high]`` columns."""
        import polars as pl

        rows = []
        for config, score_rows in self.scores().items():
            for row in score_rows:
                out: dict[str, Any] = {"config": config, "kind": row["kind"], "n": row["n"]}
                for metric in ("hit@1", "hit@3", "hit@5", "mrr", "coverage@5", "miss_empty"):
                    if metric in row:
                        low, high = row[f"{metric}_ci"]
                        out[metric] = f"{row[metric]:.3f} [{low:.2f}, {high:.2f}]"
                    else:
                        out[metric] = ""
                flagged = row.get("flagged")
                out["flagged"] = "" if flagged is None else f"{round(flagged * row['n'])}/{row['n']}"
                rows.append(out)
        return pl.DataFrame(rows)

    def outcomes_frame(self) -> pl.DataFrame:
        """One row per (config, query): kind, first relevant rank, empty, top scores, latency."""
        import polars as pl

        rows = [
            {
                "config": config,
                "query_id": o.query_id,
                "kind": o.kind,
                "first_rank": o.first_rank,
                "empty": o.flagged or not o.topics,
                "covered@5": o.covered(5),
                "targets": len(o.targets),
                "top_vector_sim": o.top_vector_sim,
                "top_bm25_score": o.top_bm25_score,
                "lexical_evidence": o.lexical_evidence,
                "latency_ms": o.latency_ms,
            }
            for config, outcomes in self.outcomes.items()
            for o in outcomes
        ]
        return pl.DataFrame(
            rows,
            schema_overrides={
                "first_rank": pl.Int64,
                "top_vector_sim": pl.Float64,
                "top_bm25_score": pl.Float64,
                "lexical_evidence": pl.Float64,
            },
        )

    def describe(self) -> str:
        c = self.scenario.counts()
        return (
            f"scenario seed {self.scenario.seed}: {c['items']} items ({c['topics']} topics x variants), "
            f"queries {c['queries']}; model {self.model}; store built in {self.build_s:.1f} s"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.scenario.seed,
            "model": self.model,
            "fingerprint": self.fingerprint,
            "counts": self.scenario.counts(),
            "scores": self.scores(),
            "build_s": round(self.build_s, 2),
            "wall_s": round(self.wall_s, 2),
        }
