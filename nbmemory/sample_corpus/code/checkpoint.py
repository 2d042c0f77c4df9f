"""Checkpointed, swap-in-at-the-end loading for the overnight orders loader.

See notes/ops/overnight-loader-restarts.md for the why. In short:

* rows go into a per-day scratch partition, never straight into the live table;
* progress (last archive offset written) is stored in ``loader_checkpoint`` in
  the same transaction as the rows it describes;
* at the end the scratch partition replaces the live one in a single transaction;
* a rerun for the same day resumes from the checkpoint and ends in the same state.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date, timedelta

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Chunk:
    """A slice of archive records ending at ``end_offset`` (inclusive)."""

    rows: list[tuple]
    end_offset: int


class DayLoader:
    """Load one business day into ``warehouse.fact_orders`` via a scratch partition.

    Args:
        conn: psycopg connection (autocommit off).
        day: the business date to load.
        schema: where scratch partitions live.
    """

    COLUMNS = ("order_key", "order_id", "line_no", "store_id", "created_at", "business_date", "amount", "discount")

    def __init__(self, conn: psycopg.Connection, day: date, schema: str = "staging") -> None:
        self.conn = conn
        self.day = day
        self.schema = schema
        self.scratch = sql.Identifier(schema, f"fact_orders_{day:%Y%m%d}")
        self.live = sql.Identifier("warehouse", f"fact_orders_{day:%Y%m%d}")

    # -- checkpoint -----------------------------------------------------------------

    def last_offset(self) -> int | None:
        row = self.conn.execute(
            "SELECT last_offset FROM loader_checkpoint WHERE run_day = %s", (self.day,)
        ).fetchone()
        return None if row is None else row[0]

    def _save_offset(self, offset: int) -> None:
        self.conn.execute(
            """INSERT INTO loader_checkpoint (run_day, last_offset) VALUES (%s, %s)
               ON CONFLICT (run_day) DO UPDATE SET last_offset = EXCLUDED.last_offset, updated_at = now()""",
            (self.day, offset),
        )

    # -- scratch partition ----------------------------------------------------------

    def ensure_scratch(self) -> bool:
        """Create the scratch table if missing. Returns True if it was created (fresh start)."""
        exists = self.conn.execute("SELECT to_regclass(%s) IS NOT NULL",
                                   (f"{self.schema}.fact_orders_{self.day:%Y%m%d}",)).fetchone()[0]
        if exists:
            return False
        nxt = self.day + timedelta(days=1)
        self.conn.execute(sql.SQL(
            "CREATE TABLE {} (LIKE warehouse.fact_orders INCLUDING ALL, "
            "CHECK (business_date >= {} AND business_date < {}))"
        ).format(self.scratch, sql.Literal(self.day), sql.Literal(nxt)))
        self.conn.execute("DELETE FROM loader_checkpoint WHERE run_day = %s", (self.day,))
        self.conn.commit()
        return True

    def write(self, chunks: Iterable[Chunk]) -> int:
        """Write chunks; each chunk and its checkpoint commit together."""
        total = 0
        copy_sql = sql.SQL("COPY {} ({}) FROM STDIN").format(
            self.scratch, sql.SQL(", ").join(map(sql.Identifier, self.COLUMNS)))
        for chunk in chunks:
            with self.conn.cursor() as cur, cur.copy(copy_sql) as cp:
                for row in chunk.rows:
                    cp.write_row(row)
            self._save_offset(chunk.end_offset)
            self.conn.commit()
            total += len(chunk.rows)
        return total

    def swap_in(self) -> None:
        """Replace the live day partition with the scratch one in one transaction."""
        nxt = self.day + timedelta(days=1)
        archived = sql.Identifier("archive", f"fact_orders_{self.day:%Y%m%d}")
        with self.conn.transaction():
            self.conn.execute(sql.SQL("ALTER TABLE warehouse.fact_orders DETACH PARTITION {}").format(self.live))
            self.conn.execute(sql.SQL("ALTER TABLE {} SET SCHEMA archive").format(self.live))
            self.conn.execute(sql.SQL(
                "ALTER TABLE warehouse.fact_orders ATTACH PARTITION {} FOR VALUES FROM ({}) TO ({})"
            ).format(self.scratch, sql.Literal(self.day), sql.Literal(nxt)))
            self.conn.execute(sql.SQL("ALTER TABLE {} SET SCHEMA warehouse").format(self.scratch))
        log.info("swapped in %s; previous version kept as %s", self.live, archived)


def chunked(records: Iterable[tuple[int, tuple]], size: int = 50_000) -> Iterator[Chunk]:
    """Group ``(offset, row)`` pairs into :class:`Chunk` objects."""
    buf: list[tuple] = []
    last = -1
    for offset, row in records:
        buf.append(row)
        last = offset
        if len(buf) >= size:
            yield Chunk(buf, last)
            buf = []
    if buf:
        yield Chunk(buf, last)


def load_day(conn: psycopg.Connection, day: date, read_archive) -> int:
    """Entry point used by the systemd unit. ``read_archive(day, from_offset)`` yields (offset, row)."""
    loader = DayLoader(conn, day)
    fresh = loader.ensure_scratch()
    start = None if fresh else loader.last_offset()
    log.info("loading %s from %s", day, "start" if start is None else f"offset {start + 1}")
    n = loader.write(chunked(read_archive(day, None if start is None else start + 1)))
    loader.swap_in()
    return n
