"""The hybrid search pipeline: BM25 and vector retrieval, RRF fusion, hydration.

Each stage is a named step that records its output into a :class:`Trace`.
"""

from __future__ import annotations

import os
import re
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from nbmemory.errors import ConfigError
from nbmemory.items import Hit
from nbmemory.search.filters import Filters
from nbmemory.search.fusion import rrf
from nbmemory.search.trace import Stage, Trace
from nbmemory.store import fts, vectors
from nbmemory.store.db import Database

if TYPE_CHECKING:
    import polars as pl

    from nbmemory.embed.base import Embedder

RETRIEVERS = ("bm25", "vector")
SNIPPET_CHARS = 240
MAX_QUERY_CHARS = 4000


@dataclass
class PipelineConfig:
    """Knobs of the search pipeline.

    Parameters
    ----------
    retrievers:
        Which retrievers run; one alone gives a single-retriever search (for evaluation).
    depth:
        Candidates taken from each retriever; ``None`` means ``max(50, 3 * k)``.
    rrf_k:
        RRF constant.
    weights:
        Per-retriever RRF weights.
    """

    retrievers: tuple[str, ...] = RETRIEVERS
    depth: int | None = None
    rrf_k: int = 60
    weights: dict[str, float] = field(default_factory=lambda: {"bm25": 1.0, "vector": 1.0})

    def __post_init__(self) -> None:
        if not self.retrievers:
            raise ConfigError("at least one retriever is needed: bm25, vector or both")
        for name in self.retrievers:
            if name not in RETRIEVERS:
                raise ConfigError(f"retriever {name!r} is not one of {', '.join(RETRIEVERS)}")
        if self.depth is not None and self.depth <= 0:
            raise ConfigError(f"depth must be greater than 0, got {self.depth}")
        if self.rrf_k <= 0:
            raise ConfigError(f"rrf_k must be greater than 0, got {self.rrf_k}")


@dataclass
class SearchResult:
    """Hits, best first, plus the trace of how they were ranked."""

    query: str
    hits: list[Hit]
    trace: Trace

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.hits)

    def __len__(self) -> int:
        return len(self.hits)

    def __getitem__(self, i: int) -> Hit:
        return self.hits[i]

    @property
    def ids(self) -> list[int]:
        return [h.id for h in self.hits]

    def explain(self, top: int = 10) -> str:
        return self.trace.explain(top)

    def to_polars(self) -> pl.DataFrame:
        import polars as pl

        rows = []
        for rank, h in enumerate(self.hits, start=1):
            rows.append(
                {
                    "rank": rank,
                    "id": h.id,
                    "score": h.score,
                    "bm25_rank": h.ranks.get("bm25"),
                    "vector_rank": h.ranks.get("vector"),
                    "source": h.source,
                    "location": h.location,
                    "heading": h.heading,
                    "kind": h.kind,
                    "namespace": h.namespace,
                    "tags": h.tags,
                    "snippet": h.snippet,
                    "text": h.text,
                }
            )
        schema: dict[str, Any] = {
            "rank": pl.Int64,
            "id": pl.Int64,
            "score": pl.Float64,
            "bm25_rank": pl.Int64,
            "vector_rank": pl.Int64,
            "source": pl.Utf8,
            "location": pl.Utf8,
            "heading": pl.Utf8,
            "kind": pl.Utf8,
            "namespace": pl.Utf8,
            "tags": pl.List(pl.Utf8),
            "snippet": pl.Utf8,
            "text": pl.Utf8,
        }
        return pl.DataFrame(rows, schema=schema)


def snippet(text: str, query: str, width: int = SNIPPET_CHARS) -> str:
    """A window of ``text`` around the first query word it contains."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    words = [w for w in re.findall(r"\w{3,}", query.lower())]
    lower = flat.lower()
    positions = [p for p in (lower.find(w) for w in words) if p >= 0]
    start = max(0, min(positions) - width // 4) if positions else 0
    piece = flat[start : start + width]
    return ("…" if start > 0 else "") + piece + ("…" if start + width < len(flat) else "")


_EMBED_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nbmemory-embed")
OVERLAP_EMBEDDING = (os.cpu_count() or 1) > 2


def _timed_embed(embedder: Embedder, query: str) -> tuple[np.ndarray, float]:
    t0 = time.perf_counter()
    vec = embedder.embed_query(query)
    return vec, (time.perf_counter() - t0) * 1000


class SearchPipeline:
    """Runs one hybrid search over a :class:`Database` with an :class:`Embedder`."""

    def __init__(self, db: Database, embedder: Embedder, config: PipelineConfig | None = None):
        self.db = db
        self.embedder = embedder
        self.config = config or PipelineConfig()

    def run(self, query: str, k: int = 10, filters: Filters | None = None) -> SearchResult:
        if k <= 0:
            raise ConfigError(f"k must be greater than 0, got {k}")
        if not query or not query.strip():
            raise ConfigError("the query is empty: type some words to search for")
        query = query[:MAX_QUERY_CHARS]
        filters = filters or Filters()
        config = self.config
        trace = Trace(query)
        depth = config.depth or max(50, 3 * k)
        where, params = filters.sql()
        rankings: dict[str, list[int]] = {}
        raw: dict[str, dict[int, float]] = {}

        # With cores to spare the query embedding (torch, outside the GIL) runs while BM25 runs
        # in DuckDB; on 2 cores the two slow each other down (measured: 13 ms -> 23-33 ms).
        pending_vec: Future[tuple[np.ndarray, float]] | None = None
        if "vector" in config.retrievers:
            if OVERLAP_EMBEDDING:
                pending_vec = _EMBED_POOL.submit(_timed_embed, self.embedder, query)
            else:
                pending_vec = Future()
                pending_vec.set_result(_timed_embed(self.embedder, query))

        if "bm25" in config.retrievers:
            t0 = time.perf_counter()
            rebuilt = fts.ensure_fresh(self.db)
            terms = fts.query_terms(self.db, query)
            found = fts.search(self.db, terms, depth, where, params)
            stage = trace.add(Stage("bm25", [i for i, _ in found], dict(found)))
            stage.notes = {"terms": terms, "index_rebuilt": rebuilt}
            stage.ms = (time.perf_counter() - t0) * 1000
            rankings["bm25"] = stage.output
            raw["bm25"] = stage.scores

        if pending_vec is not None:
            t0 = time.perf_counter()
            qvec, embed_ms = pending_vec.result()
            found_v, plan = vectors.search(
                self.db, qvec, depth, self.embedder.dim, None if filters.empty else where, params
            )
            sims = {i: 1.0 - d for i, d in found_v}
            stage = trace.add(Stage("vector", [i for i, _ in found_v], sims))
            stage.notes = {"method": plan.method, "embed_ms": round(embed_ms, 2)}
            if plan.matching_rows is not None:
                stage.notes["matching_rows"] = plan.matching_rows
            # Waiting for the embedding counts only where it was not hidden behind BM25.
            stage.ms = (time.perf_counter() - t0) * 1000
            stage.notes["search_ms"] = round(stage.ms, 2)
            rankings["vector"] = stage.output
            raw["vector"] = sims

        t0 = time.perf_counter()
        fused = rrf(rankings, k=config.rrf_k, weights=config.weights)[:k]
        stage = trace.add(Stage("rrf", [i for i, _ in fused], dict(fused)))
        stage.notes = {"k": config.rrf_k, "weights": dict(config.weights)}
        ranks = {name: {doc: r for r, doc in enumerate(ids, start=1)} for name, ids in rankings.items()}
        stage.detail = {
            doc: ", ".join(
                f"{name} #{ranks[name][doc]}" if doc in ranks[name] else f"{name} -" for name in rankings
            )
            for doc in stage.output
        }
        stage.ms = (time.perf_counter() - t0) * 1000

        t0 = time.perf_counter()
        hits = self._hydrate(fused, query, ranks, raw)
        trace.add(Stage("hydrate", [h.id for h in hits], ms=(time.perf_counter() - t0) * 1000))
        return SearchResult(query, hits, trace)

    def _hydrate(
        self,
        fused: list[tuple[int, float]],
        query: str,
        ranks: dict[str, dict[int, int]],
        raw: dict[str, dict[int, float]],
    ) -> list[Hit]:
        if not fused:
            return []
        ids = [i for i, _ in fused]
        rows = self.db.fetchall(
            "SELECT id, text, source, kind, namespace, heading, cell_id, cell_index, line_start, "
            "line_end, tags, importance, updated_at FROM chunks "
            "WHERE id IN (SELECT unnest(?::BIGINT[])) AND deleted_at IS NULL",
            [ids],
        )
        by_id: dict[int, tuple[Any, ...]] = {int(r[0]): r for r in rows}
        hits = []
        for doc, score in fused:
            row = by_id.get(doc)
            if row is None:
                continue
            (_, text, source, kind, ns, heading, cell_id, cell_index, ls, le, tags, imp, updated) = row
            hits.append(
                Hit(
                    id=doc,
                    score=score,
                    text=text,
                    snippet=snippet(text, query),
                    source=source,
                    kind=kind,
                    namespace=ns,
                    heading=heading or "",
                    cell_id=cell_id,
                    cell_index=cell_index,
                    line_start=ls,
                    line_end=le,
                    tags=list(tags or []),
                    importance=float(imp),
                    updated_at=updated,
                    ranks={n: r[doc] for n, r in ranks.items() if doc in r},
                    retriever_scores={n: s[doc] for n, s in raw.items() if doc in s},
                )
            )
        return hits
