"""A static embedding model distilled from a sentence-transformers model (the Model2Vec method).

Every token of the model's vocabulary is embedded once, alone, by the model itself; a text's
vector is then the mean of its tokens' vectors: no forward pass per text, so a folder is indexed
at the speed of its tokenizer and its store. The vectors are those of Minish Lab's Model2Vec
distillation: the mean of the model's output over ``[CLS] token [SEP]``, rotated onto their
principal components, and each token weighted down by how common it is (SIF weights from the
token's rank, the vocabulary being in frequency order).

``NBMEMORY_MODEL=static`` (or ``static:NAME`` for another sentence-transformers model) chooses it.
The distilled table is made at first use, offline, in about a minute on two cores, and kept under
the cache folder by the content of the source model's folder, so a later open reads it without
loading the model. Its own fingerprint differs from the source model's, so a memory switched to it
(or back) is re-embedded like any change of model.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nbmemory.embed.base import ProgressFn, normalise
from nbmemory.errors import ModelNotFoundError

PREFIX = "static"
#: Recorded in the table's folder and fingerprint: a change to how tables are made makes new ones.
METHOD_VERSION = "model2vec-1"
#: SIF weight coefficient of Model2Vec's distillation (its default).
SIF_COEFFICIENT = 1e-4
#: Tokens read per text (Model2Vec's default): a longer text is its first 512 tokens.
MAX_TOKENS = 512
#: Vocabulary entries embedded per forward pass while distilling.
DISTILL_BATCH = 1024


def is_static(model: str) -> bool:
    """Whether a model setting names a static model (``static`` or ``static:NAME``)."""
    return model == PREFIX or model.startswith(PREFIX + ":")


def source_of(model: str) -> str:
    """The sentence-transformers model a static setting distils (the bundled one by default)."""
    return model.split(":", 1)[1] if ":" in model else "all-MiniLM-L6-v2"


def distill(st_model: Any, log: Callable[[str], None] | None = None) -> tuple[np.ndarray, Any]:
    """Token vectors of a loaded ``SentenceTransformer`` and its fast tokenizer.

    Returns the table (one unit-free row per vocabulary id) and the ``tokenizers.Tokenizer``.
    """
    import torch

    transformer = st_model[0].auto_model
    hf_tokenizer = st_model.tokenizer
    vocab = len(hf_tokenizer)
    bos, eos = hf_tokenizer.cls_token_id, hf_tokenizer.sep_token_id
    if bos is None or eos is None:
        raise ModelNotFoundError("a static model needs a tokenizer with [CLS] and [SEP] tokens (BERT-style)")
    device = next(transformer.parameters()).device
    rows = []
    with torch.inference_mode():
        for start in range(0, vocab, DISTILL_BATCH):
            ids = torch.arange(start, min(start + DISTILL_BATCH, vocab), device=device)
            batch = torch.stack([torch.full_like(ids, bos), ids, torch.full_like(ids, eos)], dim=1)
            out = transformer(input_ids=batch, attention_mask=torch.ones_like(batch)).last_hidden_state
            rows.append(out.mean(dim=1).float().cpu().numpy())
            if log is not None and start // DISTILL_BATCH % 10 == 0:
                log(f"distilling a static model: {start:,} of {vocab:,} tokens")
    table = np.concatenate(rows).astype(np.float64)
    # Principal components (all of them): centred and rotated, so no direction common to every
    # token dominates the mean of a text's tokens.
    table -= table.mean(axis=0)
    _, _, components = np.linalg.svd(table, full_matrices=False)
    table = table @ components.T
    rank_prob = 1.0 / np.arange(2, vocab + 2)
    rank_prob /= rank_prob.sum()
    table *= (SIF_COEFFICIENT / (SIF_COEFFICIENT + rank_prob))[:, None]
    return table.astype(np.float32), hf_tokenizer.backend_tokenizer


def _source_key(name: str) -> str:
    """What names a source model's table: the content of its weights' folder (the bundled model,
    a local folder), else its name. Read without loading the model, so a cached table opens at once."""
    from nbmemory.embed.sentence import BUNDLED_NAMES, bundled_model_path, fingerprint_dir

    local = bundled_model_path() if name in BUNDLED_NAMES else Path(name).expanduser()
    if local.is_dir():
        return fingerprint_dir(local)
    return hashlib.sha256(name.encode()).hexdigest()[:16]


class StaticEmbedder:
    """Embeds with a static table distilled from a sentence-transformers model.

    Parameters
    ----------
    model:
        ``"static"`` (distilled from the bundled all-MiniLM-L6-v2) or ``"static:NAME"``, NAME any
        sentence-transformers model name or folder that loads offline.
    folder:
        Where distilled tables are kept (default: the cache folder, ``static-models``).
    log:
        Told when a table is being distilled (it takes about a minute).
    """

    def __init__(
        self, model: str = PREFIX, folder: Path | None = None, log: Callable[[str], None] | None = None
    ) -> None:
        from nbmemory.embed.sentence import SentenceTransformerEmbedder

        if not is_static(model):
            raise ModelNotFoundError(
                f"{model!r} is not a static model setting: use 'static' or 'static:NAME'"
            )
        self._name = model
        if folder is None:
            from nbmemory.config import cache_folder

            folder = cache_folder("static-models")
        where = folder / f"{_source_key(source_of(model))}-{METHOD_VERSION}"
        table_file, tokenizer_file = where / "table.npy", where / "tokenizer.json"
        if not (table_file.exists() and tokenizer_file.exists()):
            if log is not None:
                log(f"distilling a static model from {source_of(model)} (once, offline)")
            source = SentenceTransformerEmbedder(source_of(model), device="cpu")
            table, tokenizer = distill(source.model, log)
            del source
            where.mkdir(parents=True, exist_ok=True)
            np.save(where / "table.tmp.npy", table)
            tokenizer.save(str(where / "tokenizer.tmp.json"))
            (where / "table.tmp.npy").replace(table_file)
            (where / "tokenizer.tmp.json").replace(tokenizer_file)
            (where / "about.json").write_text(
                json.dumps({"source": source_of(model), "method": METHOD_VERSION}), encoding="utf-8"
            )
        from tokenizers import Tokenizer

        self._table = np.load(table_file)
        self._tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._dim = int(self._table.shape[1])
        digest = hashlib.sha256()
        digest.update(f"{METHOD_VERSION}|{where.name}|".encode())
        digest.update(self._table[:64].tobytes())
        self._fingerprint = digest.hexdigest()[:20]

    @property
    def name(self) -> str:
        return self._name

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def device(self) -> str:
        return "cpu"

    def embed_documents(self, texts: Sequence[str], progress: ProgressFn | None = None) -> np.ndarray:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        if not texts:
            return out
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        for row, encoding in enumerate(encodings):
            if encoding.ids:
                out[row] = self._table[encoding.ids].mean(axis=0)
        if progress is not None:
            progress(len(texts))
        return normalise(out)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Many queries at once (for mining and evaluation)."""
        return self.embed_documents(texts)
