"""Integrity checks over a memory file, and repairs from the data it still holds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nbmemory import private
from nbmemory.config import memory_paths
from nbmemory.embed.base import Embedder
from nbmemory.errors import NbMemoryError
from nbmemory.store import chunks as chunk_rows
from nbmemory.store import fts, passages, reembed, vectors
from nbmemory.store.db import CATALOG, Database
from nbmemory.store.migrations import SCHEMA_VERSION


@dataclass
class Check:
    """One ``doctor`` finding."""

    name: str
    ok: bool
    detail: str
    repaired: bool = False


@dataclass
class DoctorReport:
    """Every check of one ``doctor`` run.

    ``model_ok`` says whether the store's vectors now come from the current model (``None`` when
    the model could not be checked); the facade uses it to allow or refuse searches.
    """

    checks: list[Check] = field(default_factory=list)
    model_ok: bool | None = None

    @property
    def ok(self) -> bool:
        return all(c.ok or c.repaired for c in self.checks)

    def summary(self) -> str:
        lines = []
        for c in self.checks:
            mark = "ok " if c.ok else ("fixed" if c.repaired else "FAIL")
            lines.append(f"[{mark:>5}] {c.name}: {c.detail}")
        return "\n".join(lines)


def run_doctor(
    db: Database,
    load_embedder: Callable[[], Embedder],
    reembed_all: Callable[[], int],
    repair: bool,
    memory_index: Callable[[Database, int], str],
    with_passages: bool = True,
) -> DoctorReport:
    """Check ``db``; with ``repair``, fix what its data allows.

    ``load_embedder`` gives the model the store opens with (the active tuned version included);
    ``reembed_all`` re-embeds every item with it and switches the store to it;
    ``memory_index`` says what the memory-resident index is doing, given the stored vectors'
    count (:func:`nbmemory.search.hot.describe`).
    """
    report = DoctorReport()

    def add(name: str, ok: bool, detail: str, fix: object = None) -> None:
        check = Check(name, ok, detail)
        if not ok and repair and callable(fix):
            fix()
            check.repaired = True
        report.checks.append(check)

    version = db.schema_version()
    add("schema", version == SCHEMA_VERSION, f"version {version} (expected {SCHEMA_VERSION})")
    if db.path != ":memory:":
        report.checks.append(_permissions(db, repair))

    stored = db.get_meta("model_fingerprint")
    try:
        embedder = load_embedder()
    except NbMemoryError as exc:
        add("model", False, str(exc))
        return report
    if stored is None:
        add("model", True, f"no vectors yet; model will be {embedder.name}")
    else:
        same = stored == embedder.fingerprint
        add(
            "model",
            same,
            f"stored {db.get_meta('model_name')} ({stored}), current {embedder.name} "
            f"({embedder.fingerprint})" + ("" if same else ": re-embedding needed"),
            reembed_all,
        )
        report.model_ok = same or repair
    if db.table_exists("vectors_new"):
        # A re-embed stages vectors batch by batch: one for the current model is resumed, one
        # for another model (a killed switch or a refused tuning) is dropped.
        target = db.get_meta("reembed_target")
        resumable = target is not None and target == embedder.fingerprint and stored != target
        add(
            "interrupted re-embed",
            False,
            "a half-written re-embed is left over"
            + (": repair finishes it" if resumable else f" for another model ({target}): repair drops it"),
            reembed_all if resumable else (lambda: reembed.drop_staging(db)),
        )

    orphans = [
        int(r[0])
        for r in db.fetchall(
            "SELECT c.id FROM chunks c LEFT JOIN documents d ON d.id = c.doc_id "
            "WHERE c.doc_id IS NOT NULL AND d.id IS NULL"
        )
    ]
    add(
        "orphan chunks",
        not orphans,
        f"{len(orphans)} chunks whose document is gone",
        lambda: _in_tx(db, lambda: chunk_rows.purge(db, orphans)),
    )

    # Copies of a file's chunk: the same namespace, source, kind, place and text (left by two
    # indexings of one save, the Jupyter server's and `nbmemory watch`'s, that each wrote it
    # before a file's write checked what was stored). The oldest of each is kept.
    copies = [
        int(r[0])
        for r in db.fetchall(
            "SELECT id FROM (SELECT id, row_number() OVER (PARTITION BY namespace, source, kind, ordinal, "
            "cell_index, content_hash ORDER BY id) AS n FROM chunks "
            "WHERE deleted_at IS NULL AND source IS NOT NULL) WHERE n > 1 ORDER BY id"
        )
    ]
    add(
        "duplicate chunks",
        not copies,
        f"{len(copies)} copies of a file's chunks (same source, place and text)"
        + (": repair removes them, keeping the first of each" if copies else ""),
        lambda: _in_tx(db, lambda: chunk_rows.purge(db, copies)),
    )

    if not db.table_exists("vectors"):
        add("vectors", stored is None, "vectors table missing")
        return report
    dim = vectors.table_dim(db)
    meta_dim = int(db.get_meta("model_dim") or 0) or None
    add("vector dimension", meta_dim in (None, dim), f"table {dim}, recorded {meta_dim}")

    stray = [
        int(r[0])
        for r in db.fetchall(
            "SELECT v.chunk_id FROM vectors v LEFT JOIN chunks c ON c.id = v.chunk_id "
            "WHERE c.id IS NULL OR c.deleted_at IS NOT NULL"
        )
    ]
    add(
        "vectors of deleted items",
        not stray,
        f"{len(stray)} vectors without a live item",
        lambda: db.execute("DELETE FROM vectors WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))", [stray]),
    )

    missing = db.fetchall(
        "SELECT c.id, c.heading, c.text FROM chunks c LEFT JOIN vectors v ON v.chunk_id = c.id "
        "WHERE c.deleted_at IS NULL AND v.chunk_id IS NULL ORDER BY c.id"
    )

    def embed_missing() -> None:
        emb = load_embedder()
        for start in range(0, len(missing), 256):
            part = missing[start : start + 256]
            vecs = emb.embed_documents([chunk_rows.embedding_text(h or "", t) for _, h, t in part])
            with db.transaction():
                vectors.put(db, [int(r[0]) for r in part], vecs)

    add("missing vectors", not missing, f"{len(missing)} live items without a vector", embed_missing)

    fingerprint = db.get_meta("model_fingerprint")
    if with_passages and fingerprint is not None and report.model_ok is not False:
        # Passages a killed write did not get to (it stored its chunks first).
        lacking = passages.missing(db, fingerprint)
        add(
            "passages",
            not lacking,
            f"{len(lacking)} chunks of prose without their window vectors",
            lambda: passages.fill(db, load_embedder(), lacking),
        )

    bad_links = int(
        db.scalar(
            "SELECT count(*) FROM links l WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.id = l.src) "
            "OR NOT EXISTS (SELECT 1 FROM chunks c WHERE c.id = l.dst)"
        )
    )
    add(
        "links",
        bad_links == 0,
        f"{bad_links} links to missing items",
        lambda: db.execute(
            "DELETE FROM links l WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE "
            "c.id = l.src) OR NOT EXISTS (SELECT 1 FROM chunks c WHERE c.id = l.dst)"
        ),
    )

    # FTS: the snapshot exists and every chunk past the watermark has delta postings.
    mark = fts.watermark(db)
    if not fts.index_exists(db):
        add("full-text index", False, "missing", lambda: fts.rebuild(db))
    else:
        uncovered = int(
            db.scalar(
                "SELECT count(*) FROM chunks c WHERE c.deleted_at IS NULL AND c.seq > ? AND "
                "NOT EXISTS (SELECT 1 FROM fts_delta_docs d WHERE d.chunk_id = c.id) AND "
                "length(trim(c.text || c.heading)) > 0",
                [mark],
            )
        )
        indexed = int(db.scalar(f"SELECT count(*) FROM {fts.FTS_SCHEMA}.docs"))
        add(
            "full-text index",
            uncovered == 0,
            f"{indexed} items in the snapshot, {fts.delta_size(db)} pending, {uncovered} not covered",
            lambda: fts.rebuild(db),
        )

    # The vector index: the memory-resident copy (the default), or HNSW when searches go
    # through SQL: present, and a stored vector finds its own item first.
    live_vectors = int(db.scalar("SELECT count(*) FROM vectors"))
    if not vectors.persisted(db):
        add("vector index", True, memory_index(db, live_vectors), None)
    elif not vectors.index_exists(db):
        add("vector index", live_vectors == 0, "HNSW index missing", lambda: vectors.rebuild_index(db))
    elif live_vectors:
        probe = db.fetchall("SELECT chunk_id, vec FROM vectors USING SAMPLE 5 ROWS (reservoir, 7)")
        # A zero vector (an embedder's answer to a text without words) has no cosine
        # neighbours at all, so it cannot probe the graph.
        probe = [(cid, vec) for cid, vec in probe if np.any(np.asarray(vec, np.float32))]
        found_self = 0
        for cid, vec in probe:
            hits, _ = vectors.search(db, np.asarray(vec, np.float32), 3, dim or len(vec))
            # Identical vectors (duplicate text) tie at distance 0, so a zero distance counts too.
            found_self += any(h == int(cid) or d <= 1e-5 for h, d in hits)
        # One graph entry per stored vector. A DELETE of rows that were in the index when it
        # was loaded from the file leaves their entries behind (duckdb-vss 1.5.5): dead entries
        # only slow searches down, until they outnumber the live ones; missing ones hide items.
        entries = int(
            db.scalar(
                "SELECT count FROM pragma_hnsw_index_info() WHERE catalog_name = ? AND index_name = ?",
                [CATALOG, vectors.INDEX_NAME],
            )
            or 0
        )
        # HNSW is approximate: among near-duplicates (texts that differ by a number) a vector
        # can miss itself in a healthy graph, so one probe in five may miss.
        add(
            "vector index",
            5 * found_self >= 4 * len(probe) and live_vectors <= entries <= 2 * live_vectors,
            f"{live_vectors} vectors, {entries} graph entries; {found_self}/{len(probe)} probes "
            "find themselves",
            lambda: vectors.rebuild_index(db),
        )
    return report


def _in_tx(db: Database, fn: Callable[[], object]) -> None:
    with db.transaction():
        fn()


def _permissions(db: Database, repair: bool) -> Check:
    """Whether the memory is owner-only: ok, fixed (on open, or now with ``repair``), or not."""
    file = Path(db.path).expanduser()
    paths = [p for p in memory_paths(file, db.own_folder) if private.mode(p) is not None]
    shared = (
        ""
        if db.own_folder or private.is_private(file.parent)
        else (f"; its folder {file.parent} is {private.state(file.parent)}, a folder you chose: left as is")
    )
    wide = [p for p in paths if not private.is_private(p)]
    if wide:
        detail = "not owner-only: " + ", ".join(f"{p} ({private.mode(p):04o})" for p in wide)
        check = Check("permissions", False, detail + shared)
        if repair:
            fixed = private.narrow_all(wide, f"memory {file}")
            check.repaired = len(fixed) == len(wide)
            check.detail = "made owner-only: " + ", ".join(str(n) for n in fixed) + shared
        return check
    if db.narrowed:
        detail = "made owner-only on open: " + ", ".join(str(n) for n in db.narrowed)
        # Said once: the process that opened the file (a Jupyter server, an owner serving many
        # `nbmemory doctor` runs) fixed it then, and every later run finds it owner-only.
        db.narrowed = []
        return Check("permissions", False, detail + shared, repaired=True)
    return Check("permissions", True, f"owner-only ({len(paths)} paths){shared}")
