"""The DuckDB file: opening it safely, migrations, metadata."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, cast

import duckdb
import numpy as np

from nbmemory import private
from nbmemory.config import memory_paths
from nbmemory.errors import StoreError, StoreLockedError
from nbmemory.store.extensions import connect_with_extensions
from nbmemory.store.migrations import MIGRATIONS, SCHEMA_VERSION

# Statements that write nothing to the write-ahead log.
_READ = re.compile(r"\s*(SELECT|WITH|EXPLAIN|SET|DESCRIBE|SHOW)\b", re.IGNORECASE)

CATALOG = "mem"
#: Longest a write transaction waits for the searches in flight before it starts (seconds): a
#: search that began during a write waits for that transaction only, not for every one after it.
YIELD_S = 0.1
_LOCK_RE = re.compile(r"Conflicting lock|Could not set lock|lock on file", re.IGNORECASE)


class StoreLock:
    """The store's lock: reentrant, and it knows whether the calling thread holds it."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._owner: int | None = None
        self._depth = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not self._lock.acquire(blocking, timeout):
            return False
        self._owner = threading.get_ident()
        self._depth += 1
        return True

    def release(self) -> None:
        self._depth -= 1
        if not self._depth:
            self._owner = None
        self._lock.release()

    def held(self) -> bool:
        """Whether this thread holds it."""
        return self._owner == threading.get_ident()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def utcnow() -> datetime:
    """Naive UTC timestamp (DuckDB TIMESTAMP has no zone)."""
    return datetime.now(UTC).replace(tzinfo=None)


#: Where ``cache`` holds the memory-resident search index (:mod:`nbmemory.search.hot`).
INDEX_KEY = "hot"


class WriteFollower(Protocol):
    """What keeps a copy of the chunks in step with the writes (the search index)."""

    def chunks_written(self, chunk_ids: list[int], vectors: np.ndarray | None) -> None: ...

    def rows_changed(self, chunk_ids: list[int] | None) -> None: ...


class Database:
    """One open memory file.

    The file is ATTACHed to an in-memory connection after the extensions are loaded, so a
    write-ahead log that holds HNSW changes replays with ``vss`` present (docs/architecture.md, note 2).
    After an unclean shutdown (a write-ahead log is left) every HNSW index is dropped before
    anything uses it; ``dropped_after_crash`` names them, and the vector index is rebuilt from
    the stored vectors on first use.

    Parameters
    ----------
    path:
        The DuckDB file; its folder is created if missing. ``":memory:"`` keeps nothing.
    read_only:
        Open without write access (still takes DuckDB's file lock).
    own_folder:
        The file's folder is nbmemory's own (the memory home): made owner-only on open like the
        file. Any other folder is made 0700 only when this creates it (see :func:`nbmemory.config.memory_paths`).
    """

    def __init__(self, path: Path | str, read_only: bool = False, own_folder: bool = False) -> None:
        self.path = str(path)
        self.read_only = read_only
        self.lock = StoreLock()
        self._searches: dict[int, int] = {}  # in flight, by thread: see :meth:`searching`
        self._turn = threading.Condition()
        # Derived facts about the file (index state) that only this process can change.
        self.cache: dict[str, object] = {}
        #: Counts changes of everything a search reads (FTS snapshot rebuilt, vectors swapped):
        #: copies held in memory (:mod:`nbmemory.search.hot`) built before one are stale.
        self.rebuilds = 0
        #: Chunk rows written since the memory-resident copy of the rows was read (those are read
        #: again from the table), and a counter bumped when every row may have changed.
        self.dirty_rows: set[int] = set()
        self.row_epoch = 0
        #: Passage vectors by model fingerprint and content hash (:mod:`nbmemory.store.passages`:
        #: read once, kept up to date by its writes).
        self.passage_cache: dict[str, Any] = {}
        self.dropped_after_crash: list[str] = []
        #: What was readable by other users and made owner-only when this opened the file.
        self.narrowed: list[private.Narrowed] = []
        self.own_folder = own_folder
        wal = Path(f"{self.path}.wal").expanduser()
        self._wal = None if self.path == ":memory:" or read_only else wal
        unclean = self.path != ":memory:" and not read_only and wal.exists() and wal.stat().st_size > 0
        if self.path != ":memory:":
            file = Path(self.path).expanduser()
            private.make_dir(file.parent)
            self.narrowed = private.narrow_all(memory_paths(file, own_folder), f"memory {file}")
        try:
            self.con = connect_with_extensions()
        except duckdb.Error as exc:
            raise StoreError(f"cannot load DuckDB's fts and vss extensions to open {self.path}: {exc}") from exc
        try:
            mode = " (READ_ONLY)" if read_only else ""
            target = self.path.replace("'", "''")
            if self.path == ":memory:":
                self.con.execute(f"ATTACH ':memory:' AS {CATALOG}")
            else:
                self.con.execute(f"ATTACH '{target}' AS {CATALOG}{mode}")
            self.con.execute(f"USE {CATALOG}")
            self.con.execute("SET enable_progress_bar = false")
            if self.path != ":memory:":
                # DuckDB creates a new file with the umask's mode.
                private.narrow(Path(self.path).expanduser())
            self._private_wal()
            if unclean:
                self._drop_replayed_hnsw()
        except duckdb.Error as exc:
            self.con.close()
            if _LOCK_RE.search(str(exc)):
                raise StoreLockedError(
                    f"memory file {self.path} is in use by another process. Close the other "
                    "nbmemory session (kernel, CLI or Jupyter server) or use a different "
                    "NBMEMORY_HOME."
                ) from None
            raise StoreError(f"cannot open memory file {self.path}: {exc}") from exc
        if not read_only:
            self.migrate()

    def _drop_replayed_hnsw(self) -> None:
        # Replaying a log that deletes and later inserts rows of an HNSW-indexed table corrupts
        # the index (duckdb-vss#81, "Duplicate keys not allowed in high-level wrappers"): the
        # first search or CHECKPOINT then invalidates the database, and a checkpointed corrupt
        # index can make the file unreadable. Dropped before first use, the replayed rows are
        # kept and the index, derived data, is rebuilt from them (vectors.ensure_index).
        rows = self.con.execute(
            "SELECT schema_name, index_name FROM duckdb_indexes() WHERE database_name = ? "
            "AND sql ILIKE '%USING HNSW%'",
            [CATALOG],
        ).fetchall()
        for schema, name in rows:
            self.con.execute(f'DROP INDEX "{schema}"."{name}"')
        self.con.execute("CHECKPOINT")
        self.dropped_after_crash = [str(name) for _, name in rows]

    def chunks_written(self, chunk_ids: Iterable[int], vectors: np.ndarray | None = None) -> None:
        """Chunks written or deleted (inside the writer's transaction): cached rows of them are
        dropped, and the memory-resident search index in ``cache[INDEX_KEY]``
        (:mod:`nbmemory.search.hot`) is told, so its next search re-reads them. ``vectors``: their
        new vectors (one row each), which that search then need not read back."""
        ids = [int(i) for i in chunk_ids]
        self.rows_changed(ids)
        index = self.cache.get(INDEX_KEY)
        if index is not None:
            cast(WriteFollower, index).chunks_written(ids, vectors)

    def rows_changed(self, chunk_ids: object = None) -> None:
        """Drop cached chunk rows (:func:`nbmemory.store.rows.fetch_rows`): these ids, or all.
        The search index is told too: it holds the columns filters read."""
        cached = self.cache.get("rows")
        index = self.cache.get(INDEX_KEY)
        if chunk_ids is None:
            self.row_epoch += 1
            if isinstance(cached, dict):
                cached.clear()
            if index is not None:
                cast(WriteFollower, index).rows_changed(None)
            return
        ids = [int(i) for i in chunk_ids]  # type: ignore[attr-defined]
        if index is not None:
            cast(WriteFollower, index).rows_changed(ids)
        self.dirty_rows.update(ids)
        if isinstance(cached, dict):
            for i in ids:
                cached.pop(i, None)

    def snapshot(self) -> duckdb.DuckDBPyConnection:
        """A cursor of its own in a read transaction begun now (under :attr:`lock`, so no write
        is half done): the file as of this moment, read while other statements go on. Close it."""
        with self.lock:
            con = self.con.cursor()
            con.execute(f"USE {CATALOG}")
            con.execute("BEGIN TRANSACTION")
            con.execute("SELECT count(*) FROM chunks").fetchall()  # the transaction's snapshot starts
        return con

    # -- basics --------------------------------------------------------------------------
    def execute(self, sql: str, params: Any = None) -> duckdb.DuckDBPyConnection:
        with self.lock:
            try:
                return self.con.execute(sql, params) if params is not None else self.con.execute(sql)
            finally:
                if not _READ.match(sql):  # a read writes no log: spare searches the stat
                    self._private_wal()

    def _private_wal(self) -> None:
        # DuckDB deletes its write-ahead log at every checkpoint (an explicit one, or automatic
        # in a large commit) and creates the next with the umask's mode, but writes into one
        # that exists and keeps its mode (an empty one is ignored and removed on attach). So
        # an empty 0600 log waits for the next write, and one DuckDB made itself is narrowed.
        if self._wal is None:
            return
        try:
            fd = os.open(self._wal, os.O_WRONLY | os.O_CREAT | os.O_EXCL, private.FILE_MODE)
        except FileExistsError:
            private.narrow(self._wal)
        except OSError:
            pass  # a folder we may not write to: DuckDB will say so
        else:
            os.close(fd)

    def fetchall(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        with self.lock:
            return self.execute(sql, params).fetchall()

    def fetchone(self, sql: str, params: Any = None) -> tuple[Any, ...] | None:
        with self.lock:
            return self.execute(sql, params).fetchone()

    def scalar(self, sql: str, params: Any = None) -> Any:
        row = self.fetchone(sql, params)
        return None if row is None else row[0]

    def with_arrow(self, name: str, table: Any, sql: str, params: list[Any] | None = None) -> None:
        """Run ``sql`` with the arrow ``table`` visible under ``name`` (bulk writes without executemany)."""
        with self.lock:
            self.con.register(name, table)
            try:
                self.con.execute(sql, params or [])
            finally:
                self.con.unregister(name)
                self._private_wal()

    @contextmanager
    def searching(self) -> Iterator[None]:
        """Around one search: the next write transaction lets it finish first (see
        :meth:`transaction`). A writer that commits slice after slice would otherwise take the
        lock again before the waiting search's thread wakes, so one search could wait through
        several transactions instead of the one under way."""
        me = threading.get_ident()
        with self._turn:
            self._searches[me] = self._searches.get(me, 0) + 1
        try:
            yield
        finally:
            with self._turn:
                self._searches[me] -= 1
                if not self._searches[me]:
                    del self._searches[me]
                    self._turn.notify_all()

    def _yield_to_searches(self) -> None:
        # Not when this thread holds the lock already: a search waiting for it could not finish.
        if not self._searches or self.lock.held():
            return
        me = threading.get_ident()  # a search of this thread's own waits for nothing
        with self._turn:
            self._turn.wait_for(lambda: all(thread == me for thread in self._searches), timeout=YIELD_S)

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """BEGIN/COMMIT around the block; ROLLBACK (and re-raise) on any error. It begins once
        the searches in flight have finished, or after :data:`YIELD_S` seconds."""
        self._yield_to_searches()
        with self.lock:
            self.con.execute("BEGIN TRANSACTION")
            try:
                yield self.con
            except BaseException:
                self.con.execute("ROLLBACK")
                self.cache.clear()
                raise
            else:
                self.con.execute("COMMIT")
            finally:
                self._private_wal()

    def close(self) -> None:
        with self.lock:
            self._wal = None  # the checkpoint below removes the log: leave none behind
            try:
                if not self.read_only:
                    self.con.execute("CHECKPOINT")
            except duckdb.Error:
                pass
            self.con.close()

    # -- metadata --------------------------------------------------------------------------
    def get_meta(self, key: str, default: str | None = None) -> str | None:
        if not self.table_exists("meta"):
            return default
        row = self.fetchone("SELECT value FROM meta WHERE key = ?", [key])
        return default if row is None else row[0]

    def set_meta(self, key: str, value: str | int | float) -> None:
        self.execute(
            "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [key, str(value)],
        )

    def delete_meta(self, key: str) -> None:
        self.execute("DELETE FROM meta WHERE key = ?", [key])

    def table_exists(self, name: str, schema: str = "main") -> bool:
        return bool(
            self.scalar(
                "SELECT count(*) FROM duckdb_tables() WHERE database_name = ? AND "
                "schema_name = ? AND table_name = ?",
                [CATALOG, schema, name],
            )
        )

    def index_exists(self, name: str) -> bool:
        return bool(
            self.scalar(
                "SELECT count(*) FROM duckdb_indexes() WHERE database_name = ? AND index_name = ?",
                [CATALOG, name],
            )
        )

    # -- migrations ------------------------------------------------------------------------
    def schema_version(self) -> int:
        if not self.table_exists("migrations"):
            return 0
        return int(self.scalar("SELECT coalesce(max(version), 0) FROM migrations"))

    def migrate(self) -> list[str]:
        """Apply every migration newer than the file's version, each in its own transaction."""
        with self.lock:
            self.execute("CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
            self.execute(
                "CREATE TABLE IF NOT EXISTS migrations "
                "(version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMP)"
            )
            current = self.schema_version()
            if current > SCHEMA_VERSION:
                raise StoreError(
                    f"memory file {self.path} has schema version {current}, newer than this "
                    f"nbmemory understands ({SCHEMA_VERSION}): upgrade nbmemory"
                )
            applied = []
            for version, name, fn in MIGRATIONS:
                if version <= current:
                    continue
                with self.transaction() as con:
                    fn(con)
                    con.execute("INSERT INTO migrations VALUES (?, ?, ?)", [version, name, utcnow()])
                    con.execute(
                        "INSERT INTO meta VALUES ('schema_version', ?) ON CONFLICT (key) "
                        "DO UPDATE SET value = excluded.value",
                        [str(version)],
                    )
                applied.append(name)
            return applied

