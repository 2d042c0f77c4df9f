"""Late pooling with window-local attention in the top layers (measured, not used).

Late pooling (``SentenceTransformerEmbedder.embed_with_spans``) gives each window the mean of its
tokens in the chunk's own forward pass; every such token has read the whole chunk, and the window's
vector leans towards the chunk's. Here the model's top ``top`` layers run with an attention mask
that lets a token of the chunk's body read only the tokens that share a window with it (and the
heading, [CLS] and [SEP]; those read everything or the heading, see :func:`window_mask`), so that
a pooled window reads about what it would read in a pass of its own. The lower layers run as usual.

On a sample of 300 note chunks the mask brings the pooled windows closer to their own-pass vectors
(mean cosine .947 against .914, chunks that fit in 256 word pieces); what it does to ranking is what
``python -m bench.quality.passage_methods --methods late-masked-6,...`` measures.

One text per forward pass (no padding): a measurement of ranking, not of speed. Models with a
document prefix are not handled.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from nbmemory.embed.base import EmbedderProxy, normalise
from nbmemory.embed.sentence import SentenceTransformerEmbedder

_BLOCKED = torch.finfo(torch.float32).min


def window_mask(off: np.ndarray, special: np.ndarray, keep: int, spans: list[tuple[int, int]]) -> np.ndarray:
    """(tokens, tokens) bool, row may attend column: a body token reads the tokens that share a
    window with it; every token reads [CLS], [SEP] and the heading (the first ``keep`` characters);
    heading tokens read only those; [CLS] and [SEP] read everything. ``off``: each token's
    (start, end) in the chunk's text."""
    heading = ~special & (off[:, 1] <= keep)
    body = ~special & ~heading
    starts = np.asarray([a for a, _ in spans])
    ends = np.asarray([b for _, b in spans])
    inside = (off[:, 0, None] >= starts[None, :]) & (off[:, 0, None] < ends[None, :]) & body[:, None]
    shared = inside.astype(np.int32)
    allow = (shared @ shared.T) > 0
    context = special | heading
    allow |= context[None, :]
    allow[heading] = context
    allow[special] = True
    np.fill_diagonal(allow, True)
    return allow


class MaskedLate(EmbedderProxy):
    """The bundled embedder, its passages late-pooled with the top ``top`` layers window-masked."""

    def __init__(self, inner: SentenceTransformerEmbedder, top: int) -> None:
        super().__init__(inner)
        if inner.document_prefix:
            raise ValueError("a model with a document prefix is not handled here")
        self.top = top
        self._geom: tuple[str, int, list[tuple[int, int]]] = ("", 0, [])

    def embed_with_spans(
        self, texts: Any, spans: Any, keep: Any = None, progress: Any = None, context: bool = False
    ) -> tuple[np.ndarray, list[list[np.ndarray | None]]]:
        keep = list(keep) if keep is not None else [0] * len(texts)
        docs, pooled = [], []
        inner = self.inner
        for text, wanted, head in zip(texts, spans, keep, strict=True):
            self._geom = (text, head, list(wanted))
            # embed_with_spans' own passes (the first, then the rest of a long chunk), through
            # the masked forward below.
            inner._encode_tokens = self._encode_tokens  # type: ignore[method-assign]
            try:
                vec, got = inner.embed_with_spans([text], [wanted], [head], context=context)
            finally:
                del inner._encode_tokens
            docs.append(vec[0])
            pooled.append(got[0])
            if progress is not None:
                progress(1)
        return np.stack(docs), pooled

    @torch.inference_mode()
    def _encode_tokens(
        self, texts: list[str], progress: Any
    ) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray, int | None]]]:
        """What ``SentenceTransformerEmbedder._encode_tokens`` returns, from the masked forward
        (its text vectors are the masked pass's: the passages' fill does not read them)."""
        model = self.inner._model
        bert = model[0].auto_model
        layers = bert.encoder.layer
        original, keep, spans = self._geom
        docs, read = [], []
        for text in texts:
            lead = len(text) - len(text.lstrip())
            enc = model.tokenizer(
                text.strip(),
                truncation=True,
                max_length=model.max_seq_length,
                return_offsets_mapping=True,
                return_tensors="pt",
            )
            off = enc.pop("offset_mapping")[0].numpy().astype(np.int64) + lead
            special = off[:, 1] <= off[:, 0]
            # A further pass reads the heading, then the original from some point on.
            at = off.copy()
            at[off[:, 0] >= keep] += len(original) - len(text)
            allow = torch.from_numpy(window_mask(at, special, keep, spans))
            local = torch.where(allow, 0.0, _BLOCKED)[None, None]
            full = torch.zeros_like(local)
            hidden = bert.embeddings(input_ids=enc["input_ids"], token_type_ids=enc.get("token_type_ids"))
            for n, layer in enumerate(layers):
                hidden = layer(hidden, attention_mask=local if n >= len(layers) - self.top else full)
                hidden = hidden[0] if isinstance(hidden, tuple) else hidden
            emb = hidden[0].float().numpy()
            docs.append(emb.mean(axis=0))
            real = ~special
            cut = len(off) >= model.max_seq_length and bool(real.any())
            read.append((emb[real], off[real], int(off[real][-1, 1]) if cut else None))
        return normalise(np.stack(docs)), read

    def embed_documents(self, texts: Any, progress: Any = None) -> Any:
        return self.inner.embed_documents(texts, progress=progress)

    def embed_query(self, text: str) -> Any:
        return self.inner.embed_query(text)
