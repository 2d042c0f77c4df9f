"""Fine-tune a sentence-transformers model on mined triples with MultipleNegativesRankingLoss.

Training uses the sentence-transformers trainer (the ``[train]`` extra: ``datasets`` and
``accelerate``). Each example is ``(anchor, positive, negative)``: MNRL scores the anchor
against its positive, its hard negative, and every other positive and negative in the batch.
Batches never hold the same text twice (``NO_DUPLICATES``), so an in-batch "negative" is
never a copy of the positive.

Runs are deterministic for a given seed on one device: the seed fixes the model's dropout, the
shuffling and the order of the triples (``torch.use_deterministic_algorithms`` is not forced,
so two CUDA runs may still differ in the last digits).

On CPU the defaults keep a run short: sequences are cut at 128 word pieces and the number of
optimiser steps is capped (:data:`CPU_MAX_STEPS`); ``nbmemory tune`` prints the measured time.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nbmemory import private
from nbmemory.errors import ConfigError, NbMemoryError
from nbmemory.tune.mine import Triple

#: Optimiser steps a CPU run is capped at unless ``max_steps`` says otherwise.
CPU_MAX_STEPS = 150
#: Word pieces per text on CPU (attention cost grows with the square of this).
CPU_MAX_SEQ_LENGTH = 128
GPU_MAX_SEQ_LENGTH = 256

ProgressFn = Callable[[int, int, float], None]
"""Called as ``progress(step, total_steps, loss)`` after every logged step."""


class TrainExtraMissing(NbMemoryError):
    """The ``[train]`` extra (``datasets``, ``accelerate``) is not installed."""


@dataclass
class TrainConfig:
    """How a model is fine-tuned.

    Parameters
    ----------
    epochs:
        Passes over the triples.
    batch_size:
        Triples per step (each brings ``3 * batch_size - 1`` in-batch candidates to MNRL).
    learning_rate:
        Peak AdamW learning rate (linear warm-up over ``warmup_ratio`` of the steps, then
        linear decay).
    max_steps:
        Cap on optimiser steps; ``None`` means :data:`CPU_MAX_STEPS` on CPU and no cap on CUDA.
        ``0`` or less removes the cap on CPU too.
    max_seq_length:
        Word pieces per text; ``None`` means 128 on CPU and 256 on CUDA.
    seed:
        Seeds shuffling, dropout and initialisation of the optimiser state.
    device:
        ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``None`` (CUDA when torch sees a GPU).
    hard_negatives:
        Train on ``(query, positive, hard negative)``; ``False`` drops the mined negatives and
        keeps ``(query, positive)`` with in-batch negatives only (for corpora where the mined
        negatives are often relevant too; docs/tuning.md, ``--no-hard-negatives``).
    """

    epochs: int = 1
    batch_size: int = 32
    learning_rate: float = 2e-5
    max_steps: int | None = None
    max_seq_length: int | None = None
    warmup_ratio: float = 0.1
    seed: int = 42
    device: str | None = None
    hard_negatives: bool = True

    def __post_init__(self) -> None:
        if self.epochs <= 0:
            raise ConfigError(f"epochs must be greater than 0, got {self.epochs}")
        if self.batch_size < 2:
            raise ConfigError(f"batch_size must be at least 2 (in-batch negatives), got {self.batch_size}")
        if not 0 < self.learning_rate < 1:
            raise ConfigError(f"learning_rate must be between 0 and 1, got {self.learning_rate}")
        if self.max_seq_length is not None and self.max_seq_length < 8:
            raise ConfigError(f"max_seq_length must be at least 8, got {self.max_seq_length}")
        if not 0 <= self.warmup_ratio < 1:
            raise ConfigError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")


#: The file in a trained model's folder that says how the training ran (:class:`TrainReport`).
REPORT_NAME = ".nbmemory_training.json"


@dataclass
class TrainReport:
    """What a training run did and how long it took."""

    output: Path
    base_model: str
    triples: int
    steps: int
    epochs: int
    device: str
    max_seq_length: int
    seconds: float
    losses: list[float] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def triples_per_s(self) -> float:
        return self.steps * int(self.config.get("batch_size", 0)) / max(self.seconds, 1e-9)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["output"] = str(self.output)
        out["triples_per_s"] = round(self.triples_per_s, 2)
        return out


def resolve_model_path(model: str) -> str:
    """The folder or hub name sentence-transformers should load for ``model`` (bundled names too)."""
    from nbmemory.embed.sentence import BUNDLED_NAMES, bundled_model_path

    return str(bundled_model_path()) if model in BUNDLED_NAMES else str(Path(model).expanduser())


def _require_extra() -> None:
    try:
        import accelerate  # noqa: F401
        import datasets  # noqa: F401
    except ImportError:
        raise TrainExtraMissing(
            "fine-tuning needs the train extra: pip install 'nbmemory[train]' "
            "(sentence-transformers[train]: datasets and accelerate)"
        ) from None


def planned_steps(triples: int, config: TrainConfig, device: str) -> int:
    """Optimiser steps a run of ``triples`` will take under ``config`` on ``device``."""
    per_epoch = max(1, triples // config.batch_size)
    total = per_epoch * config.epochs
    cap = config.max_steps
    if cap is None and not device.startswith("cuda"):
        cap = CPU_MAX_STEPS
    if cap is not None and cap > 0:
        total = min(total, cap)
    return total


def train_model(
    triples: Sequence[Triple],
    base_model: str,
    output: str | Path,
    config: TrainConfig | None = None,
    *,
    query_prefix: str = "",
    document_prefix: str = "",
    progress: ProgressFn | None = None,
) -> TrainReport:
    """Fine-tune ``base_model`` on ``triples`` and save the result in ``output``.

    Parameters
    ----------
    triples:
        Mined ``(query, positive, negative)`` triples (see :func:`nbmemory.tune.mine.mine_triples`).
    base_model:
        Model name (the bundled ``all-MiniLM-L6-v2``, a local folder, a cached hub name).
    output:
        Folder the tuned model is written to (created; must not hold another model).
    config:
        Training settings (default :class:`TrainConfig`).
    query_prefix, document_prefix:
        Instruction prefixes the model is used with (bge, e5...): anchors get the query
        prefix, positives and negatives the document prefix, exactly as at search time.
    progress:
        ``progress(step, total, loss)`` after each logged step.

    Returns
    -------
    TrainReport
    """
    config = config or TrainConfig()
    if len(triples) < config.batch_size:
        raise ConfigError(
            f"{len(triples)} triples are fewer than one batch of {config.batch_size}: mine more "
            "queries (a bigger memory, --max-queries) or lower --batch-size"
        )
    _require_extra()
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.sampler import BatchSamplers
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.trainer import SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer.training_args import (
        SentenceTransformerTrainingArguments,
    )
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback

    from nbmemory.embed.sentence import auto_device

    device = config.device or auto_device()
    on_cuda = device.startswith("cuda")
    seq_len = config.max_seq_length or (GPU_MAX_SEQ_LENGTH if on_cuda else CPU_MAX_SEQ_LENGTH)
    steps = planned_steps(len(triples), config, device)
    out = Path(output).expanduser()
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} is not empty: choose a new folder for the tuned model")
    # A model tuned on the memory's text is as private as the text: its folder is 0700.
    private.make_dir(out)

    random.seed(config.seed)
    torch.manual_seed(config.seed)
    # The triples' own order must not depend on how they were mined: shuffle them with the seed.
    rows = list(triples)
    random.Random(config.seed).shuffle(rows)
    rows = rows[: steps * config.batch_size] if steps * config.batch_size < len(rows) else rows
    columns = {
        "anchor": [query_prefix + t.query for t in rows],
        "positive": [document_prefix + t.positive for t in rows],
    }
    if config.hard_negatives:
        columns["negative"] = [document_prefix + t.negative for t in rows]
    data = Dataset.from_dict(columns)

    model = SentenceTransformer(resolve_model_path(base_model), device=device)
    # Training truncates at seq_len to save time; the saved model keeps the base model's length,
    # so documents are embedded as fully as before.
    search_seq_len = model.max_seq_length
    model.max_seq_length = seq_len
    loss = MultipleNegativesRankingLoss(model)
    losses: list[float] = []

    class _Progress(TrainerCallback):  # type: ignore[misc]
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))
                if progress is not None:
                    progress(int(state.global_step), steps, float(logs["loss"]))

    work = out / ".trainer"
    args = SentenceTransformerTrainingArguments(
        output_dir=str(work),
        num_train_epochs=config.epochs,
        max_steps=steps,
        per_device_train_batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        warmup_steps=max(0, int(config.warmup_ratio * steps)),
        lr_scheduler_type="linear",
        seed=config.seed,
        data_seed=config.seed,
        batch_sampler=BatchSamplers.NO_DUPLICATES,
        fp16=on_cuda,
        use_cpu=not on_cuda,
        logging_steps=max(1, min(10, steps // 10)),
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=data, loss=loss, callbacks=[_Progress()]
    )
    # The trainer prints every logged dict to stdout when tqdm is off; progress says it instead.
    trainer.remove_callback(PrinterCallback)
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    model.max_seq_length = search_seq_len
    model.save(str(out))
    _drop_run_time(out / "README.md")
    _remove_tree(work)
    report = TrainReport(
        output=out,
        base_model=base_model,
        triples=len(rows),
        steps=steps,
        epochs=config.epochs,
        device=device,
        max_seq_length=seq_len,
        seconds=seconds,
        losses=losses,
        config=asdict(config),
    )
    # A dot file: the model's fingerprint skips those (nbmemory.embed.sentence), so it depends on
    # the weights and configs alone, and two identical trainings make one model, whose vectors a
    # vector cache (NBMEMORY_VECTOR_CACHE) shares, rather than two that differ by this run's output
    # folder and seconds.
    (out / REPORT_NAME).write_text(json.dumps(report.to_dict(), indent=2), encoding="utf-8")
    return report


def _drop_run_time(card: Path) -> None:
    """The model card without its "Training Time" section (this run's seconds, which the report
    keeps): the card is hashed into the model's fingerprint, which should not change by run."""
    if card.is_file():
        text = card.read_text(encoding="utf-8")
        card.write_text(re.sub(r"(?ms)^### Training Time\n.*?(?=^#)", "", text), encoding="utf-8")


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
