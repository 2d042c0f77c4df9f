"""BM25 over DuckDB's ``fts`` index, never stale.

``PRAGMA create_fts_index`` builds a snapshot (docs/architecture.md, note 1) and ``match_bm25`` is
evaluated row by row. So:

* the snapshot covers every chunk whose ``seq`` is at most the watermark stored in
  ``meta.fts_seq``; a chunk written later (``seq`` above it) is scored from ``fts_delta``,
  postings made with the index's own tokenizer, stopwords and stemmer at write time;
* a query reads the index tables (``dict``, ``terms``, ``docs``) directly: one join over the
  query's terms instead of a per-row macro;
* the snapshot is rebuilt when the delta grows past a threshold, or at the end of an ``index``.

Tokens are runs of letters of any script and decimal digits, lower-cased with accents stripped
(``Müller`` and ``muller`` are one term); digits are kept (the extension's default drops them):
ticket numbers, error codes and ports are what people search a working memory for. Chinese,
Japanese and Korean are written without spaces between words, so each run of those characters
is indexed as its overlapping character bigrams (``机器学习`` -> ``机器 器学 学习``, the scheme of
Lucene's CJK analyzer). That rewrite is SQL (:func:`prepared`) applied to the text the snapshot
indexes (the table ``fts_input``, made at each rebuild and dropped after it: ``chunks`` is the
store of record and stays as written), to delta postings and to queries alike. On ASCII text the
tokens are exactly the ``[a-z0-9]`` runs of the first tokenizer, so English scores are unchanged.
A snapshot made by another tokenizer version (``meta.fts_tokenizer``) counts as missing, and the
next search or open rebuilds it.

Scores are BM25 (k1 = 1.2, b = 0.75, the fts defaults), with the heading field's term
frequency counted at ``HEADING_WEIGHT`` (a BM25F-style field weight).
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from typing import Any

import numpy as np

from nbmemory.store.db import CATALOG, Database

# The snapshot indexes `fts_input`, so the extension names its schema after that table.
FTS_INPUT = "fts_input"
FTS_SCHEMA = f"fts_main_{FTS_INPUT}"
# Schemas of earlier tokenizer versions, dropped by the first rebuild.
LEGACY_SCHEMAS = ("fts_main_chunks",)
#: Recorded in ``meta.fts_tokenizer``; a snapshot of another version is rebuilt. 1 kept [a-z0-9].
TOKENIZER_VERSION = "2"
# What separates tokens: anything but letters, combining marks and decimal digits (after
# lower-casing and accent stripping). On ASCII this keeps the [a-z0-9] runs of version 1.
TOKEN_IGNORE = r"[^\p{L}\p{M}\p{Nd}]+"
# Scripts written without spaces between words; their runs are indexed as character bigrams.
CJK = r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}ー]"
HEADING_WEIGHT = 0.3
K1 = 1.2
B = 0.75
DELTA_REBUILD_MIN = 2000
DELTA_REBUILD_FRACTION = 0.05


def prepared(expr: str) -> str:
    """SQL for the text the tokenizer reads from the VARCHAR expression ``expr``.

    Text without CJK characters is returned as is. In other text each run of CJK characters
    is replaced by its overlapping character bigrams (a run of one character stays itself),
    appended after the rest of the text: BM25 ignores word order, so only the terms matter.

    Parameters
    ----------
    expr:
        A column name or another SQL expression (evaluated up to four times).

    Returns
    -------
    str
        A SQL expression of type VARCHAR.
    """
    runs = f"regexp_extract_all({expr}, '{CJK}+')"
    bigrams = (
        f"list_transform({runs}, lambda r: CASE WHEN length(r) = 1 THEN [r] "
        "ELSE list_transform(range(1, length(r)), lambda i: substr(r, i, 2)) END)"
    )
    return (
        f"(CASE WHEN regexp_matches({expr}, '{CJK}') THEN regexp_replace({expr}, '{CJK}+', ' ', 'g') "
        f"|| ' ' || array_to_string(flatten({bigrams}), ' ') ELSE {expr} END)"
    )


def _state(db: Database) -> tuple[bool, int]:
    # Cached per open file: only this process can write it (DuckDB's file lock), and every
    # change of the snapshot goes through rebuild(), which resets the cache.
    cached = db.cache.get("fts")
    if isinstance(cached, tuple):
        return cached
    exists = (
        db.table_exists("dict", schema=FTS_SCHEMA)
        and db.table_exists("fts_postings")
        and db.get_meta("fts_tokenizer") == TOKENIZER_VERSION
    )
    state = (exists, int(db.get_meta("fts_seq", "0") or 0))
    db.cache["fts"] = state
    return state


def index_exists(db: Database) -> bool:
    return _state(db)[0]


def watermark(db: Database) -> int:
    return _state(db)[1]


def delta_size(db: Database) -> int:
    return int(db.scalar("SELECT count(*) FROM fts_delta_docs"))


def rebuild(db: Database) -> int:
    """Rebuild the snapshot over all chunks and empty the delta; returns the new watermark."""
    for key in ("fts", "fts_terms", "fts_corpus"):
        db.cache.pop(key, None)
    with db.transaction() as con:
        mark = int(con.execute("SELECT coalesce(max(seq), 0) FROM chunks").fetchone()[0])  # type: ignore[index]
        for schema in (*LEGACY_SCHEMAS, FTS_SCHEMA):
            _drop_schema(con, schema)
        con.execute(
            f"CREATE OR REPLACE TABLE {FTS_INPUT} AS "
            f"SELECT id, {prepared('text')} AS text, {prepared('heading')} AS heading FROM chunks"
        )
        ignore = TOKEN_IGNORE.replace("'", "''")
        con.execute(
            f"PRAGMA create_fts_index('{FTS_INPUT}', 'id', 'text', 'heading', stemmer = 'porter', "
            f"stopwords = 'english', ignore = '{ignore}', strip_accents = 1, lower = 1, overwrite = 1)"
        )
        # The extension's `terms` table is one row per token occurrence in docid order, so a
        # query scans all of it. This copy has one row per (term, chunk), sorted by term, so
        # DuckDB's zone maps skip every row group that holds none of the query's terms.
        con.execute(
            f"""
            CREATE OR REPLACE TABLE fts_postings AS
            SELECT t.termid::INTEGER AS termid, d.name::BIGINT AS chunk_id,
                   sum(CASE WHEN t.fieldid = 0 THEN 1.0 ELSE {HEADING_WEIGHT} END)::DOUBLE AS tf,
                   any_value(d.len)::DOUBLE AS len
            FROM {FTS_SCHEMA}.terms t JOIN {FTS_SCHEMA}.docs d USING (docid)
            GROUP BY t.termid, d.name
            ORDER BY termid, chunk_id
            """
        )
        # The index tables hold all a search reads; the input was a copy of every chunk's text.
        con.execute(f"DROP TABLE {FTS_INPUT}")
        con.execute("DELETE FROM fts_delta")
        con.execute("DELETE FROM fts_delta_docs")
        for key, value in (("fts_seq", str(mark)), ("fts_tokenizer", TOKENIZER_VERSION)):
            con.execute(
                "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [key, value],
            )
    for key in ("fts", "fts_terms", "fts_corpus"):
        db.cache.pop(key, None)
    db.rebuilds += 1
    return mark


def _drop_schema(con: Any, schema: str) -> None:
    """Drop an index schema entry by entry, then the schema itself.

    Within one process, DuckDB's catalog can lose the link from some of the extension's tables
    (``docs``, ``dict``, ``terms``) to their schema once it is checkpointed, so ``DROP SCHEMA ...
    CASCADE`` (and the extension's ``overwrite``) logs no drop for them: if the process then dies
    before the next checkpoint, the write-ahead log drops a schema that still holds tables and the
    file no longer opens. A drop of each entry by name is logged and replays.
    """
    tables = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND schema_name = ?",
        [CATALOG, schema],
    ).fetchall()
    macros = con.execute(
        "SELECT DISTINCT function_name, function_type FROM duckdb_functions() WHERE database_name = ? "
        "AND schema_name = ? AND function_type IN ('macro', 'table_macro')",
        [CATALOG, schema],
    ).fetchall()
    for name, kind in macros:
        con.execute(f'DROP {"MACRO TABLE" if kind == "table_macro" else "MACRO"} {schema}."{name}"')
    for (name,) in tables:
        con.execute(f'DROP TABLE {schema}."{name}"')
    con.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def needs_rebuild(db: Database) -> bool:
    if not index_exists(db):
        return True
    total, _, delta, _ = corpus_stats(db)
    return delta > 0 and delta >= max(DELTA_REBUILD_MIN, DELTA_REBUILD_FRACTION * total)


def ensure_fresh(db: Database) -> bool:
    """Make sure a search can run against current data; True if the snapshot was rebuilt."""
    if needs_rebuild(db):
        rebuild(db)
        return True
    return False


def _postings_sql(source: str) -> str:
    """SELECT (id, field, term, tf) of the rows of ``source`` (a relation with id, heading, text)."""
    return f"""
        SELECT id, field, stem(w, 'porter') AS term, count(*)::INTEGER AS tf
        FROM (
            SELECT id, 0::TINYINT AS field, unnest({FTS_SCHEMA}.tokenize({prepared("text")})) AS w
            FROM {source}
            UNION ALL
            SELECT id, 1::TINYINT, unnest({FTS_SCHEMA}.tokenize({prepared("heading")}))
            FROM {source}
        )
        WHERE w <> '' AND w NOT IN (SELECT sw FROM {FTS_SCHEMA}.stopwords)
        GROUP BY ALL
    """


def postings_of(db: Database, texts: list[tuple[str, str]]) -> Any:
    """The delta postings of chunks not written yet, ``(heading, text)`` each, as an Arrow table
    ``(id, field, term, tf)`` whose ``id`` is the chunk's position in ``texts``; None before
    the first snapshot. Computed on a cursor of its own, outside any lock, so that a writer's
    transaction only inserts them (:func:`add_delta`)."""
    import pyarrow as pa

    if not texts or not index_exists(db):
        return None
    with db.lock:
        con = db.con.cursor()
    try:
        con.execute(f"USE {CATALOG}")
        source = pa.table(
            {
                "id": pa.array(range(len(texts)), pa.int64()),
                "heading": pa.array([h for h, _ in texts], pa.string()),
                "text": pa.array([t for _, t in texts], pa.string()),
            }
        )
        con.register("_nbm_tokenize", source)
        return con.execute(_postings_sql("_nbm_tokenize")).to_arrow_table()
    finally:
        con.close()


def add_delta(db: Database, chunk_ids: list[int], postings: Any = None, fresh: bool = False) -> None:
    """Write delta postings for chunks just inserted or whose text changed.

    Must run inside the caller's transaction, after the chunks rows are written. ``postings``:
    what :func:`postings_of` gave for these chunks, in this order (else they are tokenized
    here). ``fresh``: the ids are new, so no older postings of theirs need deleting.
    """
    import pyarrow as pa

    if not chunk_ids:
        return
    if not index_exists(db):
        # The first write to a new store: a snapshot of (almost) nothing gives us the tokenizer.
        return
    db.cache.pop("fts_corpus", None)
    if not fresh:
        db.execute("DELETE FROM fts_delta WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))", [chunk_ids])
        db.execute("DELETE FROM fts_delta_docs WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))", [chunk_ids])
    if postings is None:
        db.execute(
            "INSERT INTO fts_delta " + _postings_sql("chunks WHERE id IN (SELECT unnest(?::BIGINT[]))"),
            [chunk_ids, chunk_ids],
        )
    else:
        ids = np.asarray(chunk_ids, dtype=np.int64)[postings.column("id").to_numpy()]
        postings = postings.set_column(0, "id", pa.array(ids, pa.int64()))
        db.with_arrow("_nbm_postings", postings, "INSERT INTO fts_delta SELECT * FROM _nbm_postings")
    # Every chunk gets a length row, 0 when it has no indexable term (only punctuation, only
    # stopwords, a script the tokenizer drops): the snapshot counts such documents too, and
    # doctor's coverage check relies on the row being there.
    db.execute(
        "INSERT INTO fts_delta_docs SELECT c.id, coalesce(sum(f.tf), 0)::INTEGER FROM chunks c "
        "LEFT JOIN fts_delta f ON f.chunk_id = c.id "
        "WHERE c.id IN (SELECT unnest(?::BIGINT[])) GROUP BY c.id",
        [chunk_ids],
    )


def query_terms(db: Database, query: str) -> list[str]:
    """The query's distinct stemmed terms, tokenized exactly as the index was.

    The query is tokenized here (:func:`python_tokens`; the index's stopwords dropped, then the
    Snowball Porter stemmer of libstemmer, the library the ``fts`` extension's ``stem`` uses):
    the same terms as the index's own macros without a SQL round trip per query
    (``tests/test_fts_tokenizer.py`` compares the two on every word of the bundled corpora and
    on text of many scripts). Text :func:`python_tokens` leaves to the index (CJK) goes through
    the index's macros.
    """
    if not index_exists(db):
        return []
    tokens = python_tokens(query)
    if tokens is None:
        return sql_query_terms(db, query)
    stop = _stopwords(db)
    words = {w for w in tokens if w and w not in stop}
    return sorted({t for t in _porter().stemWords(sorted(words)) if t})


def python_tokens(text: str) -> list[str] | None:
    """The index tokenizer's words of ``text`` before stopwords and stemming, made in Python; None
    where it would not be sure to agree, so the caller asks the index's own macros.

    The macros strip accents (utf8proc: canonical decomposition, every mark dropped, composed
    again), lower-case (utf8proc's one-character mapping) and split on ``TOKEN_IGNORE`` (what is
    not a letter, mark or decimal digit). Here: the same steps with ``unicodedata``, character by
    character (``str.lower`` of a whole string would write a final sigma ``ς``). None for text
    with a NUL, CJK characters (:func:`prepared` rewrites them as bigrams), a character this
    Python's Unicode tables do not know, or one whose lower case is longer than one character
    (a guard: ``İ``, the one such letter, is ``I`` once its dot is stripped).
    Cost: linear in the text; ASCII text is one regular-expression split.
    """
    if "\x00" in text:
        return None  # DuckDB's string functions read up to a NUL only
    if text.isascii():
        return _ASCII_SEPARATOR.split(text.lower())
    decomposed = unicodedata.normalize("NFD", text)
    stripped = unicodedata.normalize("NFC", "".join(c for c in decomposed if unicodedata.category(c)[0] != "M"))
    chars = []
    for c in stripped:
        low = c.lower()
        if len(low) != 1:
            return None
        category = unicodedata.category(low)
        if category == "Cn" or (category[0] in "LMN" and _cjk_like(low)):
            return None
        chars.append(low if category[0] in "LM" or category == "Nd" else " ")
    return "".join(chars).split()


def _cjk_like(char: str) -> bool:
    """Whether ``char`` may be in :data:`CJK`'s scripts: Hangul Jamo, or anything from the CJK
    radicals block (U+2E80) up, where those scripts are encoded (a few other scripts with them)."""
    code = ord(char)
    return code >= 0x2E80 or 0x1100 <= code <= 0x11FF


def sql_query_terms(db: Database, query: str) -> list[str]:
    """:func:`query_terms` through the index's own ``tokenize`` and ``stem`` macros."""
    if not index_exists(db):
        return []
    rows = db.fetchall(
        f"SELECT DISTINCT stem(w, 'porter') FROM "
        f"(SELECT unnest({FTS_SCHEMA}.tokenize({prepared('q')})) AS w FROM (SELECT ?::VARCHAR AS q)) "
        f"WHERE w <> '' AND w NOT IN (SELECT sw FROM {FTS_SCHEMA}.stopwords)",
        [query],
    )
    return sorted(r[0] for r in rows if r[0])


_ASCII_SEPARATOR = re.compile(r"[^a-z0-9]+")


def words_of_terms(query: str, terms: list[str]) -> dict[str, list[str]]:
    """The words of ``query`` behind each of its index ``terms`` (``kubernet`` -> ``["Kubernetes"]``),
    as written. ASCII words are stemmed as the index stems them; other words are matched by prefix."""
    found: dict[str, list[str]] = {t: [] for t in terms}
    for word in dict.fromkeys(re.findall(r"[^\W_]+", query)):
        lower = word.lower()
        if lower.isascii():
            term = _porter().stemWord(lower)
            if term in found:
                found[term].append(word)
        else:
            for term in found:
                if lower.startswith(term):
                    found[term].append(word)
    return found


def stems(words: list[str]) -> list[str]:
    """Each of ``words`` (lower case, accents stripped) as the index stems it."""
    return list(_porter().stemWords(words))


@functools.cache
def _porter() -> Any:
    import Stemmer  # PyStemmer: libstemmer's C stemmers

    return Stemmer.Stemmer("porter")


def _stopwords(db: Database) -> frozenset[str]:
    cached = db.cache.get("fts_stopwords")
    if isinstance(cached, frozenset):
        return cached
    words = frozenset(str(r[0]) for r in db.fetchall(f"SELECT sw FROM {FTS_SCHEMA}.stopwords"))
    db.cache["fts_stopwords"] = words
    return words


def _sql_strings(values: list[str]) -> str:
    return ", ".join("'" + v.replace("'", "''") + "'" for v in values)


def _term_stats(db: Database, terms: list[str]) -> list[tuple[str, int | None, int, int]]:
    """(term, snapshot term id, snapshot df, delta df) for each query term.

    The snapshot's dictionary only changes with rebuild(), so its entries are cached per
    open file; the delta is asked only when it holds anything.
    """
    cache: dict[str, tuple[int | None, int]] = db.cache.setdefault("fts_terms", {})  # type: ignore[assignment]
    missing = [t for t in terms if t not in cache]
    if missing:
        found = {
            term: (int(tid), int(df))
            for term, tid, df in db.fetchall(
                f"SELECT term, termid, df FROM {FTS_SCHEMA}.dict WHERE term IN ({_sql_strings(missing)})"
            )
        }
        if len(cache) > 200_000:
            cache.clear()
        for term in missing:
            cache[term] = found.get(term, (None, 0))
    delta_df: dict[str, int] = {}
    if corpus_stats(db)[2]:
        delta_df = dict(
            db.fetchall(
                f"SELECT term, count(DISTINCT chunk_id) FROM fts_delta WHERE term IN ({_sql_strings(terms)}) "
                "GROUP BY term"
            )
        )
    return [(t, cache[t][0], cache[t][1], int(delta_df.get(t, 0))) for t in terms]


def corpus_stats(db: Database) -> tuple[int, float, int, int]:
    """(snapshot docs, snapshot mean length, delta docs, delta total length), cached until a write."""
    cached = db.cache.get("fts_corpus")
    if isinstance(cached, tuple):
        return cached
    row = db.fetchone(
        f"SELECT (SELECT coalesce(max(num_docs), 0) FROM {FTS_SCHEMA}.stats), "
        f"(SELECT coalesce(max(avgdl), 0) FROM {FTS_SCHEMA}.stats), "
        "(SELECT count(*) FROM fts_delta_docs), (SELECT coalesce(sum(len), 0) FROM fts_delta_docs)"
    )
    assert row is not None
    stats = (int(row[0]), float(row[1]), int(row[2]), int(row[3]))
    db.cache["fts_corpus"] = stats
    return stats


def idf(n: float, df: float) -> float:
    """BM25's IDF of a term ``df`` of ``n`` documents hold (the fts extension's formula)."""
    return math.log((n - df + 0.5) / (df + 0.5) + 1.0)


def idfs(db: Database, terms: list[str]) -> tuple[dict[str, tuple[float, int]], float]:
    """``({term: (IDF, document frequency)}, IDF of a term no document holds)``.

    The same IDFs :func:`search` scores with (snapshot and delta counted together).
    """
    n_idx, _, n_delta, _ = corpus_stats(db)
    n = float(n_idx) + float(n_delta)
    table = {
        term: (idf(n, float(df_idx + df_delta)), int(df_idx + df_delta))
        for term, _, df_idx, df_delta in _term_stats(db, terms)
    }
    return table, idf(n, 0.0)


def search(
    db: Database,
    terms: list[str],
    limit: int,
    where: str = "TRUE",
    params: list[Any] | None = None,
    matched: dict[int, set[str]] | None = None,
) -> list[tuple[int, float]]:
    """Top ``limit`` (chunk id, BM25 score) for ``terms`` among chunks matching ``where``.

    When ``matched`` is given it is filled with the query terms each returned chunk holds.

    ``where`` is a condition on alias ``c`` (the chunks table). Filtering is exact: every
    posting of the query terms is scored, then filtered, then cut to ``limit``.
    Two queries: term statistics (document frequencies in the snapshot and the delta, corpus
    size and mean length), then scoring with the IDFs passed in as parameters.
    """
    if not terms or not index_exists(db):
        return []
    params = params or []
    stats = _term_stats(db, terms)
    n_idx, avgdl_idx, n_delta, len_delta = corpus_stats(db)
    n = float(n_idx) + float(n_delta)
    avgdl = max((float(n_idx) * float(avgdl_idx) + float(len_delta)) / max(n, 1.0), 1.0)
    term_idf = {term: idf(n, float(df_idx) + float(df_delta)) for term, _, df_idx, df_delta, *_ in stats}
    termids = [int(tid) for _, tid, *_ in stats if tid is not None]
    id_idf = [term_idf[term] for term, tid, *_ in stats if tid is not None]
    delta_terms = [term for term, _, _, df_delta, *_ in stats if df_delta]
    delta_idf = [term_idf[t] for t in delta_terms]
    parts: list[str] = []
    args: list[Any] = []
    norm = f"({K1} + 1) / (p.tf + {K1} * (1 - {B} + {B} * p.len / {avgdl!r}))"
    if termids:
        parts.append(
            f"""
            SELECT c.id AS chunk_id, sum(q.idf * p.tf * {norm}) AS score,
                   list('#' || p.termid::VARCHAR) AS held
            FROM fts_postings p
            JOIN (SELECT unnest(?::INTEGER[]) AS termid, unnest(?::DOUBLE[]) AS idf) q USING (termid)
            JOIN chunks c ON c.id = p.chunk_id
            WHERE p.termid IN ({", ".join(str(t) for t in termids)})
              AND c.seq <= ? AND c.deleted_at IS NULL AND ({where})
            GROUP BY c.id
            """
        )
        # Term ids are integers from the index itself: inlined, so the filter reaches the scan.
        args += [termids, id_idf, watermark(db), *params]
    if delta_terms:
        parts.append(
            f"""
            SELECT c.id AS chunk_id, sum(q.idf * p.tf * {norm}) AS score, list(p.term) AS held
            FROM (
                SELECT f.chunk_id, f.term,
                       sum(CASE WHEN f.field = 0 THEN f.tf ELSE {HEADING_WEIGHT} * f.tf END)::DOUBLE AS tf,
                       any_value(dd.len)::DOUBLE AS len
                FROM fts_delta f JOIN fts_delta_docs dd USING (chunk_id)
                WHERE f.term IN (SELECT unnest(?::VARCHAR[]))
                GROUP BY f.chunk_id, f.term
            ) p
            JOIN (SELECT unnest(?::VARCHAR[]) AS term, unnest(?::DOUBLE[]) AS idf) q USING (term)
            JOIN chunks c ON c.id = p.chunk_id
            WHERE c.deleted_at IS NULL AND ({where})
            GROUP BY c.id
            """
        )
        args += [delta_terms, delta_terms, delta_idf, *params]
    if not parts:
        return []
    sql = " UNION ALL ".join(f"({part})" for part in parts) + " ORDER BY score DESC, chunk_id LIMIT ?"
    rows = db.fetchall(sql, [*args, limit])
    if matched is not None:
        by_id = {f"#{tid}": term for term, tid, *_ in stats if tid is not None}
        for r in rows:
            matched.setdefault(int(r[0]), set()).update(by_id.get(t, t) for t in r[2])
    return [(int(r[0]), float(r[1])) for r in rows]


def corpus_size(db: Database) -> int:
    """Items the BM25 statistics count (snapshot and delta)."""
    n_idx, _, n_delta, _ = corpus_stats(db)
    return n_idx + n_delta
