"""Indexing cost: re-indexing, passages, secret redaction."""
