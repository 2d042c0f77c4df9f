"""The reference the seed projects built: SQLite + FTS5 + sqlite-vec, fused with RRF.

Same chunks, same stored vectors and the same query embedder as the nbmemory run, so the
difference measured is the store and the search around the embedding.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from pathlib import Path

import apsw
import numpy as np
import sqlite_vec

RRF_K = 60
DEPTH = 50
_TOKEN = re.compile(r"\w+", re.UNICODE)


def fts5_query(text: str) -> str:
    """An FTS5 MATCH expression safe for any text: every word quoted, OR-ed together."""
    tokens = dict.fromkeys(t.lower() for t in _TOKEN.findall(text))
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in tokens)


class SqliteReference:
    """SQLite file with an FTS5 table (porter unicode61) and a sqlite-vec ``vec0`` table."""

    def __init__(self, path: str | Path, embedder, depth: int = DEPTH, rrf_k: int = RRF_K) -> None:  # type: ignore[no-untyped-def]
        self.path = str(path)
        self.embedder = embedder
        self.depth = depth
        self.rrf_k = rrf_k
        self.con = apsw.Connection(self.path)
        self.con.enable_load_extension(True)
        self.con.load_extension(sqlite_vec.loadable_path())
        self.con.enable_load_extension(False)
        self.con.execute("PRAGMA journal_mode = WAL")
        self.con.execute("PRAGMA synchronous = NORMAL")
        self.last_embed_ms = 0.0
        self.last_stage_ms: dict[str, float] = {}

    def build(self, texts: Sequence[str], vectors: np.ndarray, sources: Sequence[str] | None = None) -> None:
        dim = int(vectors.shape[1])
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        con = self.con
        con.execute(
            "CREATE TABLE chunks (id INTEGER PRIMARY KEY, source TEXT, text TEXT NOT NULL);"
            "CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content='chunks', content_rowid='id', "
            "tokenize='porter unicode61');"
            f"CREATE VIRTUAL TABLE chunks_vec USING vec0(embedding float[{dim}] distance_metric=cosine);"
        )
        with con:
            con.executemany(
                "INSERT INTO chunks (id, source, text) VALUES (?, ?, ?)",
                ((i + 1, sources[i] if sources else None, t) for i, t in enumerate(texts)),
            )
            con.execute("INSERT INTO chunks_fts (chunks_fts) VALUES ('rebuild')")
            con.executemany(
                "INSERT INTO chunks_vec (rowid, embedding) VALUES (?, ?)",
                ((i + 1, vectors[i].tobytes()) for i in range(len(texts))),
            )
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def bm25(self, query: str) -> list[int]:
        expr = fts5_query(query)
        if not expr:
            return []
        rows = self.con.execute(
            "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rank LIMIT ?",
            (expr, self.depth),
        )
        return [r[0] for r in rows]

    def knn(self, qvec: np.ndarray) -> list[int]:
        rows = self.con.execute(
            "SELECT rowid FROM chunks_vec WHERE embedding MATCH ? AND k = ? ORDER BY distance",
            (np.asarray(qvec, dtype=np.float32).tobytes(), self.depth),
        )
        return [r[0] for r in rows]

    def search(self, query: str, k: int = 10) -> list[int]:
        """Hybrid top-``k`` ids: query embedding, FTS5 and vec0 top ``depth``, RRF, hit texts."""
        t0 = time.perf_counter()
        qvec = self.embedder.embed_query(query)
        t1 = time.perf_counter()
        lexical = self.bm25(query)
        t2 = time.perf_counter()
        semantic = self.knn(qvec)
        t3 = time.perf_counter()
        scores: dict[int, float] = {}
        for ranking in (lexical, semantic):
            for rank, doc in enumerate(ranking, start=1):
                scores[doc] = scores.get(doc, 0.0) + 1.0 / (self.rrf_k + rank)
        top = sorted(scores, key=lambda d: (-scores[d], d))[:k]
        t4 = time.perf_counter()
        if top:
            marks = ",".join("?" * len(top))
            rows = {
                r[0]: r
                for r in self.con.execute(f"SELECT id, source, text FROM chunks WHERE id IN ({marks})", top)
            }
            self.last_hits = [rows[i] for i in top if i in rows]
        else:
            self.last_hits = []
        t5 = time.perf_counter()
        self.last_embed_ms = (t1 - t0) * 1000
        self.last_stage_ms = {
            "bm25": (t2 - t1) * 1000,
            "vector": (t3 - t2) * 1000,
            "rrf": (t4 - t3) * 1000,
            "hydrate": (t5 - t4) * 1000,
        }
        return top

    def close(self) -> None:
        self.con.close()
