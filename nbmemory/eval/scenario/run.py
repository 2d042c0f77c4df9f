"""Running the scenario: store it in a fresh memory, back-date it, ask every question."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nbmemory.embed.base import Embedder
from nbmemory.eval.scenario.generate import Scenario, generate
from nbmemory.eval.scenario.score import QueryOutcome, ScenarioResult
from nbmemory.search.config import PipelineConfig


def apply_timeline(mem: Any, scenario: Scenario, ids: Sequence[int]) -> None:
    """Back-date every item by its age and record the ``supersedes`` links."""
    from datetime import timedelta

    from nbmemory.store import chunks
    from nbmemory.store.db import utcnow

    now = utcnow()
    chunks.backdate(mem.db, ids, [now - timedelta(days=item.age_days) for item in scenario.items])
    by_topic: dict[str, list[int]] = {}
    for item, item_id in zip(scenario.items, ids, strict=True):
        by_topic.setdefault(item.topic, []).append(int(item_id))
    for item, item_id in zip(scenario.items, ids, strict=True):
        for old in by_topic.get(item.supersedes or "", []):
            mem.link(int(item_id), old, "supersedes")


def evaluate_scenario(
    configs: str | Sequence[str] | Mapping[str, PipelineConfig] | None = None,
    *,
    model: str | None = None,
    device: str | None = None,
    embedder: Embedder | None = None,
    seed: int = 7,
    variants: int = 3,
    queries_per_kind: int = 40,
    k: int = 10,
    cache: bool = True,
    torch_threads: int | None = None,
    log: Callable[[str], None] | None = None,
) -> ScenarioResult:
    """Store a generated scenario with ``Memory.remember_many`` and ask it every question.

    Parameters
    ----------
    configs:
        Names or ``{name: PipelineConfig}`` (see :func:`nbmemory.eval.harness.resolve_configs`).
    model, device, embedder:
        As for :func:`nbmemory.eval.harness.evaluate_beir`.
    seed, variants, queries_per_kind:
        Passed to :func:`generate`.
    k:
        Results per question.
    cache:
        Reuse cached vectors of the scenario's texts.
    torch_threads:
        torch intra-op threads for the run (see :func:`nbmemory.eval.harness.evaluate_beir`).

    Returns
    -------
    ScenarioResult
    """
    from nbmemory.config import set_torch_threads
    from nbmemory.eval.cache import CachedEmbedder
    from nbmemory.eval.harness import make_embedder, resolve_configs
    from nbmemory.memory import Memory

    started = time.perf_counter()
    named = resolve_configs(configs)
    set_torch_threads(torch_threads)
    scenario = generate(seed, variants, queries_per_kind)
    inner = embedder or make_embedder(model, device)
    wrapped: Embedder = CachedEmbedder(inner, f"scenario-{seed}", log=log) if cache else inner
    outcomes: dict[str, list[QueryOutcome]] = {}
    with tempfile.TemporaryDirectory(prefix="nbmemory-scenario-") as tmp:
        t0 = time.perf_counter()
        with Memory(
            Path(tmp) / "scenario.duckdb", embedder=wrapped, namespace="scenario", refine="inline"
        ) as mem:
            ids = mem.remember_many(
                [item.text for item in scenario.items],
                sources=[item.source for item in scenario.items],
                namespace="scenario",
            )
            apply_timeline(mem, scenario, ids)
            build_s = time.perf_counter() - t0
            if log:
                log(f"stored {len(scenario.items)} items in {build_s:.1f} s")
            for name, config in named.items():
                mem.search(scenario.queries[0].text, k=k, config=config, log=False)
                results = []
                for query in scenario.queries:
                    q0 = time.perf_counter()
                    found = mem.search(query.text, k=k, config=config, log=False)
                    ms = (time.perf_counter() - q0) * 1000
                    topics = [(hit.source or "").split("#")[0] for hit in found.hits]
                    vector = found.trace.stage("vector")
                    bm25 = found.trace.stage("bm25")
                    fused = found.fusion
                    evidence = fused.notes.get("evidence") if fused else None
                    results.append(
                        QueryOutcome(
                            query.id,
                            query.kind,
                            topics,
                            query.targets,
                            ms,
                            top_vector_sim=max(vector.scores.values()) if vector and vector.scores else None,
                            top_bm25_score=max(bm25.scores.values()) if bm25 and bm25.scores else None,
                            lexical_evidence=evidence,
                            flagged=found.rejected,
                        )
                    )
                outcomes[name] = results
                if log:
                    log(f"scenario {name}: done")
    return ScenarioResult(
        scenario=scenario,
        model=inner.name,
        fingerprint=inner.fingerprint,
        outcomes=outcomes,
        build_s=build_s,
        wall_s=time.perf_counter() - started,
    )
