"""The one place that decides which model a memory embeds with.

Every caller that needs the model of a store (the facade, ``doctor``, tuning, evaluation) gets it
here, so the active tuned version (``nbmemory models use``) is honoured everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from nbmemory.embed.base import Embedder
from nbmemory.errors import NotFoundError
from nbmemory.store.db import Database

if TYPE_CHECKING:
    from nbmemory.embed.sentence import SentenceTransformerEmbedder
    from nbmemory.tune.versions import ModelVersion


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


def load_for_store(
    db: Database,
    model: str,
    device: str | None = None,
    version: ModelVersion | None = None,
    log: Callable[[str], None] | None = None,
) -> Embedder:
    """The model the memory in ``db`` embeds with, configured as ``model``.

    With no ``version``, the active version is used while it descends from ``model`` (opening a
    memory with another model re-embeds with that one instead). A given ``version`` is loaded
    whatever it descends from. An active version whose weights are gone falls back to ``model``
    (said through ``log``); a chosen one raises :class:`NotFoundError`.
    """
    from nbmemory.tune import versions

    chosen = version if version is not None else versions.active(db)
    if chosen is not None and chosen.path is not None:
        base = chosen.base_model or model
        if version is not None or base == model:
            if chosen.path.is_dir():
                return load_tuned(chosen.path, base, device)
            if version is not None:
                raise NotFoundError(
                    f"model version {chosen.version} has no weights at {chosen.path} "
                    "(refused versions keep only their scores): pick another with `nbmemory models`"
                )
            if log is not None:
                log(f"model version {chosen.version} is missing ({chosen.path}): using {base}")
            return load_model(model, device)
    return load_model(chosen.model if chosen is not None and version is not None else model, device)
