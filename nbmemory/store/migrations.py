"""Numbered, named schema migrations, applied in order and recorded in the file."""

from __future__ import annotations

from collections.abc import Callable

import duckdb

Migration = Callable[[duckdb.DuckDBPyConnection], None]

LINK_TYPES = ("similar", "related", "contradicts", "extends", "supersedes", "caused_by", "temporal")


def m001_create_tables(con: duckdb.DuckDBPyConnection) -> None:
    link_types = ", ".join(f"'{t}'" for t in LINK_TYPES)
    con.execute(
        f"""
        CREATE SEQUENCE doc_ids START 1;
        CREATE SEQUENCE chunk_ids START 1;
        CREATE SEQUENCE chunk_seq START 1;
        CREATE SEQUENCE link_ids START 1;
        CREATE SEQUENCE search_ids START 1;
        CREATE TABLE documents (
            id BIGINT PRIMARY KEY,
            namespace VARCHAR NOT NULL,
            path VARCHAR NOT NULL,
            kind VARCHAR NOT NULL,
            content_hash VARCHAR NOT NULL,
            mtime DOUBLE,
            size BIGINT,
            indexed_at TIMESTAMP NOT NULL,
            forgotten_at TIMESTAMP,
            UNIQUE (namespace, path)
        );
        CREATE TABLE chunks (
            id BIGINT PRIMARY KEY,
            doc_id BIGINT,
            namespace VARCHAR NOT NULL,
            kind VARCHAR NOT NULL,
            source VARCHAR,
            ordinal INTEGER NOT NULL DEFAULT 0,
            text VARCHAR NOT NULL,
            heading VARCHAR NOT NULL DEFAULT '',
            cell_id VARCHAR,
            cell_index INTEGER,
            line_start INTEGER,
            line_end INTEGER,
            content_hash VARCHAR NOT NULL,
            tags VARCHAR[] NOT NULL DEFAULT [],
            importance DOUBLE NOT NULL DEFAULT 0.5,
            pinned BOOLEAN NOT NULL DEFAULT false,
            access_count BIGINT NOT NULL DEFAULT 0,
            retrieval_count BIGINT NOT NULL DEFAULT 0,
            last_accessed_at TIMESTAMP,
            last_retrieved_at TIMESTAMP,
            created_at TIMESTAMP NOT NULL,
            updated_at TIMESTAMP NOT NULL,
            deleted_at TIMESTAMP,
            deleted_reason VARCHAR,
            seq BIGINT NOT NULL
        );
        CREATE TABLE links (
            id BIGINT PRIMARY KEY,
            src BIGINT NOT NULL,
            dst BIGINT NOT NULL,
            type VARCHAR NOT NULL CHECK (type IN ({link_types})),
            note VARCHAR,
            created_at TIMESTAMP NOT NULL,
            UNIQUE (src, dst, type)
        );
        CREATE TABLE search_log (
            id BIGINT PRIMARY KEY,
            searched_at TIMESTAMP NOT NULL,
            query VARCHAR NOT NULL,
            filters VARCHAR,
            k INTEGER,
            hit_ids BIGINT[],
            latency_ms DOUBLE
        );
        -- Postings of chunks written since the last FTS build, so search is never stale.
        CREATE TABLE fts_delta (chunk_id BIGINT NOT NULL, field TINYINT NOT NULL,
                                term VARCHAR NOT NULL, tf INTEGER NOT NULL);
        CREATE TABLE fts_delta_docs (chunk_id BIGINT PRIMARY KEY, len INTEGER NOT NULL);
        """
    )


def m002_request_keys(con: duckdb.DuckDBPyConnection) -> None:
    # A client that retries a write after its owner died must not store it twice.
    con.execute(
        "CREATE TABLE request_keys (key VARCHAR PRIMARY KEY, result VARCHAR NOT NULL, "
        "created_at TIMESTAMP NOT NULL)"
    )


def m003_model_versions(con: duckdb.DuckDBPyConnection) -> None:
    # Tuned models (nbmemory.tune): every version with its gate scores; one is active.
    con.execute(
        """
        CREATE TABLE model_versions (
            version VARCHAR PRIMARY KEY,
            model VARCHAR NOT NULL,
            base_model VARCHAR,
            fingerprint VARCHAR,
            status VARCHAR NOT NULL CHECK (status IN ('base', 'adopted', 'refused')),
            active BOOLEAN NOT NULL DEFAULT false,
            created_at TIMESTAMP NOT NULL,
            scores VARCHAR,
            note VARCHAR
        )
        """
    )


def m004_chunk_page(con: duckdb.DuckDBPyConnection) -> None:
    # A PDF chunk's location is its page (1-based), shown as ``file.pdf#page=3``.
    con.execute("ALTER TABLE chunks ADD COLUMN IF NOT EXISTS page INTEGER")


def m005_passages(con: duckdb.DuckDBPyConnection) -> None:
    # Vectors of windows inside a chunk (nbmemory.store.passages), by chunk content and model:
    # derived data, shared by chunks of the same content, kept per model fingerprint.
    con.execute(
        """
        CREATE TABLE IF NOT EXISTS passages (
            content_hash VARCHAR NOT NULL,
            fingerprint VARCHAR NOT NULL,
            n INTEGER NOT NULL,
            vec FLOAT[] NOT NULL
        )
        """
    )


def m006_roots(con: duckdb.DuckDBPyConnection) -> None:
    # The folders a user indexed: what the live indexer keeps current (nbmemory.live).
    con.execute(
        """
        CREATE TABLE IF NOT EXISTS roots (
            path VARCHAR NOT NULL,
            namespace VARCHAR NOT NULL,
            added_at TIMESTAMP NOT NULL,
            PRIMARY KEY (path, namespace)
        )
        """
    )


def m007_chunk_event(con: duckdb.DuckDBPyConnection) -> None:
    # A conversation turn: when it was said (not stored), by whom, in which conversation.
    con.execute("ALTER TABLE chunks ADD COLUMN IF NOT EXISTS event_at TIMESTAMP")
    con.execute("ALTER TABLE chunks ADD COLUMN IF NOT EXISTS speaker VARCHAR")
    con.execute("ALTER TABLE chunks ADD COLUMN IF NOT EXISTS conversation VARCHAR")


MIGRATIONS: list[tuple[int, str, Migration]] = [
    (1, "m001_create_tables", m001_create_tables),
    (2, "m002_request_keys", m002_request_keys),
    (3, "m003_model_versions", m003_model_versions),
    (4, "m004_chunk_page", m004_chunk_page),
    (5, "m005_passages", m005_passages),
    (6, "m006_roots", m006_roots),
    (7, "m007_chunk_event", m007_chunk_event),
]

SCHEMA_VERSION = MIGRATIONS[-1][0]
