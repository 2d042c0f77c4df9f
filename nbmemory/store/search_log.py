"""The search log and retrieval counters, written in batches, and the retention of both logs.

A commit per search costs more than the search, so counters and log rows are buffered and
written in one transaction every :data:`LOG_FLUSH_EVERY` searches, before any read of them, and on
close. A killed process loses at most that many log rows, never an item.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from nbmemory.ingest.redact import redact
from nbmemory.store import chunks as chunk_rows
from nbmemory.store.db import Database, utcnow

#: Searches whose counter updates and log rows are written together.
LOG_FLUSH_EVERY = 16
# Retention of the two write-only logs, which otherwise grow with every search and every write
# (bench/system/load_bench.py): the newest SEARCH_LOG_KEEP searches are kept (tune mines the recent ones), and a
# request key lives REQUEST_KEY_TTL (a client retries within FAILOVER_SECONDS, 60 s). Pruning
# runs once every PRUNE_EVERY log rows written.
SEARCH_LOG_KEEP = 100_000
REQUEST_KEY_TTL = timedelta(days=1)
PRUNE_EVERY = 1000

_Entry = tuple[datetime, str, str | None, int, list[int], float]


class SearchLog:
    """Buffered writes to ``search_log`` and the items' retrieval counters."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._pending: list[_Entry] = []
        self._rows_since_prune = 0

    def record(self, query: str, filters: str | None, k: int, ids: list[int], ms: float) -> None:
        """Buffer one search; a query can hold a secret pasted by mistake, so it is stored redacted."""
        self._pending.append((utcnow(), redact(query).text, filters, k, ids, ms))
        if len(self._pending) >= LOG_FLUSH_EVERY:
            self.flush()

    def note_rows(self, count: int) -> None:
        """Count rows written to a log table elsewhere (request keys) towards pruning."""
        self._rows_since_prune += count

    def flush(self) -> None:
        """Write buffered retrieval counters and search-log rows."""
        pending, self._pending = self._pending, []
        if not pending:
            self.prune()
            return
        counts: dict[int, tuple[int, datetime]] = {}
        for at, _, _, _, ids, _ in pending:
            for i in ids:
                counts[i] = (counts.get(i, (0, at))[0] + 1, at)
        log_ids = chunk_rows.allocate(self.db, "search_ids", len(pending))
        with self.db.transaction():
            if counts:
                import pyarrow as pa

                table = pa.table(
                    {
                        "id": pa.array(list(counts), pa.int64()),
                        "n": pa.array([c for c, _ in counts.values()], pa.int64()),
                        "at": pa.array([a for _, a in counts.values()], pa.timestamp("us")),
                    }
                )
                self.db.with_arrow(
                    "_nbm_counts",
                    table,
                    "UPDATE chunks SET retrieval_count = retrieval_count + t.n, last_retrieved_at = t.at "
                    "FROM _nbm_counts t WHERE chunks.id = t.id",
                )
                # Rows held for searches keep their old counters: the recency stage, the only
                # reader, reads them afresh (nbmemory.search.pool.Pool.meta).
            self.db.con.executemany(
                "INSERT INTO search_log VALUES (?, ?, ?, ?, ?, ?, ?)",
                [[log_id, *entry] for log_id, entry in zip(log_ids, pending, strict=True)],
            )
        self._rows_since_prune += len(pending)
        self.prune()

    def prune(self, force: bool = False) -> None:
        """Apply the retention of search_log and request_keys (see :data:`SEARCH_LOG_KEEP`)."""
        if self._rows_since_prune < PRUNE_EVERY and not force:
            return
        self._rows_since_prune = 0
        with self.db.transaction():
            self.db.execute(
                "DELETE FROM search_log WHERE id <= (SELECT max(id) FROM search_log) - ?", [SEARCH_LOG_KEEP]
            )
            self.db.execute("DELETE FROM request_keys WHERE created_at < ?", [utcnow() - REQUEST_KEY_TTL])
