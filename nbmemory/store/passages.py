"""Passage vectors: one per window of a prose chunk (:mod:`nbmemory.ingest.windows`), per model.

Rows are ``(content_hash, fingerprint, n, vec)``: derived from a chunk's heading and text (the
content hash covers both) and the model, so chunks of the same content share them, a write never
changes them, and vectors of two models never mix (a lookup names the model). A chunk with fewer
than two windows has none: its own vector is its only passage.

Writes fill them for what they wrote (after the chunk's own transaction: a crash in between leaves
a chunk scored by its own vector until ``doctor --repair`` fills it); a re-embed fills them for the
new model before the swap, which drops those of other models. Search reads them for its candidates
only (:func:`best`), through a cache: content and model fix a row for good.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

from nbmemory.embed.base import Embedder
from nbmemory.ingest.windows import KINDS, windows
from nbmemory.store import hot
from nbmemory.store.chunks import embedding_text
from nbmemory.store.db import Database

#: (content hash, heading, text, kind) of a chunk.
Content = tuple[str, str, str, str]
#: Content hashes whose passages are cached per open file (a row never changes).
CACHE_MAX = 50_000


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
    if not todo:
        return 0
    flat = [t for texts in todo.values() for t in texts]
    vecs = np.asarray(embedder.embed_documents(flat, progress=progress), dtype=np.float32)
    import pyarrow as pa

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
    cache = db.passage_cache.get(embedder.fingerprint, {})
    for digest in todo:
        cache.pop(digest, None)
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


def keep_only(db: Database, fingerprints: Sequence[str]) -> None:
    """Drop the passages of every other model, and those of content no chunk holds any more."""
    db.execute(
        "DELETE FROM passages WHERE fingerprint NOT IN (SELECT unnest(?::VARCHAR[])) "
        "OR content_hash NOT IN (SELECT content_hash FROM chunks)",
        [list(fingerprints)],
    )
    db.passage_cache.clear()


def vectors_of(db: Database, fingerprint: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
    """Passage vectors by content hash (``(windows, dim)``, as stored); content without passages is absent."""
    cache = db.passage_cache.setdefault(fingerprint, {})
    wanted = [h for h in dict.fromkeys(hashes) if h not in cache]
    if wanted:
        if len(cache) + len(wanted) > CACHE_MAX:
            cache.clear()
        rows = db.fetchall(
            "SELECT content_hash, list(vec ORDER BY n) FROM passages WHERE fingerprint = ? "
            "AND content_hash IN (SELECT unnest(?::VARCHAR[])) GROUP BY content_hash",
            [fingerprint, wanted],
        )
        found = {r[0]: r[1] for r in rows}
        for digest in wanted:
            vecs = found.get(digest)
            if vecs:
                cache[digest] = np.asarray(vecs, dtype=np.float32)
            else:
                cache[digest] = None
    out: dict[str, np.ndarray] = {}
    for digest in hashes:
        held = cache.get(digest)
        if held is not None:
            out[digest] = held
    return out


def best(db: Database, fingerprint: str, qvec: np.ndarray, hashes: dict[int, str]) -> dict[int, float]:
    """The best passage cosine of each chunk id in ``hashes`` (id -> content hash) that has passages."""
    # Summed as the memory-resident index re-scores chunk cosines (float64, row by row): a
    # passage equal to another chunk's whole text then ties with it exactly.
    found = vectors_of(db, fingerprint, list(hashes.values()))
    return {i: float(np.max(hot.cosine64(found[h], qvec))) for i, h in hashes.items() if h in found}
