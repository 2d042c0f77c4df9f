"""A cross-encoder reranking stage behind a gate, blended by rank.

No cross-encoder weights ship in any package nbmemory can depend on offline, so the stage is
off until a model is configured: any sentence-transformers ``CrossEncoder`` name or local folder
(``NBMEMORY_RERANKER`` or ``PipelineConfig.reranker``). The gate (memory-spark) runs the model
only when the fused top is ambiguous, because a cross-encoder pass over 20 candidates costs
more than the whole rest of the search on a CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Protocol

import numpy as np

from nbmemory.errors import ConfigError
from nbmemory.search.rrf import rrf, rrf_parts

if TYPE_CHECKING:
    from nbmemory.search.base import Ranked, Retrieved
    from nbmemory.search.config import PipelineConfig
    from nbmemory.search.pool import Pool
    from nbmemory.search.trace import Trace


class Reranker(Protocol):
    """Scores (query, text) pairs; higher is more relevant."""

    name: str

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray: ...


class CrossEncoderReranker:
    """A sentence-transformers ``CrossEncoder`` by name or local folder.

    Parameters
    ----------
    model:
        Model name (in the local Hugging Face cache) or a folder.
    device:
        ``cpu``, ``cuda``...; default: sentence-transformers' choice.
    max_length:
        Word pieces per (query, text) pair.
    """

    def __init__(self, model: str, device: str | None = None, max_length: int = 256) -> None:
        if not model:
            raise ValueError("model must be a CrossEncoder name or folder")
        if max_length <= 0:
            raise ValueError(f"max_length must be greater than 0, got {max_length}")
        try:
            from sentence_transformers import CrossEncoder
        except ImportError as exc:  # pragma: no cover - sentence-transformers is a core dependency
            raise ConfigError("the reranker needs sentence-transformers: pip install nbmemory") from exc
        try:
            self.model = CrossEncoder(model, device=device, max_length=max_length)
        except OSError as exc:
            raise ConfigError(
                f"reranker {model!r} not found: pass a local folder or the name of a CrossEncoder "
                f"in your Hugging Face cache (nbmemory never downloads at search time)"
            ) from exc
        self.name = model

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.float32)
        out = self.model.predict([(query, t) for t in texts], show_progress_bar=False, convert_to_numpy=True)
        return np.asarray(out, dtype=np.float32).reshape(len(texts), -1)[:, -1]


def train_cross_encoder(
    pairs: Sequence[tuple[str, str, float]],
    out: str,
    base: str | None = None,
    epochs: int = 1,
    seed: int = 3,
    max_length: int = 256,
) -> str:
    """Train a CrossEncoder on (query, text, label in [0, 1]) pairs and save it to ``out``.

    ``base`` is any sentence-transformers / Hugging Face encoder folder or name (default: the
    bundled all-MiniLM-L6-v2, which gets a fresh one-logit head). On CPU, with the ``[train]``
    extra. Returns ``out``.
    """
    import tempfile

    from datasets import Dataset
    from sentence_transformers import CrossEncoder
    from sentence_transformers.cross_encoder import CrossEncoderTrainer, CrossEncoderTrainingArguments
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

    from nbmemory.embed.sentence import bundled_model_path

    if not pairs:
        raise ValueError("pairs must not be empty")
    model = CrossEncoder(base or str(bundled_model_path()), num_labels=1, max_length=max_length, device="cpu")
    data = Dataset.from_dict(
        {"query": [p[0] for p in pairs], "text": [p[1] for p in pairs], "label": [float(p[2]) for p in pairs]}
    )
    with tempfile.TemporaryDirectory() as tmp:
        args = CrossEncoderTrainingArguments(
            output_dir=tmp,
            num_train_epochs=epochs,
            per_device_train_batch_size=8,
            seed=seed,
            report_to="none",
            save_strategy="no",
            use_cpu=True,
        )
        CrossEncoderTrainer(
            model=model, args=args, train_dataset=data, loss=BinaryCrossEntropyLoss(model)
        ).train()
    model.save(out)
    return out


@lru_cache(maxsize=2)
def load_reranker(model: str, device: str | None = None) -> CrossEncoderReranker:
    """One loaded cross-encoder per (model, device), shared by every search."""
    return CrossEncoderReranker(model, device=device)


@dataclass
class GateDecision:
    """Whether the reranker runs for this query, and why."""

    run: bool
    reason: str
    spread: float


def gate(
    fused: Sequence[tuple[int, float]],
    firsts: dict[str, int | None],
    spread_above: float = 0.15,
    window: int = 5,
) -> GateDecision:
    """Run the cross-encoder only when the fused top is ambiguous.

    Clear (skip): both retrievers put the same item first, or the top fused score leads the mean
    of the next ``window - 1`` by more than ``spread_above`` (relative). Otherwise ambiguous (run).
    """
    if len(fused) < 2:
        return GateDecision(False, "fewer than 2 candidates", 1.0)
    top = fused[0][1]
    rest = [s for _, s in fused[1:window]]
    spread = (top - float(np.mean(rest))) / top if top > 0 else 0.0
    heads = {v for v in firsts.values() if v is not None}
    if len(firsts) > 1 and len(heads) == 1 and None not in firsts.values():
        return GateDecision(False, "both retrievers rank the same item first", spread)
    if spread > spread_above:
        return GateDecision(False, f"clear leader (spread {spread:.2f} > {spread_above})", spread)
    return GateDecision(True, f"ambiguous top (spread {spread:.2f} <= {spread_above})", spread)


def blend(order: Sequence[int], ce_scores: dict[int, float], k: int = 60) -> list[tuple[int, float]]:
    """Blend the fused order with the cross-encoder's by RRF, so score scales never matter.

    Only the reranked head (the ids in ``ce_scores``) is reordered; the tail keeps its order below.
    """
    head = [i for i in order if i in ce_scores]
    by_ce = sorted(head, key=lambda i: (-ce_scores[i], head.index(i)))
    blended = rrf({"fused": head, "rerank": by_ce}, k=k)
    floor = min((s for _, s in blended), default=0.0)
    tail = [i for i in order if i not in ce_scores]
    return blended + [(i, floor * (1.0 - 1e-3 * (n + 1))) for n, i in enumerate(tail)]


def blend_parts(
    order: Sequence[int], ce_scores: dict[int, float], k: int = 60
) -> dict[int, dict[str, float]]:
    """Each :func:`blend` score as its terms: ``fused rank`` ``1 / (k + rank in the fused order)``
    and ``cross-encoder`` ``1 / (k + rank by the cross-encoder)`` for the reranked head; the tail
    is one part, ``below the reranked``. They sum to the blended scores."""
    blended = dict(blend(order, ce_scores, k=k))
    head = [i for i in order if i in ce_scores]
    by_ce = sorted(head, key=lambda i: (-ce_scores[i], head.index(i)))
    parts = rrf_parts({"fused rank": head, "cross-encoder": by_ce}, head, k=k)
    for i in order:
        if i not in ce_scores:
            parts[i] = {"below the reranked": blended[i]}
    return parts


def rerank_stage(
    query: str, order: Ranked, found: dict[str, Retrieved], pool: Pool, trace: Trace, config: PipelineConfig
) -> Ranked:
    """The ``rerank`` stage: when the :func:`gate` opens (``config.rerank_gate``; ``None``: always),
    the cross-encoder ``config.reranker`` scores the first ``config.rerank_depth`` of ``order``
    and :func:`blend` reorders them; the trace notes whether it ran and why."""
    firsts = {name: (got.ids[0] if got.ranked else None) for name, got in found.items()}
    with trace.step("rerank", compare=True) as stage:
        # The gate reads how clearly the rankings agree on a leader, on the rank scale it was
        # set on (RRF), whichever fusion ordered the candidates.
        by_rank = rrf({name: got.ids for name, got in found.items()}, k=config.rrf_k)
        decision = (
            gate(by_rank, firsts, config.rerank_gate)
            if config.rerank_gate is not None
            else GateDecision(True, "gate off", 0.0)
        )
        stage.notes = {"ran": decision.run, "why": decision.reason, "model": config.reranker}
        if decision.run:
            head = [i for i, _ in order[: config.rerank_depth]]
            texts = pool.texts(head)
            model = load_reranker(str(config.reranker))
            scores = model.score(query, [texts.get(i, "") for i in head])
            ce = {i: float(sc) for i, sc in zip(head, scores, strict=True)}
            ids = [i for i, _ in order]
            order = blend(ids, ce, k=config.rrf_k)
            stage.parts = blend_parts(ids, ce, k=config.rrf_k)
            by_ce = sorted(head, key=lambda i: -ce[i])
            stage.detail = {i: f"cross-encoder #{by_ce.index(i) + 1} ({ce[i]:.3f})" for i in head}
        stage.output = [i for i, _ in order]
        stage.scores = dict(order)
    return order
