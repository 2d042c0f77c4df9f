"""BM25 over DuckDB's ``fts`` index, never stale.

``PRAGMA create_fts_index`` builds a snapshot (DESIGN.md, note 1) and ``match_bm25`` is
evaluated row by row. So:

* the snapshot covers every chunk whose ``seq`` is at most the watermark stored in
  ``meta.fts_seq``; a chunk written later (``seq`` above it) is scored from ``fts_delta``,
  postings made with the index's own tokenizer, stopwords and stemmer at write time;
* a query reads the index tables (``dict``, ``terms``, ``docs``) directly: one join over the
  query's terms instead of a per-row macro;
* the snapshot is rebuilt when the delta grows past a threshold, or at the end of an ``index``.

Digits are kept (the extension's default drops them): ticket numbers, error codes and ports are
what people search a working memory for. Scores are BM25 (k1 = 1.2, b = 0.75, the fts defaults), with the heading field's term
frequency counted at ``HEADING_WEIGHT`` (a BM25F-style field weight).
"""

from __future__ import annotations

from typing import Any

from nbmemory.store.db import Database

FTS_SCHEMA = "fts_main_chunks"
HEADING_WEIGHT = 0.3
K1 = 1.2
B = 0.75
DELTA_REBUILD_MIN = 2000
DELTA_REBUILD_FRACTION = 0.05


def index_exists(db: Database) -> bool:
    return db.table_exists("dict", schema=FTS_SCHEMA)


def watermark(db: Database) -> int:
    return int(db.get_meta("fts_seq", "0") or 0)


def delta_size(db: Database) -> int:
    return int(db.scalar("SELECT count(*) FROM fts_delta_docs"))


def rebuild(db: Database) -> int:
    """Rebuild the snapshot over all chunks and empty the delta; returns the new watermark."""
    with db.transaction() as con:
        mark = int(con.execute("SELECT coalesce(max(seq), 0) FROM chunks").fetchone()[0])  # type: ignore[index]
        con.execute(
            "PRAGMA create_fts_index('chunks', 'id', 'text', 'heading', "
            "stemmer = 'porter', stopwords = 'english', ignore = '[^a-z0-9]+', overwrite = 1)"
        )
        con.execute("DELETE FROM fts_delta")
        con.execute("DELETE FROM fts_delta_docs")
        con.execute(
            "INSERT INTO meta VALUES ('fts_seq', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [str(mark)],
        )
    return mark


def needs_rebuild(db: Database) -> bool:
    if not index_exists(db):
        return True
    delta = delta_size(db)
    if delta == 0:
        return False
    total = int(db.scalar("SELECT num_docs FROM fts_main_chunks.stats") or 0)
    return delta >= max(DELTA_REBUILD_MIN, DELTA_REBUILD_FRACTION * total)


def ensure_fresh(db: Database) -> bool:
    """Make sure a search can run against current data; True if the snapshot was rebuilt."""
    if needs_rebuild(db):
        rebuild(db)
        return True
    return False


def add_delta(db: Database, chunk_ids: list[int]) -> None:
    """Write delta postings for chunks just inserted or whose text changed.

    Must run inside the caller's transaction, after the chunks rows are written.
    """
    if not chunk_ids:
        return
    if not index_exists(db):
        # The first write to a new store: a snapshot of (almost) nothing gives us the tokenizer.
        return
    db.execute("DELETE FROM fts_delta WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))", [chunk_ids])
    db.execute(
        "DELETE FROM fts_delta_docs WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))", [chunk_ids]
    )
    db.execute(
        f"""
        INSERT INTO fts_delta
        SELECT id, field, stem(w, 'porter') AS term, count(*)::INTEGER AS tf
        FROM (
            SELECT id, 0::TINYINT AS field, unnest({FTS_SCHEMA}.tokenize(text)) AS w
            FROM chunks WHERE id IN (SELECT unnest(?::BIGINT[]))
            UNION ALL
            SELECT id, 1::TINYINT, unnest({FTS_SCHEMA}.tokenize(heading))
            FROM chunks WHERE id IN (SELECT unnest(?::BIGINT[]))
        )
        WHERE w <> '' AND w NOT IN (SELECT sw FROM {FTS_SCHEMA}.stopwords)
        GROUP BY ALL
        """,
        [chunk_ids, chunk_ids],
    )
    db.execute(
        "INSERT INTO fts_delta_docs SELECT chunk_id, sum(tf)::INTEGER FROM fts_delta "
        "WHERE chunk_id IN (SELECT unnest(?::BIGINT[])) GROUP BY chunk_id",
        [chunk_ids],
    )


def query_terms(db: Database, query: str) -> list[str]:
    """The query's distinct stemmed terms, tokenized exactly as the index was."""
    if not index_exists(db):
        return []
    rows = db.fetchall(
        f"SELECT DISTINCT stem(w, 'porter') FROM (SELECT unnest({FTS_SCHEMA}.tokenize(?)) AS w) "
        f"WHERE w <> '' AND w NOT IN (SELECT sw FROM {FTS_SCHEMA}.stopwords)",
        [query],
    )
    return sorted(r[0] for r in rows if r[0])


def search(
    db: Database,
    terms: list[str],
    limit: int,
    where: str = "TRUE",
    params: list[Any] | None = None,
) -> list[tuple[int, float]]:
    """Top ``limit`` (chunk id, BM25 score) for ``terms`` among chunks matching ``where``.

    ``where`` is a condition on alias ``c`` (the chunks table); filtering is exact because
    every posting of the query terms is scored before the filter and the limit.
    """
    if not terms or not index_exists(db):
        return []
    sql = f"""
        WITH qt AS (SELECT unnest(?::VARCHAR[]) AS term),
        idx_t AS (SELECT d.termid, d.term, d.df FROM {FTS_SCHEMA}.dict d JOIN qt USING (term)),
        idx_p AS (
            SELECT t.docid, it.term,
                   sum(CASE WHEN t.fieldid = 0 THEN 1.0 ELSE {HEADING_WEIGHT} END) AS tf
            FROM {FTS_SCHEMA}.terms t JOIN idx_t it ON t.termid = it.termid
            GROUP BY ALL
        ),
        idx AS (
            SELECT docs.name AS chunk_id, p.term, p.tf, docs.len::DOUBLE AS len, FALSE AS is_delta
            FROM idx_p p JOIN {FTS_SCHEMA}.docs docs ON docs.docid = p.docid
        ),
        dlt AS (
            SELECT f.chunk_id, f.term,
                   sum(CASE WHEN f.field = 0 THEN f.tf ELSE {HEADING_WEIGHT} * f.tf END) AS tf,
                   any_value(dd.len)::DOUBLE AS len, TRUE AS is_delta
            FROM fts_delta f JOIN qt USING (term) JOIN fts_delta_docs dd USING (chunk_id)
            GROUP BY f.chunk_id, f.term
        ),
        ddf AS (SELECT term, count(DISTINCT chunk_id) AS df FROM dlt GROUP BY term),
        dstats AS (SELECT count(*) AS n, coalesce(sum(len), 0) AS total FROM fts_delta_docs),
        stats AS (
            SELECT coalesce(s.num_docs, 0) + d.n AS n,
                   greatest((coalesce(s.num_docs, 0) * coalesce(s.avgdl, 0) + d.total)
                            / greatest(coalesce(s.num_docs, 0) + d.n, 1), 1) AS avgdl
            FROM dstats d LEFT JOIN {FTS_SCHEMA}.stats s ON TRUE
        ),
        df AS (
            SELECT qt.term, coalesce(idx_t.df, 0) + coalesce(ddf.df, 0) AS df
            FROM qt LEFT JOIN idx_t USING (term) LEFT JOIN ddf USING (term)
        ),
        post AS (SELECT * FROM idx UNION ALL SELECT * FROM dlt),
        scored AS (
            SELECT p.chunk_id,
                   sum(ln((stats.n - df.df + 0.5) / (df.df + 0.5) + 1)
                       * p.tf * ({K1} + 1)
                       / (p.tf + {K1} * (1 - {B} + {B} * p.len / stats.avgdl))) AS score
            FROM post p JOIN df USING (term), stats, chunks c
            WHERE c.id = p.chunk_id
              AND (p.is_delta OR c.seq <= ?)
              AND c.deleted_at IS NULL AND ({where})
            GROUP BY p.chunk_id
        )
        SELECT chunk_id, score FROM scored ORDER BY score DESC, chunk_id LIMIT ?
    """
    args: list[Any] = [terms, watermark(db), *(params or []), limit]
    return [(int(r[0]), float(r[1])) for r in db.fetchall(sql, args)]
