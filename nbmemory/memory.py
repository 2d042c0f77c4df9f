"""The Memory facade: the one entry point for the CLI, magics, widgets and server."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np

from nbmemory.config import Settings
from nbmemory.embed.base import Embedder
from nbmemory.errors import ConfigError, ModelMismatchError, NotFoundError
from nbmemory.ingest.indexer import Indexer, IndexReport
from nbmemory.ingest.redact import redact
from nbmemory.items import ITEM_COLUMNS, Hit, Item
from nbmemory.search.filters import Filters, parse_when
from nbmemory.search.pipeline import PipelineConfig, SearchPipeline, SearchResult
from nbmemory.store import chunks as chunk_rows
from nbmemory.store import fts, vectors
from nbmemory.store.db import Database, utcnow
from nbmemory.store.migrations import LINK_TYPES

ModelPolicy = Literal["reembed", "error", "defer"]
# Bulk deletes past this many rows compact the HNSW graph (DESIGN.md, note 4).
COMPACT_AFTER_DELETES = 500
# Searches whose counter updates and log rows are written together (see _record_search).
LOG_FLUSH_EVERY = 16


@dataclass
class Check:
    """One ``doctor`` finding."""

    name: str
    ok: bool
    detail: str
    repaired: bool = False


@dataclass
class DoctorReport:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok or c.repaired for c in self.checks)

    def summary(self) -> str:
        lines = []
        for c in self.checks:
            mark = "ok " if c.ok else ("fixed" if c.repaired else "FAIL")
            lines.append(f"[{mark:>5}] {c.name}: {c.detail}")
        return "\n".join(lines)


class Memory:
    """A personal memory in one DuckDB file.

    Parameters
    ----------
    path:
        The memory file; default ``$NBMEMORY_HOME/memory.duckdb`` (``~/.nbmemory``).
    model:
        Sentence-transformers model name or local folder; default the bundled all-MiniLM-L6-v2.
    embedder:
        An :class:`~nbmemory.embed.Embedder` to use instead of loading ``model``.
    namespace:
        Namespace for writes when none is given.
    on_model_change:
        What to do when the file's vectors come from another model: ``"reembed"`` (default,
        re-embeds every item with the new model), ``"error"`` (raise
        :class:`ModelMismatchError`) or ``"defer"`` (open anyway; searching raises until
        :meth:`reembed` or ``doctor(repair=True)`` runs).
    progress:
        Show progress bars on stderr for long runs.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        model: str | None = None,
        embedder: Embedder | None = None,
        namespace: str | None = None,
        settings: Settings | None = None,
        on_model_change: ModelPolicy = "reembed",
        progress: bool = False,
        pipeline: PipelineConfig | None = None,
    ) -> None:
        settings = (settings or Settings()).override(path, model, namespace)
        if on_model_change not in ("reembed", "error", "defer"):
            raise ConfigError(f"on_model_change must be reembed, error or defer, not {on_model_change!r}")
        self.settings = settings
        self.on_model_change = on_model_change
        self.show_progress = progress
        self.pipeline_config = pipeline or PipelineConfig(rrf_k=settings.rrf_k)
        self.db = Database(settings.db_path)
        self._embedder = embedder
        self._model_checked = False
        self._model_mismatch: str | None = None
        self._pending_log: list[tuple[datetime, str, str | None, int, list[int], float]] = []
        if not fts.index_exists(self.db):
            fts.rebuild(self.db)

    # -- lifecycle --------------------------------------------------------------------------
    def close(self) -> None:
        self.flush()
        self.db.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def path(self) -> Path:
        return self.settings.db_path

    @property
    def embedder(self) -> Embedder:
        """The embedder, loaded on first use and checked against the file's model."""
        if self._embedder is None:
            from nbmemory.embed.sentence import SentenceTransformerEmbedder

            self._embedder = SentenceTransformerEmbedder(self.settings.model, device=self.settings.device)
        if not self._model_checked:
            self._check_model(self._embedder)
        return self._embedder

    def _check_model(self, embedder: Embedder) -> None:
        stored = self.db.get_meta("model_fingerprint")
        if stored is None:
            with self.db.transaction():
                vectors.ensure_table(self.db, embedder.dim)
                self.db.set_meta("model_fingerprint", embedder.fingerprint)
                self.db.set_meta("model_name", embedder.name)
                self.db.set_meta("model_dim", embedder.dim)
            vectors.create_index(self.db)
        elif stored == embedder.fingerprint:
            # A load killed while the index was dropped (vectors.bulk_load) left none: rebuild.
            vectors.ensure_index(self.db)
        else:
            name = self.db.get_meta("model_name")
            message = (
                f"memory file {self.path} holds vectors from model {name!r} "
                f"({stored}); the current model is {embedder.name!r} ({embedder.fingerprint})"
            )
            if self.on_model_change == "error":
                raise ModelMismatchError(
                    message + ": pass on_model_change='reembed' or run `nbmemory doctor --repair`"
                )
            if self.on_model_change == "defer":
                self._model_checked = True
                self._model_mismatch = message
                return
            self._log(message + ": re-embedding every item")
            self._reembed(embedder)
        self._model_checked = True
        self._model_mismatch = None

    def _require_model_match(self) -> Embedder:
        embedder = self.embedder
        if self._model_mismatch:
            raise ModelMismatchError(
                f"{self._model_mismatch}: run Memory.reembed() or `nbmemory doctor --repair` first"
            )
        return embedder

    def _log(self, message: str) -> None:
        if self.show_progress:
            print(message, file=sys.stderr)

    def _progress_bar(self, total: int, desc: str) -> Any:
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, disable=not self.show_progress, file=sys.stderr, leave=False)

    # -- ingest -----------------------------------------------------------------------------
    def index(
        self,
        *paths: str | os.PathLike[str],
        namespace: str | None = None,
        progress: Callable[[int, int, str], None] | None = None,
    ) -> IndexReport:
        """Index files and folders (markdown, notebooks, code, text), incrementally.

        Unchanged files are skipped by mtime and size, then by content hash; removed files
        lose their chunks; bad files are skipped with a message in ``report.skipped``.
        """
        if not paths:
            raise ConfigError("index needs at least one file or folder")
        embedder = self._require_model_match()
        bar = None
        if progress is None and self.show_progress:
            bar = self._progress_bar(0, "indexing")

            def progress(done: int, total: int, path: str) -> None:
                bar.total = total
                bar.n = done
                bar.refresh()

        indexer = Indexer(
            self.db, embedder, int(self.settings.max_file_mb * 1e6), progress=progress, log=self._log
        )
        try:
            report = indexer.run(paths, namespace or self.settings.namespace)
        finally:
            if bar is not None:
                bar.close()
        self._after_bulk_write(report.chunks_added + report.chunks_removed, report.chunks_removed)
        return report

    def _after_bulk_write(self, written: int, deleted: int) -> None:
        if written:
            fts.ensure_fresh(self.db)
        if deleted >= COMPACT_AFTER_DELETES:
            vectors.compact_index(self.db)

    # -- memory operations -----------------------------------------------------------------
    def remember(
        self,
        text: str,
        *,
        tags: Sequence[str] = (),
        importance: float = 0.5,
        namespace: str | None = None,
        source: str | None = None,
        heading: str = "",
        request_key: str | None = None,
    ) -> Item:
        """Store a piece of text; it is found by the very next search.

        ``request_key`` makes the call idempotent: a retry with the same key (a client whose
        owner died after committing) returns the item stored the first time.
        """
        if request_key is not None:
            earlier = self._answered(request_key)
            if earlier is not None:
                return self.get(int(earlier), touch=False)
        if not text or not text.strip():
            raise ConfigError("nothing to remember: the text is empty")
        if not 0.0 <= importance <= 1.0:
            raise ConfigError(f"importance must be between 0 and 1, got {importance}")
        embedder = self._require_model_match()
        clean = redact(text.strip())
        row = chunk_rows.NewChunk(
            namespace=namespace or self.settings.namespace,
            kind="memory",
            text=clean.text,
            heading=redact(heading).text,
            source=source,
            tags=_clean_tags(tags),
            importance=importance,
        )
        vec = embedder.embed_documents([chunk_rows.embedding_text(row.heading, row.text)])
        with self.db.transaction():
            (new_id,) = chunk_rows.insert(self.db, [row], vec, utcnow())
            self._record_answer(request_key, str(new_id))
        return self.get(new_id, touch=False)

    def _answered(self, request_key: str) -> str | None:
        row = self.db.fetchone("SELECT result FROM request_keys WHERE key = ?", [request_key])
        return None if row is None else str(row[0])

    def _record_answer(self, request_key: str | None, result: str) -> None:
        if request_key is not None:
            self.db.execute(
                "INSERT INTO request_keys VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                [request_key, result, utcnow()],
            )

    def remember_many(
        self,
        texts: Sequence[str],
        *,
        tags: Sequence[str] = (),
        importance: float = 0.5,
        namespace: str | None = None,
        sources: Sequence[str | None] | None = None,
        headings: Sequence[str] | None = None,
        batch_size: int = 512,
        progress: Callable[[int], None] | None = None,
        request_key: str | None = None,
    ) -> list[int]:
        """Store many texts at once (batched embedding, one transaction per batch).

        Returns the new ids in input order. Empty texts are rejected before anything is written.
        With ``request_key``, a retried call skips the batches already committed.
        """
        if sources is not None and len(sources) != len(texts):
            raise ConfigError(f"sources has {len(sources)} entries for {len(texts)} texts")
        if headings is not None and len(headings) != len(texts):
            raise ConfigError(f"headings has {len(headings)} entries for {len(texts)} texts")
        for i, text in enumerate(texts):
            if not text or not text.strip():
                raise ConfigError(f"text {i} is empty: nothing was stored")
        if not 0.0 <= importance <= 1.0:
            raise ConfigError(f"importance must be between 0 and 1, got {importance}")
        self._require_model_match()
        ns = namespace or self.settings.namespace
        clean_tags = _clean_tags(tags)
        with vectors.bulk_load(self.db, vectors.is_bulk(self.db, len(texts))):
            ids = self._remember_batches(
                texts, ns, clean_tags, importance, sources, headings, batch_size, progress, request_key
            )
        self._after_bulk_write(len(ids), 0)
        return ids

    def _remember_batches(
        self,
        texts: Sequence[str],
        ns: str,
        clean_tags: list[str],
        importance: float,
        sources: Sequence[str | None] | None,
        headings: Sequence[str] | None,
        batch_size: int,
        progress: Callable[[int], None] | None,
        request_key: str | None = None,
    ) -> list[int]:
        embedder = self._require_model_match()
        ids: list[int] = []
        for start in range(0, len(texts), batch_size):
            batch_key = f"{request_key}:{start}" if request_key else None
            if batch_key is not None:
                earlier = self._answered(batch_key)
                if earlier is not None:
                    ids += [int(i) for i in earlier.split(",")]
                    continue
            rows = [
                chunk_rows.NewChunk(
                    namespace=ns,
                    kind="memory",
                    text=redact(texts[i].strip()).text,
                    heading=redact(headings[i]).text if headings else "",
                    source=sources[i] if sources else None,
                    tags=clean_tags,
                    importance=importance,
                )
                for i in range(start, min(start + batch_size, len(texts)))
            ]
            vecs = embedder.embed_documents([chunk_rows.embedding_text(r.heading, r.text) for r in rows])
            with self.db.transaction():
                new_ids = chunk_rows.insert(self.db, rows, vecs, utcnow())
                self._record_answer(batch_key, ",".join(map(str, new_ids)))
            ids += new_ids
            if progress is not None:
                progress(len(rows))
        return ids

    def get(self, item_id: int, *, touch: bool = True, include_forgotten: bool = False) -> Item:
        """Read one item; counts as an access unless ``touch=False``."""
        self.flush()
        row = self.db.fetchone(f"SELECT {ITEM_COLUMNS} FROM chunks WHERE id = ?", [int(item_id)])
        if row is None or (row[-1] is not None and not include_forgotten):
            raise NotFoundError(f"no item with id {item_id}" + (" (it was forgotten)" if row else ""))
        if touch:
            self.db.execute(
                "UPDATE chunks SET access_count = access_count + 1, last_accessed_at = ? WHERE id = ?",
                [utcnow(), int(item_id)],
            )
        return Item.from_row(row)

    def update(
        self,
        item_id: int,
        *,
        text: str | None = None,
        tags: Sequence[str] | None = None,
        importance: float | None = None,
        pinned: bool | None = None,
    ) -> Item:
        """Change an item's text, tags, importance or pin; new text is re-embedded and indexed."""
        item = self.get(item_id, touch=False)
        now = utcnow()
        with self.db.transaction():
            if tags is not None:
                self.db.execute(
                    "UPDATE chunks SET tags = ?, updated_at = ? WHERE id = ?",
                    [_clean_tags(tags), now, item.id],
                )
            if importance is not None:
                if not 0.0 <= importance <= 1.0:
                    raise ConfigError(f"importance must be between 0 and 1, got {importance}")
                self.db.execute(
                    "UPDATE chunks SET importance = ?, updated_at = ? WHERE id = ?",
                    [importance, now, item.id],
                )
            if pinned is not None:
                self.db.execute("UPDATE chunks SET pinned = ? WHERE id = ?", [pinned, item.id])
            if text is not None and text.strip() and text.strip() != item.text:
                clean = redact(text.strip()).text
                embedder = self._require_model_match()
                vec = embedder.embed_documents([chunk_rows.embedding_text(item.heading, clean)])
                self.db.execute(
                    "UPDATE chunks SET text = ?, content_hash = ?, updated_at = ?, "
                    "seq = nextval('chunk_seq') WHERE id = ?",
                    [clean, chunk_rows.content_hash(item.heading, clean), now, item.id],
                )
                vectors.put(self.db, [item.id], vec)
                fts.add_delta(self.db, [item.id])
        return self.get(item.id, touch=False)

    def forget(
        self,
        item_id: int | Iterable[int] | None = None,
        *,
        query: str | None = None,
        k: int = 1,
        path: str | None = None,
        namespace: str | None = None,
    ) -> list[int]:
        """Forget items by id, by the top ``k`` hits of ``query``, or by source ``path`` (a glob).

        Forgotten items are soft-deleted (the row records when and why) and never returned by
        search again; a forgotten file is not re-indexed. Returns the ids forgotten.
        """
        given = sum(x is not None for x in (item_id, query, path))
        if given != 1:
            raise ConfigError("forget needs exactly one of: an id, query=..., path=...")
        now = utcnow()
        if item_id is not None:
            ids = [int(item_id)] if isinstance(item_id, (int, np.integer)) else [int(i) for i in item_id]
            missing = set(ids) - {
                int(r[0])
                for r in self.db.fetchall(
                    "SELECT id FROM chunks WHERE id IN (SELECT unnest(?::BIGINT[]))", [ids]
                )
            }
            if missing:
                raise NotFoundError(f"no item with id {', '.join(map(str, sorted(missing)))}")
            reason = "id"
        elif query is not None:
            ids = self.search(query, k=k, namespace=namespace, log=False).ids
            reason = f"query: {query[:200]}"
        else:
            assert path is not None
            pattern = str(Path(path).expanduser().absolute()) if not any(c in path for c in "*?[") else path
            where = "(source = ? OR source GLOB ?)"
            params: list[Any] = [pattern, pattern]
            if namespace is not None:
                where += " AND namespace = ?"
                params.append(namespace)
            ids = [
                int(r[0])
                for r in self.db.fetchall(
                    f"SELECT id FROM chunks WHERE {where} AND deleted_at IS NULL", params
                )
            ]
            reason = f"path: {path}"
        with self.db.transaction():
            count = chunk_rows.soft_delete(self.db, ids, reason, now)
            if path is not None:
                self.db.execute(
                    "UPDATE documents SET forgotten_at = ? WHERE path = ? OR path GLOB ?",
                    [now, pattern, pattern],
                )
        if count >= COMPACT_AFTER_DELETES:
            vectors.compact_index(self.db)
        return ids if count else []

    def link(self, src: int, dst: int, type: str = "related", note: str | None = None) -> None:
        """Record a typed link ``src -> dst`` (similar, related, contradicts, extends,
        supersedes, caused_by, temporal)."""
        if type not in LINK_TYPES:
            raise ConfigError(f"link type {type!r} is not one of {', '.join(LINK_TYPES)}")
        if src == dst:
            raise ConfigError("an item cannot link to itself")
        self.get(src, touch=False)
        self.get(dst, touch=False)
        (link_id,) = chunk_rows.allocate(self.db, "link_ids", 1)
        self.db.execute(
            "INSERT INTO links VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            [link_id, src, dst, type, note, utcnow()],
        )

    def links(self, item_id: int) -> list[dict[str, Any]]:
        """Links from and to an item."""
        rows = self.db.fetchall(
            "SELECT src, dst, type, note, created_at FROM links WHERE src = ? OR dst = ? ORDER BY created_at",
            [item_id, item_id],
        )
        return [dict(zip(("src", "dst", "type", "note", "created_at"), r, strict=True)) for r in rows]

    def related(self, item_id: int, k: int = 5) -> list[Hit]:
        """Items most similar to ``item_id`` by vector, plus those it links to."""
        embedder = self._require_model_match()
        item = self.get(item_id, touch=False)
        vec = vectors.get(self.db, [item.id]).get(item.id)
        if vec is None:
            raise NotFoundError(f"item {item_id} has no vector: run `nbmemory doctor --repair`")
        found, _ = vectors.search(self.db, vec, k + 1, embedder.dim)
        ids = [i for i, _ in found if i != item.id][:k]
        linked = [r["dst"] if r["src"] == item.id else r["src"] for r in self.links(item.id)]
        ids += [i for i in linked if i not in ids]
        sims = {i: 1.0 - d for i, d in found}
        pipeline = SearchPipeline(self.db, embedder, self.pipeline_config)
        hits = pipeline._hydrate(
            [(i, sims.get(i, 0.0)) for i in ids],
            item.text,
            {"vector": {i: r for r, i in enumerate(ids, 1)}},
            {"vector": sims},
        )
        return hits

    # -- search -----------------------------------------------------------------------------
    def search(
        self,
        query: str,
        k: int = 10,
        *,
        namespace: str | None = None,
        kind: str | Sequence[str] | None = None,
        path: str | None = None,
        tags: Sequence[str] = (),
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        config: PipelineConfig | None = None,
        log: bool = True,
    ) -> SearchResult:
        """Hybrid search: BM25 and vector retrieval fused with RRF.

        Filters restrict the results exactly (a filter matching 1 % of items still yields
        ``k`` hits when ``k`` exist). Returned items have their retrieval counters raised.
        """
        started = time.perf_counter()
        kinds = (kind,) if isinstance(kind, str) else tuple(kind or ())
        filters = Filters(
            namespace=namespace,
            kinds=kinds,
            path=path,
            tags=tuple(tags),
            since=parse_when(since),
            until=parse_when(until),
        )
        embedder = self._require_model_match()
        result = SearchPipeline(self.db, embedder, config or self.pipeline_config).run(query, k, filters)
        if log:
            self._record_search(result, filters, k, (time.perf_counter() - started) * 1000)
        return result

    def _record_search(self, result: SearchResult, filters: Filters, k: int, ms: float) -> None:
        # Buffered: a commit per search costs more than the search; counters and the log are
        # written in one transaction every LOG_FLUSH_EVERY searches, before any read of them,
        # and on close. A killed process loses at most that many log rows, never an item.
        entry = (utcnow(), result.query, repr(filters) if not filters.empty else None, k, result.ids, ms)
        self._pending_log.append(entry)
        if len(self._pending_log) >= LOG_FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        """Write buffered retrieval counters and search-log rows."""
        pending, self._pending_log = self._pending_log, []
        if not pending:
            return
        counts: dict[int, tuple[int, datetime]] = {}
        for at, _, _, _, ids, _ in pending:
            for i in ids:
                counts[i] = (counts.get(i, (0, at))[0] + 1, at)
        log_ids = chunk_rows.allocate(self.db, "search_ids", len(pending))
        with self.db.transaction():
            if counts:
                import pyarrow as pa

                table = pa.table(
                    {
                        "id": pa.array(list(counts), pa.int64()),
                        "n": pa.array([c for c, _ in counts.values()], pa.int64()),
                        "at": pa.array([a for _, a in counts.values()], pa.timestamp("us")),
                    }
                )
                self.db.with_arrow(
                    "_nbm_counts",
                    table,
                    "UPDATE chunks SET retrieval_count = retrieval_count + t.n, last_retrieved_at = t.at "
                    "FROM _nbm_counts t WHERE chunks.id = t.id",
                )
            self.db.con.executemany(
                "INSERT INTO search_log VALUES (?, ?, ?, ?, ?, ?, ?)",
                [[log_id, *entry] for log_id, entry in zip(log_ids, pending, strict=True)],
            )

    # -- maintenance ------------------------------------------------------------------------
    def reembed(self) -> int:
        """Re-embed every live item with the current model (after a model change)."""
        from nbmemory.embed.sentence import SentenceTransformerEmbedder

        embedder = self._embedder or SentenceTransformerEmbedder(
            self.settings.model, device=self.settings.device
        )
        self._embedder = embedder
        count = self._reembed(embedder)
        self._model_checked = True
        self._model_mismatch = None
        return count

    def _reembed(self, embedder: Embedder) -> int:
        rows = self.db.fetchall("SELECT id, heading, text FROM chunks WHERE deleted_at IS NULL ORDER BY id")
        bar = self._progress_bar(len(rows), "re-embedding")
        self.db.execute("DROP TABLE IF EXISTS vectors_new")
        self.db.execute(f"CREATE TABLE vectors_new (chunk_id BIGINT PRIMARY KEY, vec FLOAT[{embedder.dim}])")
        import pyarrow as pa

        batch = 256
        for start in range(0, len(rows), batch):
            part = rows[start : start + batch]
            vecs = embedder.embed_documents([chunk_rows.embedding_text(h or "", t) for _, h, t in part])
            table = pa.table(
                {
                    "chunk_id": pa.array([int(r[0]) for r in part], pa.int64()),
                    "vec": pa.FixedSizeListArray.from_arrays(
                        pa.array(vecs.astype(np.float32).reshape(-1)), embedder.dim
                    ),
                }
            )
            self.db.with_arrow("_nbm_re", table, "INSERT INTO vectors_new SELECT * FROM _nbm_re")
            bar.update(len(part))
        bar.close()
        # The swap is one transaction: a reader sees all old vectors or all new ones.
        with self.db.transaction():
            vectors.drop_index(self.db)
            self.db.execute("DROP TABLE IF EXISTS vectors")
            self.db.execute("ALTER TABLE vectors_new RENAME TO vectors")
            self.db.set_meta("model_fingerprint", embedder.fingerprint)
            self.db.set_meta("model_name", embedder.name)
            self.db.set_meta("model_dim", embedder.dim)
        vectors.create_index(self.db)
        return len(rows)

    def stats(self) -> dict[str, Any]:
        """Counts, sizes and index state."""
        self.flush()
        db = self.db
        by_kind = dict(
            db.fetchall(
                "SELECT kind, count(*) FROM chunks WHERE deleted_at IS NULL GROUP BY kind ORDER BY kind"
            )
        )
        by_ns = dict(
            db.fetchall(
                "SELECT namespace, count(*) FROM chunks WHERE deleted_at IS NULL GROUP BY namespace ORDER BY namespace"
            )
        )
        size = self.path.stat().st_size if self.path.exists() else 0
        return {
            "path": str(self.path),
            "file_mb": round(size / 1e6, 2),
            "schema_version": db.schema_version(),
            "model": db.get_meta("model_name"),
            "model_fingerprint": db.get_meta("model_fingerprint"),
            "dim": int(db.get_meta("model_dim") or 0) or None,
            "documents": int(db.scalar("SELECT count(*) FROM documents WHERE forgotten_at IS NULL")),
            "items": int(db.scalar("SELECT count(*) FROM chunks WHERE deleted_at IS NULL")),
            "forgotten": int(db.scalar("SELECT count(*) FROM chunks WHERE deleted_at IS NOT NULL")),
            "vectors": int(db.scalar("SELECT count(*) FROM vectors")) if db.table_exists("vectors") else 0,
            "links": int(db.scalar("SELECT count(*) FROM links")),
            "searches": int(db.scalar("SELECT count(*) FROM search_log")),
            "by_kind": by_kind,
            "by_namespace": by_ns,
            "fts_pending": fts.delta_size(db),
            "hnsw_index": vectors.index_exists(db),
        }

    def doctor(self, repair: bool = False) -> DoctorReport:
        """Check integrity; with ``repair=True`` fix what can be fixed from stored data."""
        from nbmemory.store.doctor import run_doctor

        return run_doctor(self, repair)

    def export(self, out: str | os.PathLike[str], include_forgotten: bool = False) -> int:
        """Write items (no vectors) to Parquet, CSV or JSON lines, chosen by the file suffix."""
        self.flush()
        target = Path(out).expanduser()
        formats = {".parquet": "PARQUET", ".csv": "CSV, HEADER", ".jsonl": "JSON", ".json": "JSON"}
        fmt = formats.get(target.suffix.lower())
        if fmt is None:
            raise ConfigError(f"cannot export to {target.name!r}: use a .parquet, .csv or .jsonl file")
        where = "" if include_forgotten else "WHERE deleted_at IS NULL"
        count = int(self.db.scalar(f"SELECT count(*) FROM chunks {where}"))
        escaped = str(target).replace("'", "''")
        self.db.execute(
            f"COPY (SELECT {ITEM_COLUMNS}, last_accessed_at, last_retrieved_at FROM chunks {where} "
            f"ORDER BY id) TO '{escaped}' (FORMAT {fmt})"
        )
        return count


def _clean_tags(tags: Sequence[str] | str) -> list[str]:
    if isinstance(tags, str):
        tags = tags.split(",")
    out: list[str] = []
    for tag in tags:
        tag = tag.strip()
        if tag and tag not in out:
            out.append(tag)
    return out
