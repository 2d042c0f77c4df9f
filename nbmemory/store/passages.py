"""Passage vectors: one per window of a prose chunk (:mod:`nbmemory.store.windows`), per model.

With ``NBMEMORY_PASSAGE_METHOD=late``, an embedder that can pool spans of one forward pass
(``embed_with_spans``, the bundled sentence-transformers backend) gives each window the mean of
its tokens' embeddings from the pass over the whole chunk ("late chunking"): no model pass per
window (:func:`method` says why it is not the default). The indexer takes those
vectors from the very pass that embeds the chunk (:func:`plan`, then :func:`fill` with
``late``); other embedders embed each window on its own. Which way a memory's passages were
made is in its meta (``passage_method``): a memory whose passages were made the other way has
them made again on first use (:func:`upgrade`).

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

import os
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow.compute as pc

from nbmemory.embed.base import Embedder
from nbmemory.errors import ConfigError
from nbmemory.store.chunks import embedding_text
from nbmemory.store.db import Database
from nbmemory.store.vectors import cosine64
from nbmemory.store.windows import KINDS, WINDOW_CHARS, window_spans, windows

#: (content hash, heading, text, kind) of a chunk.
Content = tuple[str, str, str, str]
#: Above this many passages of one model (about 20,000 chunks of prose), the first search after
#: opening does not wait for their read into memory, which grows with their number.
SYNC_LOAD_ROWS = 100_000
#: Chunks whose passages are embedded and committed together (a repair of a large memory keeps
#: what it did when killed, and holds a batch's vectors in memory, not all of them).
BATCH = 512


#: How passages are made by an embedder that pools spans: the mean of each window's token
#: embeddings in the chunk's own forward pass, read again from the window on when the chunk
#: runs past the model's window (``SentenceTransformerEmbedder.embed_with_spans``).
LATE = "late-1"
#: ... and by any other embedder: one forward pass per window.
SEPARATE = "separate"


def method(embedder: Embedder) -> str:
    """How passage vectors are made: :data:`LATE` when ``NBMEMORY_PASSAGE_METHOD=late`` and
    ``embedder`` can pool spans, else :data:`SEPARATE` (the default).

    Late pooling embeds each chunk once instead of once per window, so indexing is faster; but
    its windows rank a little lower on the judged notes questions, and the no-answer flag is
    calibrated on windows embedded alone, so it is opt-in (docs/evaluation/notes.md, "Late
    pooling").
    """
    wanted = os.environ.get("NBMEMORY_PASSAGE_METHOD", "windows").strip().lower()
    if wanted not in ("late", "windows"):
        raise ConfigError(f"NBMEMORY_PASSAGE_METHOD={wanted!r}: give late or windows")
    pools = callable(getattr(embedder, "embed_with_spans", None))
    return LATE if wanted == "late" and pools else SEPARATE


def texts_of(heading: str, text: str, kind: str) -> list[str]:
    """What the embedder sees for each passage of a chunk; empty when it has fewer than two."""
    if kind not in KINDS:
        return []
    found = windows(text)
    return [embedding_text(heading, w) for w in found] if len(found) > 1 else []


def plan(heading: str, text: str, kind: str) -> tuple[list[tuple[int, int]], int]:
    """Where each passage of a chunk lies in its embedding text (:func:`embedding_text`), and how
    many leading characters (the heading) are context for every passage; no spans when the
    chunk has fewer than two windows."""
    if kind not in KINDS:
        return [], 0
    spans = window_spans(text)
    if len(spans) < 2:
        return [], 0
    shift = len(heading) + 1 if heading else 0
    return [(a + shift, b + shift) for a, b in spans], shift


def embed_with_late(
    embedder: Embedder,
    texts: Sequence[str],
    plans: Sequence[tuple[list[tuple[int, int]], int]],
    progress: Any = None,
) -> tuple[np.ndarray, list[list[np.ndarray | None]]]:
    """The chunks' vectors and their passages' late vectors, from one pass over each chunk."""
    pool = embedder.embed_with_spans  # type: ignore[attr-defined]
    vecs, late = pool(list(texts), [p[0] for p in plans], [p[1] for p in plans], progress=progress)
    return np.asarray(vecs, dtype=np.float32), late


def _stored(db: Database, fingerprint: str, hashes: Sequence[str]) -> set[str]:
    rows = db.fetchall(
        "SELECT DISTINCT content_hash FROM passages WHERE fingerprint = ? "
        "AND content_hash IN (SELECT unnest(?::VARCHAR[]))",
        [fingerprint, list(hashes)],
    )
    return {r[0] for r in rows}


def pending(db: Database, embedder: Embedder, contents: Iterable[Content]) -> list[Content]:
    """The contents, once each, that have two or more windows and no passages of ``embedder``."""
    todo: dict[str, Content] = {}
    for content in contents:
        if content[0] not in todo and texts_of(content[1], content[2], content[3]):
            todo[content[0]] = content
    if todo:
        for digest in _stored(db, embedder.fingerprint, list(todo)):
            del todo[digest]
    return list(todo.values())


def windows_to_embed(
    contents: Iterable[Content], late: dict[str, list[np.ndarray | None]] | None = None
) -> int:
    """How many windows of ``contents`` need a pass of their own: all but those ``late`` pooled."""
    late = late or {}
    return sum(
        sum(v is None for v in late[digest]) if digest in late else len(texts_of(heading, text, kind))
        for digest, heading, text, kind in contents
    )


def fill(
    db: Database,
    embedder: Embedder,
    contents: Iterable[Content],
    progress: Callable[[int], None] | None = None,
    late: dict[str, list[np.ndarray | None]] | None = None,
) -> int:
    """Make and store the passages of ``contents`` that ``embedder`` has none for; returns how many.

    ``late``: passage vectors already pooled from the chunks' own pass (by content hash), as the
    indexer has them; the others are pooled here (one pass per chunk) or, for an embedder that
    cannot pool, embedded window by window.
    """
    items = pending(db, embedder, contents)
    done = 0
    for first in range(0, len(items), BATCH):
        done += _store(db, embedder, items[first : first + BATCH], progress, late or {})
    return done


def _vectors(
    embedder: Embedder,
    batch: list[Content],
    progress: Callable[[int], None] | None,
    late: dict[str, list[np.ndarray | None]],
) -> dict[str, np.ndarray]:
    """Each content's passage vectors: pooled when the embedder can, else one pass per window."""
    windows_of = {digest: texts_of(heading, text, kind) for digest, heading, text, kind in batch}
    found: dict[str, list[np.ndarray | None]] = {d: [None] * len(w) for d, w in windows_of.items()}
    if method(embedder) == LATE:
        found.update({d: list(late[d]) for d in found if d in late})
        rest = [c for c in batch if c[0] not in late]
        if rest:
            plans = [plan(h, t, k) for _, h, t, k in rest]
            _, pooled = embed_with_late(
                embedder, [embedding_text(h, t) for _, h, t, _ in rest], plans, progress
            )
            found.update({c[0]: p for c, p in zip(rest, pooled, strict=True)})
    # Windows no pass read whole (or an embedder that cannot pool): one pass each.
    wanted = [(d, n) for d, vecs in found.items() for n, v in enumerate(vecs) if v is None]
    if wanted:
        alone = embedder.embed_documents([windows_of[d][n] for d, n in wanted], progress=progress)
        for (d, n), vec in zip(wanted, alone, strict=True):
            found[d][n] = vec
    return {
        d: np.asarray(np.stack([x for x in v if x is not None]), dtype=np.float32) for d, v in found.items()
    }


def _store(
    db: Database,
    embedder: Embedder,
    batch: list[Content],
    progress: Callable[[int], None] | None,
    late: dict[str, list[np.ndarray | None]],
) -> int:
    """Make one batch of contents' passages and commit them (a killed run keeps the batches done)."""
    import pyarrow as pa

    made = _vectors(embedder, batch, progress, late)
    todo = {c[0]: made[c[0]] for c in batch}
    vecs = np.concatenate(list(todo.values())) if todo else np.zeros((0, embedder.dim), np.float32)
    flat = vecs
    owners = [digest for digest, mat in todo.items() for _ in range(len(mat))]
    ns = [n for mat in todo.values() for n in range(len(mat))]
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
            for digest, mat in todo.items():
                held[digest] = vecs[start : start + len(mat)]
                start += len(mat)
    return len(flat)


def missing(db: Database, fingerprint: str, span: int | None = None) -> list[Content]:
    """Live chunks of prose with two or more windows and no passages for this model, oldest
    first. ``span``: read that many chunk ids per statement, each under the store's lock on its
    own, so a background reader never holds the lock for a whole scan of a large memory."""
    # A text shorter than one window holds one window at most (its pieces and the spaces
    # joining them fit in it): only longer ones are split here.
    sql = (
        "SELECT c.content_hash, any_value(c.heading), any_value(c.text), any_value(c.kind), min(c.id) "
        "FROM chunks c WHERE c.deleted_at IS NULL AND c.kind IN (SELECT unnest(?::VARCHAR[])) "
        "AND length(c.text) >= ? AND c.id BETWEEN ? AND ? AND NOT EXISTS (SELECT 1 FROM passages p "
        "WHERE p.fingerprint = ? AND p.content_hash = c.content_hash) GROUP BY c.content_hash"
    )
    top = int(db.scalar("SELECT coalesce(max(id), 0) FROM chunks"))
    span = span or top + 1
    found: dict[str, tuple[int, Content]] = {}
    for low in range(0, top + 1, span):
        for digest, heading, text, kind, first in db.fetchall(
            sql, [sorted(KINDS), WINDOW_CHARS, low, low + span - 1, fingerprint]
        ):
            if digest not in found or first < found[digest][0]:
                found[digest] = (int(first), (digest, heading or "", text, kind))
    ordered = [content for _, content in sorted(found.values(), key=lambda held: held[0])]
    return [c for c in ordered if texts_of(c[1], c[2], c[3])]


def stored_count(db: Database, fingerprint: str) -> int:
    """How many passages of this model the live chunks' content has."""
    return int(
        db.scalar(
            "SELECT count(*) FROM passages WHERE fingerprint = ? AND content_hash IN "
            "(SELECT content_hash FROM chunks WHERE deleted_at IS NULL)",
            [fingerprint],
        )
    )


def window_count(contents: Iterable[Content]) -> int:
    """How many passages ``contents`` need in all."""
    return sum(len(texts_of(heading, text, kind)) for _, heading, text, kind in contents)


#: The key under which :data:`Database.passage_cache` says, per model, that passages may be
#: pending (a background refiner runs): see :func:`mark_refining` and :func:`awaiting`.
_REFINING = "refining:"


def mark_refining(db: Database, fingerprint: str, refining: bool) -> None:
    """Say whether this model's passages may be pending in this memory (a write left them to a
    background refiner, or it has not yet checked) or are known to be complete."""
    key = _REFINING + fingerprint
    if refining:
        db.passage_cache[key] = True
    else:
        db.passage_cache.pop(key, None)


def refining(db: Database, fingerprint: str) -> bool:
    """Whether this model's passages may be pending (:func:`mark_refining`)."""
    return bool(db.passage_cache.get(_REFINING + fingerprint))


def awaiting(db: Database, fingerprint: str, contents: Iterable[Content]) -> list[str]:
    """The content hashes among ``contents`` whose passages are still to be made: each has two
    or more windows and no passage of this model yet. Empty when the memory refines nothing
    (its passages are made with each write, or are complete), without reading anything."""
    if not refining(db, fingerprint):
        return []
    wanted = {c[0]: c for c in contents if texts_of(c[1], c[2], c[3])}
    if not wanted:
        return []
    have = vectors_of(db, fingerprint, list(wanted))
    return [digest for digest in wanted if digest not in have]


def fill_missing(db: Database, embedder: Embedder, progress: Callable[[int], None] | None = None) -> int:
    """Fill the passages every live chunk of prose lacks for ``embedder``; returns how many."""
    return fill(db, embedder, missing(db, embedder.fingerprint), progress)


def upgrade(db: Database, embedder: Embedder, log: Callable[[str], None] | None = None) -> int:
    """Make this model's passages again when they were made another way than ``embedder`` makes
    them (a memory from before late pooling); returns how many were made. Until the meta says
    they are done, a killed run starts over at the next open."""
    want = method(embedder)
    have = db.get_meta("passage_method") or SEPARATE  # memories from before the meta were SEPARATE
    stored = int(db.scalar("SELECT count(*) FROM passages WHERE fingerprint = ?", [embedder.fingerprint]))
    made = 0
    if have != want and stored:
        if log is not None:
            log(f"making the passage vectors of {stored} windows again ({have} -> {want}): once")
        with db.transaction():
            db.execute("DELETE FROM passages WHERE fingerprint = ?", [embedder.fingerprint])
        with db.lock:
            db.passage_cache.pop(embedder.fingerprint, None)
        made = fill_missing(db, embedder)
    if db.get_meta("passage_method") != want:
        db.set_meta("passage_method", want)
    return made


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
    numpy objects costs several times the vectors' size (bench/search/passages_scale.py)."""
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
    :data:`SYNC_LOAD_ROWS` the read runs in a background thread, and this is None until it ends.

    Once read, the copy is taken without the store's lock (as it was always read: outside it),
    so a search does not wait here for a write that holds the lock."""
    held = db.passage_cache.get(fingerprint)
    if isinstance(held, dict):
        return held
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


#: A window whose float32 cosine is within this of its chunk's best is scored again in float64
#: (the float32 cosine of 384 products is off by under 1e-6).
_NEAR_BEST = 1e-4


def best(db: Database, fingerprint: str, qvec: np.ndarray, hashes: dict[int, str]) -> dict[int, float]:
    """The best passage cosine of each chunk id in ``hashes`` (id -> content hash) that has passages.

    Its value is the float64 cosine, summed as the memory-resident index re-scores chunk cosines
    (row by row): a passage equal to another chunk's whole text then ties with it exactly. Every
    window is scored in float32 first; only those within :data:`_NEAR_BEST` of their chunk's
    best (one or two of each chunk's windows) are scored again in float64, and the best of those
    is the best of all."""
    found = vectors_of(db, fingerprint, list(hashes.values()))
    ids = [i for i, h in hashes.items() if h in found]
    if not ids:
        return {}
    sims = best_cosines([found[hashes[i]] for i in ids], qvec)
    return dict(zip(ids, sims.tolist(), strict=True))


def best_cosines(mats: Sequence[np.ndarray], qvec: np.ndarray) -> np.ndarray:
    """For each matrix of window vectors (one or more rows), the largest float64 cosine
    (:func:`~nbmemory.store.vectors.cosine64`) of a row to ``qvec``: see :func:`best`."""
    sizes = np.array([len(m) for m in mats])
    starts = np.concatenate([[0], np.cumsum(sizes[:-1])])
    stacked = np.concatenate(mats)
    if len(stacked) <= 2 * len(mats):  # a window or two each: float64 for all costs less than the screen
        return np.maximum.reduceat(cosine64(stacked, qvec), starts)
    q32 = np.asarray(qvec, dtype=np.float32)
    norms = np.sqrt(np.einsum("ij,ij->i", stacked, stacked)) * np.float32(np.linalg.norm(q32))
    approx = (stacked @ q32) / np.where(norms > 0, norms, np.float32(1.0))
    near = np.flatnonzero(approx >= np.repeat(np.maximum.reduceat(approx, starts), sizes) - _NEAR_BEST)
    sims = np.full(len(stacked), -np.inf)
    sims[near] = cosine64(stacked[near], qvec)
    return np.maximum.reduceat(sims, starts)
