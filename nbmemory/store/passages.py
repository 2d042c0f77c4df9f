"""Passage vectors: one per window of a prose chunk (:mod:`nbmemory.ingest.windows`), per model.

Rows are ``(content_hash, fingerprint, n, vec)``: derived from a chunk's heading and text (the
content hash covers both) and the model, so chunks of the same content share them, a write never
changes them, and vectors of two models never mix (a lookup names the model). A chunk with fewer
than two windows has none: its own vector is its only passage.

Writes fill them for what they wrote (after the chunk's own transaction: a crash in between leaves
a chunk scored by its own vector until ``doctor --repair`` fills it); a re-embed fills them for the
new model before the swap, which drops those of other models. Search reads them for its candidates
only (:func:`best`), from a copy in memory read once per open file and kept up to date by
:func:`fill`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow.compute as pc

from nbmemory.embed.base import Embedder
from nbmemory.ingest.windows import KINDS, windows
from nbmemory.store import hot
from nbmemory.store.chunks import embedding_text
from nbmemory.store.db import Database

#: (content hash, heading, text, kind) of a chunk.
Content = tuple[str, str, str, str]
#: Above this many passages of one model (about 20,000 chunks of prose), the first search after
#: opening does not wait for their read into memory (0.2 s per 50,000 on 2 cores).
SYNC_LOAD_ROWS = 100_000
#: Chunks whose passages are embedded and committed together (a repair of a large memory keeps
#: what it did when killed, and holds a batch's vectors in memory, not all of them).
BATCH = 512


def texts_of(heading: str, text: str, kind: str) -> list[str]:
    """What the embedder sees for each passage of a chunk; empty when it has fewer than two."""
    if kind not in KINDS:
        return []
    found = windows(text)
    return [embedding_text(heading, w) for w in found] if len(found) > 1 else []


def _stored(db: Database, fingerprint: str, hashes: Sequence[str]) -> set[str]:
    rows = db.fetchall(
        "SELECT DISTINCT content_hash FROM passages WHERE fingerprint = ? "
        "AND content_hash IN (SELECT unnest(?::VARCHAR[]))",
        [fingerprint, list(hashes)],
    )
    return {r[0] for r in rows}


def fill(
    db: Database,
    embedder: Embedder,
    contents: Iterable[Content],
    progress: Callable[[int], None] | None = None,
) -> int:
    """Embed and store the passages of ``contents`` that ``embedder`` has none for; returns how many."""
    todo: dict[str, list[str]] = {}
    for digest, heading, text, kind in contents:
        if digest not in todo:
            texts = texts_of(heading, text, kind)
            if texts:
                todo[digest] = texts
    if todo:
        for digest in _stored(db, embedder.fingerprint, list(todo)):
            del todo[digest]
    items = list(todo.items())
    done = 0
    for first in range(0, len(items), BATCH):
        done += _store(db, embedder, dict(items[first : first + BATCH]), progress)
    return done


def _store(
    db: Database, embedder: Embedder, todo: dict[str, list[str]], progress: Callable[[int], None] | None
) -> int:
    """Embed one batch of contents' passages and commit them (a killed run keeps the batches done)."""
    import pyarrow as pa

    flat = [t for texts in todo.values() for t in texts]
    vecs = np.asarray(embedder.embed_documents(flat, progress=progress), dtype=np.float32)
    owners = [digest for digest, texts in todo.items() for _ in texts]
    ns = [n for texts in todo.values() for n in range(len(texts))]
    table = pa.table(
        {
            "content_hash": pa.array(owners, type=pa.string()),
            "fingerprint": pa.array([embedder.fingerprint] * len(flat), type=pa.string()),
            "n": pa.array(ns, type=pa.int32()),
            "vec": pa.array(list(vecs), type=pa.list_(pa.float32())),
        }
    )
    with db.transaction():
        # Another writer may have filled some meanwhile: their rows are the same, keep one set.
        db.execute(
            "DELETE FROM passages WHERE fingerprint = ? AND content_hash IN (SELECT unnest(?::VARCHAR[]))",
            [embedder.fingerprint, list(todo)],
        )
        db.with_arrow("_nbm_new_passages", table, "INSERT INTO passages SELECT * FROM _nbm_new_passages")
    with db.lock:  # the copy in memory, or the pending writes of its read under way
        held = db.passage_cache.get(embedder.fingerprint)
        if isinstance(held, _Loading):
            held = held.pending
        if held is not None:
            start = 0
            for digest, texts in todo.items():
                held[digest] = vecs[start : start + len(texts)]
                start += len(texts)
    return len(flat)


def missing(db: Database, fingerprint: str) -> list[Content]:
    """Live chunks of prose with two or more windows and no passages for this model."""
    kinds = sorted(KINDS)
    rows = db.fetchall(
        "SELECT DISTINCT c.content_hash, c.heading, c.text, c.kind FROM chunks c "
        "WHERE c.deleted_at IS NULL AND c.kind IN (SELECT unnest(?::VARCHAR[])) AND NOT EXISTS "
        "(SELECT 1 FROM passages p WHERE p.fingerprint = ? AND p.content_hash = c.content_hash)",
        [kinds, fingerprint],
    )
    return [(r[0], r[1] or "", r[2], r[3]) for r in rows if texts_of(r[1] or "", r[2], r[3])]


def fill_missing(db: Database, embedder: Embedder, progress: Callable[[int], None] | None = None) -> int:
    """Fill the passages every live chunk of prose lacks for ``embedder``; returns how many."""
    return fill(db, embedder, missing(db, embedder.fingerprint), progress)


def prune(db: Database) -> None:
    """Drop the passages of content no chunk holds any more (a file edited or removed); the copy
    in memory may keep them: a search only looks up its candidates' content."""
    db.execute("DELETE FROM passages WHERE content_hash NOT IN (SELECT content_hash FROM chunks)")


def keep_only(db: Database, fingerprints: Sequence[str]) -> None:
    """Drop the passages of every other model, and those of content no chunk holds any more."""
    db.execute(
        "DELETE FROM passages WHERE fingerprint NOT IN (SELECT unnest(?::VARCHAR[])) "
        "OR content_hash NOT IN (SELECT content_hash FROM chunks)",
        [list(fingerprints)],
    )
    db.passage_cache.clear()


class _Loading:
    """A read of a model's passages into memory, under way in a background thread: what
    :func:`fill` writes meanwhile waits here and joins the copy when the read ends."""

    def __init__(self) -> None:
        self.pending: dict[str, np.ndarray] = {}


def _grouped(table: Any) -> dict[str, np.ndarray]:
    """Rows ``(content_hash, n, vec)`` as one float32 matrix, each content a view of its rows in
    window order. A scan returns rows as :func:`fill` inserted them (DuckDB keeps insertion
    order), each content's together: then the matrix is the read's own buffer, not a copy.
    Otherwise they are ordered here: ORDER BY in SQL doubles the read, and a list column read as
    numpy objects costs 4-5x the vectors' size (bench/search/passages_scale.py)."""
    rows = table.num_rows
    if not rows:
        return {}
    hashes = np.asarray(table.column("content_hash").to_pylist(), dtype=object)
    n = table.column("n").to_numpy()
    matrix = np.asarray(pc.list_flatten(table.column("vec")).to_numpy(), dtype=np.float32).reshape(rows, -1)
    change = hashes[1:] != hashes[:-1]
    bounds = [0, *(np.flatnonzero(change) + 1).tolist(), rows]
    owners = hashes[bounds[:-1]]
    if len(set(owners)) != len(owners) or bool(np.any((n[1:] <= n[:-1]) & ~change)):
        keys, codes = np.unique(hashes, return_inverse=True)
        order = np.lexsort((n, codes))
        matrix, codes = matrix[order], codes[order]
        bounds = [0, *(np.flatnonzero(np.diff(codes)) + 1).tolist(), rows]
        owners = keys[codes[bounds[:-1]]]
    return {str(h): matrix[a:b] for h, a, b in zip(owners, bounds[:-1], bounds[1:], strict=True)}


def _read(
    db: Database, fingerprint: str, hashes: Sequence[str] | None = None, con: Any = None
) -> dict[str, np.ndarray]:
    """This model's passages from the table: all of them, or those of ``hashes``; through ``con``
    (a snapshot cursor) when given, else the store's connection under its lock."""
    sql = "SELECT content_hash, n, vec FROM passages WHERE fingerprint = ?"
    params: list[Any] = [fingerprint]
    if hashes is not None:
        sql += " AND content_hash IN (SELECT unnest(?::VARCHAR[]))"
        params.append(list(hashes))
    if con is not None:
        return _grouped(con.execute(sql, params).to_arrow_table())
    with db.lock:
        table = db.execute(sql, params).to_arrow_table()
    return _grouped(table)


def _load(db: Database, fingerprint: str, loading: _Loading) -> None:
    """Read every passage of the model into memory through a snapshot of its own, so searches and
    writes go on meanwhile; what is written after the snapshot began is in ``loading.pending``."""
    held: dict[str, np.ndarray] | None
    try:
        con = db.snapshot()
        try:
            held = _read(db, fingerprint, con=con)
        finally:
            con.close()
    except Exception:  # a closed file: the next search starts over
        held = None
    with db.lock:
        if db.passage_cache.get(fingerprint) is not loading:
            return  # dropped meanwhile (keep_only): this copy may hold what was deleted
        if held is None:
            del db.passage_cache[fingerprint]
            return
        held.update(loading.pending)
        db.passage_cache[fingerprint] = held


def _held(db: Database, fingerprint: str) -> dict[str, np.ndarray] | None:
    """Every passage of this model, by content hash: read once per open file, then kept up to date
    by :func:`fill` (the only writer) and dropped by :func:`keep_only`. Above
    :data:`SYNC_LOAD_ROWS` the read runs in a background thread, and this is None until it ends."""
    with db.lock:
        held = db.passage_cache.get(fingerprint)
        if held is None:
            count = int(db.scalar("SELECT count(*) FROM passages WHERE fingerprint = ?", [fingerprint]))
            if count > SYNC_LOAD_ROWS:
                loading = _Loading()
                db.passage_cache[fingerprint] = loading
                threading.Thread(
                    target=_load, args=(db, fingerprint, loading), name="nbmemory-passages", daemon=True
                ).start()
                return None
            held = _read(db, fingerprint)
            db.passage_cache[fingerprint] = held
        return held if isinstance(held, dict) else None


def none_stored(db: Database, fingerprint: str) -> bool:
    """Whether this model has no passage at all (its copy in memory is read and empty), so a search
    need not look up its candidates' content."""
    held = _held(db, fingerprint)
    return held is not None and not held


def vectors_of(db: Database, fingerprint: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
    """Passage vectors by content hash (``(windows, dim)``, as stored); content without passages is
    absent. From the copy in memory, or from the table while that copy is being read."""
    held = _held(db, fingerprint)
    if held is None:
        return _read(db, fingerprint, hashes)
    return {h: held[h] for h in hashes if h in held}


def best(db: Database, fingerprint: str, qvec: np.ndarray, hashes: dict[int, str]) -> dict[int, float]:
    """The best passage cosine of each chunk id in ``hashes`` (id -> content hash) that has passages."""
    found = vectors_of(db, fingerprint, list(hashes.values()))
    ids = [i for i, h in hashes.items() if h in found]
    if not ids:
        return {}
    mats = [found[hashes[i]] for i in ids]
    starts = np.cumsum([0] + [len(m) for m in mats[:-1]])
    # Summed as the memory-resident index re-scores chunk cosines (float64, row by row): a
    # passage equal to another chunk's whole text then ties with it exactly.
    sims = hot.cosine64(np.concatenate(mats), qvec)
    return {i: float(v) for i, v in zip(ids, np.maximum.reduceat(sims, starts), strict=True)}
