"""``nbmemory tune``: mine, fine-tune, gate, and adopt only a better model.

1. Pseudo-queries from the memory (and its search log) are mined for keyword-vs-vector
   disagreement (:mod:`nbmemory.tune.mine`); a seeded 20 % of the items is held out.
2. The current model is fine-tuned on the triples (:mod:`nbmemory.tune.train`) into
   ``<memory folder>/models/<file stem>/vN/``.
3. The candidate embeds every item into the staging table (the same resumable staging a model
   switch uses), and the gate (:mod:`nbmemory.tune.gate`) compares it with the current model on
   the held-out queries.
4. Adopted: the staged vectors are swapped in (one transaction) and ``vN`` becomes active.
   Refused: the staging table and the weights are dropped, the row and its scores are kept, and
   the memory is exactly as before.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nbmemory.embed.loader import load_tuned
from nbmemory.errors import ConfigError
from nbmemory.store import reembed
from nbmemory.tune import versions
from nbmemory.tune.gate import (
    MAX_P,
    MIN_DELTA,
    MIN_QUERIES,
    GateDecision,
    decide_pipelines,
    load_vectors,
    memory_runs,
)
from nbmemory.tune.mine import MiningReport, mine_triples, pipeline_retriever, pseudo_queries
from nbmemory.tune.thresholds import carry_over
from nbmemory.tune.train import TrainConfig, TrainReport, train_model

if TYPE_CHECKING:
    from pathlib import Path

    from nbmemory.config import Settings
    from nbmemory.embed.base import Embedder
    from nbmemory.search.config import PipelineConfig
    from nbmemory.store.db import Database

#: Query sources ``nbmemory tune`` mines by default: on BEIR, titles gained where first sentences
#: lost at the same budget (docs/tuning.md).
DEFAULT_SOURCES = ("title", "log")
Progress = Callable[[str, float], None]
#: ``adopt(candidate, also=fn)``: swap the candidate's staged vectors in, running ``fn`` in the
#: swap's transaction (:meth:`nbmemory.active_model.ActiveModel.swap`).
Adopt = Callable[..., int]
"""``progress(phase, fraction)`` with phase ``mining``, ``training``, ``embedding``, ``gate``."""


@dataclass
class TuneOptions:
    """Settings of one ``nbmemory tune`` run.

    Parameters
    ----------
    sources:
        Query sources: ``title``, ``first_sentence``, ``log`` (default: titles and the search log).
    max_queries:
        Training queries searched at most (a seeded sample).
    max_triples:
        Triples trained on at most.
    hold_out, max_held_out:
        Share of items held out for the gate, and the most held-out queries scored.
    train:
        Training settings (epochs, batch size, seed, device, step cap on CPU).
    min_delta, max_p:
        The gate's minimum NDCG@10 gain and significance level.
    namespace:
        Mine only this namespace (default: all).
    """

    sources: tuple[str, ...] = DEFAULT_SOURCES
    max_queries: int | None = 3000
    max_triples: int = 2048
    hold_out: float = 0.2
    max_held_out: int = 300
    train: TrainConfig = field(default_factory=TrainConfig)
    min_delta: float = MIN_DELTA
    max_p: float = MAX_P
    namespace: str | None = None

    def __post_init__(self) -> None:
        if not 0 < self.hold_out < 1:
            raise ConfigError(f"hold_out must be between 0 and 1, got {self.hold_out}")
        if self.max_triples <= 0:
            raise ConfigError(f"max_triples must be greater than 0, got {self.max_triples}")


@dataclass
class TuneReport:
    """What ``tune`` did: the version it made, whether it was adopted, and why."""

    version: str | None
    adopted: bool
    reason: str
    mining: MiningReport
    training: TrainReport | None = None
    gate: GateDecision | None = None
    scores: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        lines = [self.mining.summary()]
        if self.training is not None:
            t = self.training
            lines.append(
                f"trained {t.steps} steps on {t.triples} triples (seq {t.max_seq_length}) on {t.device} "
                f"in {t.seconds:.0f} s"
            )
        if self.scores:
            for name in ("default", "vector"):
                if name in self.scores.get("current", {}):
                    lines.append(
                        f"held-out ndcg@10 {name}: current {self.scores['current'][name]:.4f}, "
                        f"candidate {self.scores['candidate'][name]:.4f}"
                    )
        times = ", ".join(f"{k} {v:.0f} s" for k, v in self.seconds.items())
        lines.append(f"{self.version or 'no version'}: {self.reason}" + (f" [{times}]" if times else ""))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "adopted": self.adopted,
            "reason": self.reason,
            "mining": self.mining.to_dict(),
            "training": None if self.training is None else self.training.to_dict(),
            "gate": None if self.gate is None else self.gate.to_dict(),
            "scores": self.scores,
            "seconds": {k: round(v, 1) for k, v in self.seconds.items()},
        }


def _means(per_query: dict[str, dict[str, float]], metric: str = "ndcg@10") -> float:
    return sum(v[metric] for v in per_query.values()) / max(len(per_query), 1)


def tune_memory(
    db: Database,
    current: Embedder,
    settings: Settings,
    config: PipelineConfig,
    adopt: Adopt,
    options: TuneOptions | None = None,
    progress: Progress | None = None,
) -> TuneReport:
    """Tune the model of the memory in ``db`` on its own content (module docstring).

    ``current`` is the model its vectors come from; ``adopt`` swaps the staged vectors of an
    adopted candidate in and switches the memory to it. See :meth:`nbmemory.Memory.tune`.
    """
    from nbmemory.embed.sentence import SentenceTransformerEmbedder

    opts = options or TuneOptions()
    say = progress or (lambda phase, fraction: None)
    seconds: dict[str, float] = {}
    if not isinstance(current, SentenceTransformerEmbedder):
        raise ConfigError(
            f"tuning needs a sentence-transformers model; this memory embeds with {current.name!r}"
        )
    versions.with_base(db)

    t0 = time.perf_counter()
    say("mining", 0.0)
    queries = pseudo_queries(db, opts.sources, namespace=opts.namespace)
    mining = mine_triples(
        db,
        queries,
        pipeline_retriever(db, current),
        hold_out=opts.hold_out,
        max_held_out=opts.max_held_out,
        max_queries=opts.max_queries,
        seed=opts.train.seed,
        progress=lambda done, total: say("mining", done / max(total, 1)),
    )
    seconds["mine"] = time.perf_counter() - t0
    triples = mining.triples[: opts.max_triples]
    if len(triples) < opts.train.batch_size or len(mining.held_out) < MIN_QUERIES:
        raise ConfigError(
            f"this memory is too small to tune: {len(queries)} pseudo-queries gave {len(triples)} "
            f"triples and {len(mining.held_out)} held-out queries (need {opts.train.batch_size} and "
            f"{MIN_QUERIES}); index notes with headings, remember more, or add --query-source first_sentence"
        )

    version = versions.next_version(db)
    out = versions.models_dir(settings.db_path) / version
    if out.exists():
        shutil.rmtree(out)  # left by a run that was killed before it recorded the version
    t0 = time.perf_counter()
    say("training", 0.0)
    training = train_model(
        triples,
        current.name,
        out,
        opts.train,
        query_prefix=current.query_prefix,
        document_prefix=current.document_prefix,
        progress=lambda step, total, loss: say("training", step / max(total, 1)),
    )
    seconds["train"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    say("embedding", 0.0)
    candidate = load_tuned(
        out, current.name, settings.device, prefixes=(current.query_prefix, current.document_prefix)
    )
    reembed.stage(db, candidate, progress=lambda done, total: say("embedding", done / max(total, 1)))
    seconds["embed"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    say("gate", 0.0)
    live, staged = load_vectors(db, "vectors"), load_vectors(db, "vectors_new")
    _, runs = memory_runs(
        db,
        mining.held_out,
        {"current": (current, live), "candidate": (candidate, staged)},
        rrf_k=config.rrf_k,
        weights=config.weights,
    )
    decision = decide_pipelines(
        runs["current"], runs["candidate"], min_delta=opts.min_delta, max_p=opts.max_p
    )
    scores = {
        name: {pipe: round(_means(per_query), 4) for pipe, per_query in by_pipe.items()}
        for name, by_pipe in runs.items()
    }
    seconds["gate"] = time.perf_counter() - t0

    record = {
        "held_out_ndcg@10": scores,
        "gate": decision.to_dict(),
        "mining": mining.to_dict(),
        "training": training.to_dict(),
    }
    if decision.adopt:
        t0 = time.perf_counter()
        # Before the swap: a search right after it already reads the candidate's tiers.
        carry_over(current, candidate, [q.text for q in mining.held_out], live[1], staged[1])
        adopt_version(db, adopt, candidate, version, out, settings.model, record, decision.reason)
        seconds["swap"] = time.perf_counter() - t0
    else:
        reembed.drop_staging(db)
        versions.discard_weights(out)
        with db.transaction():
            versions.record(
                db,
                version,
                str(out),
                status="refused",
                base_model=settings.model,
                fingerprint=candidate.fingerprint,
                scores=record,
                note=decision.reason,
            )
    say("done", 1.0)
    return TuneReport(version, decision.adopt, decision.reason, mining, training, decision, scores, seconds)


def adopt_version(
    db: Database,
    adopt: Adopt,
    candidate: Embedder,
    version: str,
    out: Path,
    base_model: str,
    scores: dict[str, Any],
    note: str,
) -> None:
    """Swap the staged vectors of ``candidate`` in and record it as the active ``version``, in
    one transaction: a kill leaves the memory on the old model and version or on the new ones."""

    def record() -> None:
        versions.record(
            db,
            version,
            str(out),
            status="adopted",
            base_model=base_model,
            fingerprint=candidate.fingerprint,
            scores=scores,
            note=note,
        )
        versions.set_active(db, version)

    adopt(candidate, also=record)
