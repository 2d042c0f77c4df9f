"""Idempotent writes: the answer given to a request key, so a retried write is stored once.

A client whose owner died after committing retries with the same key and gets the first answer.
Keys expire after :data:`nbmemory.store.search_log.REQUEST_KEY_TTL` (pruned with the search log).
"""

from __future__ import annotations

from nbmemory.store.db import Database, utcnow


def answered(db: Database, key: str) -> str | None:
    """The result recorded for ``key``, or None for a key not seen yet."""
    row = db.fetchone("SELECT result FROM request_keys WHERE key = ?", [key])
    return None if row is None else str(row[0])


def record(db: Database, key: str | None, result: str) -> int:
    """Record ``result`` for ``key`` (inside the caller's transaction); returns rows written."""
    if key is None:
        return 0
    db.execute("INSERT INTO request_keys VALUES (?, ?, ?) ON CONFLICT DO NOTHING", [key, result, utcnow()])
    return 1
