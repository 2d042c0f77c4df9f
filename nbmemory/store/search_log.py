"""The search log and retrieval counters, written in batches off the search path, and the
retention of both logs.

A commit per search costs more than the search, and even a batched write made by every sixteenth
search put that search among the slowest. So a search only appends its row to a buffer; a
background writer writes the buffer in one transaction once no search has come for
:data:`LOG_IDLE_S`, once its oldest row is :data:`LOG_MAX_AGE_S` old, or once it holds
:data:`LOG_FLUSH_EVERY` rows; and :meth:`SearchLog.flush` writes it at once (before any read of
the log or the counters, and on close). A write the writer makes holds the store's lock like any
other, so a search that arrives during it waits for it; searches one after another meet it once
per :data:`LOG_MAX_AGE_S` at most.

Crash safety: a killed process loses the rows still buffered, the searches of the last
:data:`LOG_IDLE_S` (at most :data:`LOG_MAX_AGE_S`, at most :data:`LOG_FLUSH_EVERY` rows), never an
item. What is logged is unchanged.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from nbmemory.store import chunks as chunk_rows
from nbmemory.store.db import Database, utcnow

#: The most searches buffered: at this many the background writer writes them at once.
LOG_FLUSH_EVERY = 256
#: The writer writes the buffer once no search has come for this many seconds...
LOG_IDLE_S = 1.0
#: ... or once the oldest buffered search is this old.
LOG_MAX_AGE_S = 5.0
# Retention of the two write-only logs, which otherwise grow with every search and every write
# (bench/system/load_bench.py): the newest SEARCH_LOG_KEEP searches are kept (tune mines the recent ones), and a
# request key lives REQUEST_KEY_TTL (a client retries within FAILOVER_SECONDS, 60 s). Pruning
# runs once every PRUNE_EVERY log rows written.
SEARCH_LOG_KEEP = 100_000
REQUEST_KEY_TTL = timedelta(days=1)
PRUNE_EVERY = 1000

_Entry = tuple[datetime, str, str | None, int, list[int], float]


def recent_queries(db: Database, limit: int) -> list[str]:
    """The ``limit`` most recent distinct queries of the log, newest first."""
    rows = db.fetchall("SELECT query FROM search_log GROUP BY query ORDER BY max(searched_at) DESC LIMIT ?", [limit])
    return [r[0] for r in rows]


class SearchLog:
    """Buffered writes to ``search_log`` and the items' retrieval counters (see the module docstring).

    The background writer is a thread started by the first search after the buffer was empty;
    it ends once the buffer is written, so an idle memory holds no thread.
    """

    def __init__(self, db: Database, redact: Callable[[str], str]) -> None:
        self.db = db
        #: A query as it is stored: with its secrets masked (the facade passes ingest's redaction).
        self.redact = redact
        self._pending: list[_Entry] = []
        self._rows_since_prune = 0
        # Guards the buffer and the writer's timers; _flushing makes a flush whole (a flush
        # asked for while the writer writes returns once those rows are committed).
        self._cond = threading.Condition()
        self._flushing = threading.Lock()
        self._writer: threading.Thread | None = None
        self._last = self._oldest = 0.0
        self._closed = False
        #: Batches written so far (a benchmark tells from it whether a write overlapped a search).
        self.flushes = 0

    def record(self, query: str, filters: str | None, k: int, ids: list[int], ms: float) -> None:
        """Buffer one search; a query can hold a secret pasted by mistake, so it is stored redacted
        (by the writer, off the search's path: a buffered query lives only in this process)."""
        entry = (utcnow(), query, filters, k, ids, ms)
        with self._cond:
            now = time.monotonic()
            if not self._pending:
                self._oldest = now
            self._pending.append(entry)
            self._last = now
            if self._closed:
                return  # written by close's own flush
            if self._writer is None or not self._writer.is_alive():  # none yet, or lost in a fork
                self._writer = threading.Thread(
                    target=self._write_when_due, name="nbmemory-search-log", daemon=True
                )
                self._writer.start()
            elif len(self._pending) >= LOG_FLUSH_EVERY:
                self._cond.notify()

    def _write_when_due(self) -> None:
        """The background writer: wait until the buffer is due, write it, end once it is empty."""
        while True:
            with self._cond:
                if not self._pending or self._closed:
                    self._writer = None
                    return
                due = min(self._last + LOG_IDLE_S, self._oldest + LOG_MAX_AGE_S)
                wait = due - time.monotonic()
                if wait > 0 and len(self._pending) < LOG_FLUSH_EVERY:
                    self._cond.wait(wait)
                    continue
            try:
                self.flush()
            # A failing store: that batch is lost, as an inline write's was; the next search
            # starts another writer.
            except Exception:
                with self._cond:
                    self._writer = None
                return

    def close(self) -> None:
        """Write what is buffered and stop the writer (before the store is closed)."""
        with self._cond:
            self._closed = True
            writer, self._writer = self._writer, None
            self._cond.notify_all()
        if writer is not None and writer is not threading.current_thread():
            writer.join()
        self.flush()

    def note_rows(self, count: int) -> None:
        """Count rows written to a log table elsewhere (request keys) towards pruning."""
        self._rows_since_prune += count

    def flush(self) -> None:
        """Write buffered retrieval counters and search-log rows now (not with ``db.lock`` held:
        a write in progress holds this flush's lock and waits for the store's)."""
        with self._flushing:
            with self._cond:
                pending, self._pending = self._pending, []
            if not pending:
                self.prune()
                return
            self._write(pending)
            self.flushes += 1

    def _write(self, pending: list[_Entry]) -> None:
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
                [
                    [log_id, at, self.redact(query), *rest]
                    for log_id, (at, query, *rest) in zip(log_ids, pending, strict=True)
                ],
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
