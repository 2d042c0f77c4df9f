"""Vectors and their HNSW index.

The ``vectors`` table is the only copy of the embeddings; the HNSW index over it is derived data
that :func:`rebuild_index` can drop and recreate at any time (docs/architecture.md, note 2). HNSW applies a
``WHERE`` after its top-k (note 3), so filtered searches either scan the matching rows exactly or
over-fetch and fall back to the exact scan when too few survive.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from nbmemory.embed.base import Embedder
from nbmemory.store.db import Database

#: Searches are served from memory-resident copies (:mod:`nbmemory.search.hot`); with
#: ``NBMEMORY_HOT=0`` through SQL, with a persisted HNSW graph (the reference path).
IN_MEMORY = os.environ.get("NBMEMORY_HOT", "1") != "0"
INDEX_NAME = "vectors_hnsw"
# Below this many candidate rows an exact scan is cheaper than HNSW plus filtering.
EXACT_SCAN_MAX_ROWS = 4000
# A load of at least this many vectors, and at least BULK_FRACTION of the stored ones, drops
# the HNSW index and rebuilds it once at the end.
BULK_MIN = 2000
BULK_FRACTION = 0.3
HNSW_OPTIONS = "metric = 'cosine', M = 16, ef_construction = 128"
# Incremental inserts and deletes bloat the persisted HNSW index (bench/system/load_bench.py shows
# it): its blocks grow well past a fresh build's, faster with every write. It is rebuilt once the writes since its last build reach half the
# rows it was built over (and at least this many): each write pays for at most two rows of a
# rebuild, and the file stays within a small multiple of the data.
REBUILD_MIN_WRITES = 1000


@dataclass
class VectorPlan:
    """How one vector search ran: recorded into the search trace."""

    method: str  # "memory" (nbmemory.search.hot), "hnsw", "hnsw+filter", "exact", "hnsw->exact"
    fetched: int = 0
    matching_rows: int | None = None


def start(db: Database, embedder: Embedder) -> None:
    """Give an empty store its model: the vectors table, the model's meta rows, the index."""
    with db.transaction():
        ensure_table(db, embedder.dim)
        db.set_meta("model_fingerprint", embedder.fingerprint)
        db.set_meta("model_name", embedder.name)
        db.set_meta("model_dim", embedder.dim)
    create_index(db)


def ensure_table(db: Database, dim: int) -> None:
    db.execute(f"CREATE TABLE IF NOT EXISTS vectors (chunk_id BIGINT PRIMARY KEY, vec FLOAT[{dim}])")


def table_dim(db: Database) -> int | None:
    if not db.table_exists("vectors"):
        return None
    row = db.fetchone(
        "SELECT data_type FROM duckdb_columns() WHERE database_name = 'mem' AND "
        "table_name = 'vectors' AND column_name = 'vec'"
    )
    if row is None:
        return None
    return int(str(row[0]).split("[")[-1].rstrip("]"))


def index_exists(db: Database) -> bool:
    # Cached: only this process can change the file, and only through the functions below.
    cached = db.cache.get("hnsw")
    if cached is None:
        cached = db.index_exists(INDEX_NAME)
        db.cache["hnsw"] = cached
    return bool(cached)


def drop_index(db: Database) -> None:
    db.cache.pop("hnsw", None)
    db.execute(f"DROP INDEX IF EXISTS {INDEX_NAME}")


def persisted(db: Database) -> bool:
    """Whether this process keeps a persisted HNSW graph: only when searches go through SQL.

    With the memory-resident index serving (:mod:`nbmemory.search.hot`, the default) the graph
    would only cost: inserts pay for updating it, its rebuilds make a write wait (a minute at
    50k rows), and a crash's log replay can corrupt it (docs/architecture.md, note 2). So it is not built,
    and one found in the file is dropped instead of being rebuilt. ``NBMEMORY_HOT=0`` keeps it.
    """
    return not IN_MEMORY or db.read_only


def create_index(db: Database) -> None:
    """Build the HNSW index over the stored vectors, when this process keeps one (:func:`persisted`)."""
    db.cache.pop("hnsw", None)
    if not persisted(db):
        drop_index(db)
        return
    if not index_exists(db):
        _close_row_gaps(db)
        db.cache.pop("hnsw", None)
    db.execute(f"CREATE INDEX IF NOT EXISTS {INDEX_NAME} ON vectors USING HNSW (vec) WITH ({HNSW_OPTIONS})")
    db.cache["hnsw_writes"] = 0
    db.cache.pop("hnsw_built_rows", None)


def _close_row_gaps(db: Database) -> None:
    # duckdb-vss 1.5.5: an HNSW index built over a small table that has deleted rows (a gap in
    # its row ids) sizes its graph wrongly, and the next inserts overrun it: a segfault at
    # COMMIT. Rewritten in one transaction, the table has no gaps; the copy is cheap next to
    # the index build that follows.
    count, end = db.fetchone("SELECT count(*), coalesce(max(rowid) + 1, 0) FROM vectors") or (0, 0)
    if int(count) == int(end):
        return
    dim = table_dim(db)
    with db.transaction():
        db.execute(f"CREATE TABLE vectors_compact (chunk_id BIGINT PRIMARY KEY, vec FLOAT[{dim}])")
        db.execute("INSERT INTO vectors_compact SELECT chunk_id, vec FROM vectors ORDER BY chunk_id")
        db.execute("DROP TABLE vectors")
        db.execute("ALTER TABLE vectors_compact RENAME TO vectors")


def note_writes(db: Database, n: int) -> None:
    """Count vectors inserted, replaced or deleted since the HNSW index was built."""
    if n > 0:
        db.cache["hnsw_writes"] = int(db.cache.get("hnsw_writes", 0)) + n  # type: ignore[call-overload]


def maybe_rebuild(db: Database) -> bool:
    """Rebuild the HNSW index when incremental writes have bloated it (see REBUILD_MIN_WRITES).

    Call after the writing transaction has committed. True if it was rebuilt.
    """
    writes = int(db.cache.get("hnsw_writes", 0))  # type: ignore[call-overload]
    if writes < REBUILD_MIN_WRITES or not index_exists(db):
        return False
    built = db.cache.get("hnsw_built_rows")
    if built is None:
        # Unknown (built by another process): take the current size as what it was built over.
        built = int(db.scalar("SELECT count(*) FROM vectors"))
        db.cache["hnsw_built_rows"] = built
    if writes < int(built) // 2:  # type: ignore[call-overload]
        return False
    rebuild_index(db)
    db.cache["hnsw_built_rows"] = int(db.scalar("SELECT count(*) FROM vectors"))
    return True


def rebuild_index(db: Database) -> None:
    """Drop and recreate the HNSW index from the stored vectors (also removes dead entries)."""
    with db.lock:
        drop_index(db)
        create_index(db)


@contextmanager
def bulk_load(db: Database, active: bool) -> Iterator[None]:
    """Drop the HNSW index for a large load and rebuild it once at the end.

    Inserting into a live HNSW index costs about twice as much per vector as building it in
    one go (the graph is updated at COMMIT). Searches during the load use the exact scan; a
    process killed mid-load leaves no index, and :func:`ensure_index` (run on open) rebuilds it.
    """
    if not active or not index_exists(db):
        yield
        return
    drop_index(db)
    try:
        yield
    finally:
        create_index(db)


def ensure_index(db: Database) -> bool:
    """Create the HNSW index if vectors exist without one; True if it was built. Where this
    process keeps none (:func:`persisted`), one found in the file is dropped instead."""
    if not persisted(db):
        if index_exists(db):
            drop_index(db)
        return False
    if db.table_exists("vectors") and not index_exists(db):
        create_index(db)
        return True
    return False


def is_bulk(db: Database, incoming: int) -> bool:
    stored = int(db.scalar("SELECT count(*) FROM vectors")) if db.table_exists("vectors") else 0
    return incoming >= BULK_MIN and incoming >= BULK_FRACTION * stored


def compact_index(db: Database) -> None:
    """Remove entries of deleted rows from the HNSW graph, by rebuilding it.

    Not ``PRAGMA hnsw_compact_index``: with duckdb-vss 1.5.5, inserting into a compacted index
    corrupts the heap (the process aborts or segfaults at the next COMMIT).
    """
    if index_exists(db):
        rebuild_index(db)


def put(db: Database, chunk_ids: list[int], vectors: np.ndarray, fresh: bool = False) -> None:
    """Insert or replace vectors (inside the caller's transaction); ``fresh``: the ids are new."""
    if not chunk_ids:
        return
    import pyarrow as pa

    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    note_writes(db, len(chunk_ids))
    db.chunks_written(chunk_ids, vectors)
    dim = vectors.shape[1]
    table = pa.table(
        {
            "chunk_id": pa.array(chunk_ids, type=pa.int64()),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dim),
        }
    )
    if not fresh:
        db.execute("DELETE FROM vectors WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))", [chunk_ids])
    db.with_arrow("_nbm_new_vectors", table, "INSERT INTO vectors SELECT chunk_id, vec FROM _nbm_new_vectors")


class Rows(Mapping[int, np.ndarray]):
    """Vectors by chunk id, held as the rows of one matrix: :meth:`take` gathers several with one
    index of the matrix (a stack of one array per vector costs a few microseconds each)."""

    def __init__(self, ids: list[int], mat: np.ndarray) -> None:
        self.mat = mat
        self._at = dict(zip(ids, range(len(ids)), strict=True))

    @classmethod
    def of(cls, vecs: Mapping[int, np.ndarray]) -> Rows:
        if isinstance(vecs, Rows):
            return vecs
        ids = list(vecs)
        return cls(ids, np.stack([vecs[i] for i in ids]) if ids else np.empty((0, 0), dtype=np.float32))

    def __getitem__(self, chunk_id: int) -> np.ndarray:
        return self.mat[self._at[chunk_id]]

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._at

    def __iter__(self) -> Iterator[int]:
        return iter(self._at)

    def __len__(self) -> int:
        return len(self._at)

    def take(self, chunk_ids: Iterable[int]) -> tuple[list[int], np.ndarray]:
        """Those of ``chunk_ids`` held, in their order, and their vectors as one matrix (a copy)."""
        keys = [i for i in chunk_ids if i in self._at]
        return keys, self.mat[[self._at[i] for i in keys]]

    def joined(self, other: Mapping[int, np.ndarray]) -> Rows:
        """These rows and ``other``'s (one of them for an id both hold)."""
        more = Rows.of(other)
        if not len(self):
            return more
        keys, mat = more.take(i for i in more if i not in self._at)
        return Rows([*self._at, *keys], np.concatenate([self.mat, mat])) if keys else self


def get(db: Database, chunk_ids: list[int]) -> dict[int, np.ndarray]:
    """The stored vectors of ``chunk_ids``, read from the table through Arrow (one copy into numpy
    instead of a list per vector)."""
    if not chunk_ids:
        return {}
    with db.lock:
        table = db.execute(
            "SELECT chunk_id, vec FROM vectors WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))",
            [chunk_ids],
        ).to_arrow_table()
    if table.num_rows == 0:
        return {}
    ids = table.column("chunk_id").to_numpy()
    flat = table.column("vec").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    mat = flat.astype(np.float32, copy=False).reshape(table.num_rows, -1)
    return {int(i): mat[row] for row, i in enumerate(ids)}


def search(
    db: Database,
    query: np.ndarray,
    limit: int,
    dim: int,
    where: str | None = None,
    params: list[Any] | None = None,
) -> tuple[list[tuple[int, float]], VectorPlan]:
    """Top ``limit`` (chunk id, cosine distance) among live chunks matching ``where``, through
    SQL (searches are served from memory when :mod:`nbmemory.search.hot` can).

    ``where`` is a condition on alias ``c`` (chunks); ``None`` means every live chunk.
    """
    params = params or []
    qv = query.astype(np.float32).tolist()
    live = "c.deleted_at IS NULL" + (f" AND ({where})" if where else "")
    exact_sql = f"""
        SELECT v.chunk_id, array_cosine_distance(v.vec, ?::FLOAT[{dim}]) + 0 AS d
        FROM vectors v JOIN chunks c ON c.id = v.chunk_id
        WHERE {live} ORDER BY d, v.chunk_id LIMIT ?
    """
    if not index_exists(db):
        rows = db.fetchall(exact_sql, [qv, *params, limit])
        return [(int(a), float(b)) for a, b in rows], VectorPlan("exact", len(rows))

    total = int(db.scalar("SELECT count(*) FROM vectors"))
    matching = total
    if where:
        matching = int(db.scalar(f"SELECT count(*) FROM chunks c WHERE {live}", params))
        if matching <= max(EXACT_SCAN_MAX_ROWS, limit):
            rows = db.fetchall(exact_sql, [qv, *params, limit])
            return [(int(a), float(b)) for a, b in rows], VectorPlan("exact", len(rows), matching)
    if matching == 0:
        return [], VectorPlan("exact", 0, 0)

    # Over-fetch in proportion to how selective the filter is.
    fetch = limit if not where else min(total, int(limit * total / matching * 1.5) + 10)
    with db.lock:
        db.execute(f"SET hnsw_ef_search = {max(64, fetch)}")
        rows = db.fetchall(
            f"""
            WITH top AS (
                SELECT chunk_id, array_cosine_distance(vec, ?::FLOAT[{dim}]) AS d
                FROM vectors ORDER BY d LIMIT ?
            )
            SELECT top.chunk_id, top.d FROM top JOIN chunks c ON c.id = top.chunk_id
            WHERE {live} ORDER BY top.d, top.chunk_id LIMIT ?
            """,
            [qv, fetch, *params, limit],
        )
    method = "hnsw+filter" if where else "hnsw"
    if len(rows) < min(limit, matching):
        rows = db.fetchall(exact_sql, [qv, *params, limit])
        method = "hnsw->exact"
    return [(int(a), float(b)) for a, b in rows], VectorPlan(method, fetch, matching)


def cosine64(vecs: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Cosine similarity of each row to ``query`` in float64, each row summed the same way.

    ``einsum`` sums each row on its own, whatever rows come with it (equal vectors, equal
    scores), and makes no row-sized temporary as ``(v * q).sum(axis=1)`` does: this runs on every
    candidate's passages in each search (``bench/search/cosine_ab.py`` compares the two).
    """
    v = vecs.astype(np.float64)
    q = np.asarray(query, dtype=np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", v, v)) * math.sqrt(float(np.dot(q, q)))
    dots = np.einsum("ij,j->i", v, q)
    if norms.all():
        return dots / norms
    return np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0), 0.0)
