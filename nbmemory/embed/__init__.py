"""Embedders: the protocol, the sentence-transformers backend and a fake for plumbing tests."""

from nbmemory.embed.base import Embedder, normalise
from nbmemory.embed.fake import FakeEmbedder
from nbmemory.embed.sentence import SentenceTransformerEmbedder, bundled_model_path

__all__ = [
    "Embedder",
    "FakeEmbedder",
    "SentenceTransformerEmbedder",
    "bundled_model_path",
    "normalise",
]
