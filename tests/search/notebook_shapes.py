"""A notebook-shaped memory for the search tests: many notebooks of many cells, where a query's
words fill the first candidates with cells of a few notebooks (grouping then reads deep).

Imports only ``nbmemory``, so it runs against an older checkout too, which is how the saved
rankings (``tests/data/notebook-rankings.json``) were made before the walk of dedup and group
changed: ``PYTHONPATH=OLD python tests/search/notebook_shapes.py OUT.json``.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
from pathlib import Path

TOPICS = [
    "tokenizer", "trainer", "dataset", "pipeline", "optimizer", "scheduler", "embedding", "attention",
    "checkpoint", "quantization", "diffusion", "sampler", "metric", "callback", "adapter", "gradient",
]
_SENTENCE = (
    "load the model then call fit with the batch size and learning rate we picked earlier so the "
    "run stays short while the loss goes down and the logs show every step"
)
FILLER = _SENTENCE.split(" ")
#: Notebooks, cells per notebook.
NOTEBOOKS, CELLS = 24, 30
#: The queries the rankings are kept for: a topic word fills the top with one notebook's cells.
QUERIES = [
    "tokenizer", "train the trainer with a scheduler", "dataset pipeline", "attention gradient",
    "checkpoint quantization", "diffusion sampler metric", "how to write a callback", "adapter embedding",
    "optimizer learning rate", "load the model then call fit",
]


def write_notebooks(folder: Path, seed: int = 7) -> Path:
    """``NOTEBOOKS`` notebooks of ``CELLS`` cells in ``folder``: each about two topics (most of its
    cells name them), with filler words, a few cells copied from notebook to notebook."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    shared = [f"import torch\nfrom transformers import AutoModel\nmodel = AutoModel.from_pretrained('m{n}')" for n in range(3)]
    for nb in range(NOTEBOOKS):
        main, other = TOPICS[nb % len(TOPICS)], TOPICS[(nb * 5 + 3) % len(TOPICS)]
        cells = [{"cell_type": "markdown", "metadata": {}, "source": f"# Notes on the {main} and the {other} {nb}"}]
        for c in range(CELLS - 1):
            words = rng.sample(FILLER, 12)
            if c % 3 != 2:
                words.insert(rng.randrange(len(words)), main)
            if c % 4 == 0:
                words.insert(rng.randrange(len(words)), other)
            if c % 10 == 5:
                cells.append({"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                              "source": shared[nb % len(shared)]})
                continue
            kind = "markdown" if c % 2 else "code"
            text = " ".join(words) + f" step {c} of notebook {nb}"
            cell = {"cell_type": kind, "metadata": {}, "source": text if kind == "markdown" else f"# {text}\nx = {c}"}
            if kind == "code":
                cell.update(execution_count=None, outputs=[])
            cells.append(cell)
        doc = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}
        (folder / f"nb{nb:02d}-{main}.ipynb").write_text(json.dumps(doc), encoding="utf-8")
    return folder


def rankings(mem, k: int = 10) -> dict[str, list[int]]:  # type: ignore[no-untyped-def]
    """Each query's ranked ids with the default search."""
    return {q: mem.search(q, k=k, log=False).ids for q in QUERIES}


def main(out: Path) -> None:
    from nbmemory import Memory
    from nbmemory.embed import FakeEmbedder

    with tempfile.TemporaryDirectory() as tmp:
        folder = write_notebooks(Path(tmp) / "notebooks")
        with Memory(Path(tmp) / "m.duckdb", embedder=FakeEmbedder(dim=32)) as mem:
            mem.index(folder)
            out.write_text(json.dumps({"k": 10, "rankings": rankings(mem)}, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
