"""Tune on a BEIR corpus without looking at its queries, then evaluate on its judged test queries.

``nbmemory eval tune-beir --data DIR`` runs :func:`tune_beir`:

1. The corpus alone is stored in a scratch memory (documents as items: title as the heading,
   abstract as the text, exactly as the harness stores them). ``queries.jsonl`` and the qrels
   are not read at this point.
2. Pseudo-queries from the documents (titles and/or first sentences) are mined for
   keyword-vs-vector disagreement (:mod:`nbmemory.tune.mine`); at most ``max_triples``
   triples are kept (a seeded sample).
3. The model is fine-tuned on them (:mod:`nbmemory.tune.train`).
4. The harness evaluates the untuned and the tuned model on the judged test queries
   (``default`` vs ``tuned``, ``vector`` vs ``tuned-vector``), and the adoption gate
   (:func:`nbmemory.tune.gate.decide`) says whether the tuned model would be adopted.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbmemory.embed.loader import load_tuned
from nbmemory.errors import ConfigError
from nbmemory.tune.gate import GateDecision, decide_pipelines
from nbmemory.tune.mine import MiningReport, mine_triples, pipeline_retriever, pseudo_queries
from nbmemory.tune.train import TrainConfig, TrainReport, train_model

LogFn = Callable[[str], None]
PAIRS = (("default", "tuned"), ("vector", "tuned-vector"))


def _stderr(message: str) -> None:
    print(time.strftime("%H:%M:%S"), message, file=sys.stderr, flush=True)


def _every(n: int, log: LogFn | None) -> Callable[[int, int], None] | None:
    if log is None:
        return None

    def progress(done: int, total: int) -> None:
        if done % n == 0 or done == total:
            log(f"  mined {done}/{total} queries")

    return progress


@dataclass
class TuneBeirResult:
    """Mining, training and the untuned vs tuned NDCG@10 on one BEIR dataset."""

    dataset: str
    sources: tuple[str, ...]
    mining: MiningReport
    training: TrainReport
    ndcg: dict[str, float]
    gate: GateDecision
    wall_s: float
    model_path: Path
    extra: dict[str, Any] = field(default_factory=dict)

    def rows(self) -> list[dict[str, Any]]:
        """One row per pipeline: untuned and tuned NDCG@10 and the difference."""
        out = []
        for base, tuned in PAIRS:
            if base in self.ndcg and tuned in self.ndcg:
                out.append(
                    {
                        "dataset": self.dataset,
                        "pipeline": base,
                        "untuned": round(self.ndcg[base], 4),
                        "tuned": round(self.ndcg[tuned], 4),
                        "delta": round(self.ndcg[tuned] - self.ndcg[base], 4),
                    }
                )
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "sources": list(self.sources),
            "mining": self.mining.to_dict(),
            "training": self.training.to_dict(),
            "ndcg@10": self.ndcg,
            "rows": self.rows(),
            "gate": self.gate.to_dict(),
            "wall_s": round(self.wall_s, 1),
            "model_path": str(self.model_path),
            **self.extra,
        }


def tune_beir(
    data: str | os.PathLike[str],
    *,
    sources: Sequence[str] = ("title",),
    max_triples: int = 2048,
    train: TrainConfig | None = None,
    model: str | None = None,
    device: str | None = None,
    output: str | os.PathLike[str] | None = None,
    seed: int = 42,
    limit_queries: int | None = None,
    limit_docs: int | None = None,
    negative_margin: float | None = None,
    log: LogFn | None = _stderr,
) -> TuneBeirResult:
    """Mine from a BEIR corpus, fine-tune, and compare untuned vs tuned on the test queries.

    Parameters
    ----------
    data:
        A BEIR folder.
    sources:
        Query sources to mine from the documents: ``title``, ``first_sentence``.
    max_triples:
        Triples trained on (a seeded sample of the mined ones).
    train:
        Training settings; its ``max_steps`` defaults to what ``max_triples`` needs, so the CPU
        step cap does not cut the run short.
    model, device:
        Base model (default the bundled all-MiniLM-L6-v2) and device.
    output:
        Folder for the tuned model (default: a new folder under the evaluation cache).
    limit_queries, limit_docs:
        Evaluate a slice (plumbing checks).
    negative_margin:
        See :func:`nbmemory.tune.mine.mine_triples`.
    """
    from nbmemory.eval.beir import load
    from nbmemory.eval.cache import CachedEmbedder, cache_root
    from nbmemory.eval.harness import IndexOptions, evaluate_beir, make_embedder, prepare_store
    from nbmemory.memory import Memory

    if "log" in sources:
        raise ConfigError("a BEIR corpus has no search log: use title and/or first_sentence")
    if max_triples <= 0:
        raise ConfigError(f"max_triples must be greater than 0, got {max_triples}")
    started = time.perf_counter()
    dataset = load(data, "test", limit_queries, limit_docs)
    # Mining sees the documents only: a copy of the dataset without queries or judgements.
    corpus_only = type(dataset)(dataset.name, dataset.path, dataset.corpus, {}, {}, dataset.split)
    base = make_embedder(model, device)
    cached = CachedEmbedder(base, dataset.name, log=log)
    scratch = Path(tempfile.mkdtemp(prefix="nbmemory-tune-"))
    try:
        info = prepare_store(corpus_only, cached, IndexOptions(), cache=False, workdir=scratch, log=log)
        with Memory(info.path, embedder=cached) as mem:
            queries = pseudo_queries(mem.db, sources)
            if log:
                log(f"{len(queries)} pseudo-queries from {info.items} documents ({', '.join(sources)})")
            report = mine_triples(
                mem.db,
                queries,
                pipeline_retriever(mem.db, cached),
                hold_out=0.0,
                max_queries=max_triples + max_triples // 10 + 10,
                seed=seed,
                negative_margin=negative_margin,
                progress=_every(500, log),
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if log:
        log(report.summary())
    config = train or TrainConfig(seed=seed, device=device)
    if config.max_steps is None:
        config.max_steps = 0  # no CPU cap: max_triples is the budget
    out = (
        Path(output)
        if output
        else cache_root() / "tuned" / f"{dataset.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    from nbmemory.embed.sentence import prefixes_for

    q_prefix, d_prefix = prefixes_for(base.name)
    training = train_model(
        report.triples[:max_triples],
        base.name,
        out,
        config,
        query_prefix=q_prefix,
        document_prefix=d_prefix,
        progress=(lambda s, t, loss: log(f"  step {s}/{t} loss {loss:.4f}")) if log else None,
    )
    if log:
        log(f"trained {training.steps} steps on {training.triples} triples in {training.seconds:.0f} s")
    tuned = load_tuned(out, base.name, device)
    result = evaluate_beir(
        dataset,
        ["default", "vector", "tuned", "tuned-vector"],
        embedder=base,
        tuned_embedder=tuned,
        keep_hits=False,
        log=log,
    )
    ndcg = {name: run.overall["ndcg@10"] for name, run in result.runs.items()}
    gate = decide_pipelines(
        {"default": result.runs["default"].per_query, "vector": result.runs["vector"].per_query},
        {"default": result.runs["tuned"].per_query, "vector": result.runs["tuned-vector"].per_query},
    )
    return TuneBeirResult(
        dataset=dataset.name,
        sources=tuple(sources),
        mining=report,
        training=training,
        ndcg=ndcg,
        gate=gate,
        wall_s=time.perf_counter() - started,
        model_path=out,
    )
