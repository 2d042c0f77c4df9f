"""Loading a model: by name or folder, or a tuned model's weights.

Which model a memory embeds with (its active tuned version, ``nbmemory models use``) is decided
by :func:`nbmemory.active_model.load_for_store`, the one place every caller goes through.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from nbmemory.embed.base import Embedder

if TYPE_CHECKING:
    from nbmemory.embed.sentence import SentenceTransformerEmbedder


def load_model(model: str, device: str | None = None) -> Embedder:
    """A sentence-transformers model by name or folder (the bundled one for all-MiniLM-L6-v2), or
    a static model distilled from one (``static``, ``static:NAME``: :mod:`nbmemory.embed.static`)."""
    from nbmemory.embed import static

    if static.is_static(model):
        return static.StaticEmbedder(model)
    from nbmemory.embed.sentence import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder(model, device=device)


def load_tuned(
    folder: str | Path,
    base_model: str,
    device: str | None = None,
    prefixes: tuple[str, str] | None = None,
) -> SentenceTransformerEmbedder:
    """A tuned model's weights, with the query/document ``prefixes`` of the model it was tuned
    from (by default the known ones for ``base_model``)."""
    from nbmemory.embed.sentence import SentenceTransformerEmbedder, prefixes_for

    query_prefix, document_prefix = prefixes or prefixes_for(base_model)
    return SentenceTransformerEmbedder(
        str(folder), device=device, query_prefix=query_prefix, document_prefix=document_prefix
    )
