"""The Memory facade: the one entry point for the CLI, magics, widgets and server."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
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
from nbmemory.search.pipeline import MAX_K, PipelineConfig, SearchPipeline, SearchResult
from nbmemory.store import chunks as chunk_rows
from nbmemory.store import fts, vectors
from nbmemory.store.db import Database, utcnow
from nbmemory.store.migrations import LINK_TYPES

ModelPolicy = Literal["reembed", "error", "defer"]
# Bulk deletes past this many rows compact the HNSW graph (DESIGN.md, note 4).
COMPACT_AFTER_DELETES = 500
# Searches whose counter updates and log rows are written together (see _record_search).
LOG_FLUSH_EVERY = 16
# Retention of the two write-only logs, which otherwise grow with every search and every write
# (bench/load_bench.py): the newest SEARCH_LOG_KEEP searches are kept (tune mines the recent
# ones), and a request key lives REQUEST_KEY_TTL (a client retries within FAILOVER_SECONDS, 60 s).
# Pruning runs once every PRUNE_EVERY log rows written.
SEARCH_LOG_KEEP = 100_000
REQUEST_KEY_TTL = timedelta(days=1)
PRUNE_EVERY = 1000


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
        self._log_rows = 0
        # Called as (done, total) while re-embedding (the tune progress widget listens).
        self._reembed_progress: Callable[[int, int], None] | None = None
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
            self._embedder = self._load_embedder()
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
        vectors.maybe_rebuild(self.db)
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
        for what, value in (("text", text), ("heading", heading), ("source", source)):
            _check_unicode(value, what)
        _check_unicode(namespace, "namespace")
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
        vectors.maybe_rebuild(self.db)
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
            self._log_rows += 1

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
            _check_unicode(text, f"text {i}")
            _check_unicode(headings[i] if headings is not None else None, f"heading {i}")
            _check_unicode(sources[i] if sources is not None else None, f"source {i}")
        _check_unicode(namespace, "namespace")
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
        _check_unicode(text, "text")
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
        vectors.maybe_rebuild(self.db)
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
        for what, value in (("query", query), ("path", path), ("namespace", namespace)):
            _check_unicode(value, what)
        now = utcnow()
        if item_id is not None:
            ids = [int(item_id)] if isinstance(item_id, (int, np.integer)) else [int(i) for i in item_id]
            # An id outside BIGINT cannot exist (and would fail the cast below).
            missing = set(ids) - {
                int(r[0])
                for r in self.db.fetchall(
                    "SELECT id FROM chunks WHERE id IN (SELECT unnest(?::BIGINT[]))",
                    [[i for i in ids if -(2**63) <= i < 2**63]],
                )
            }
            if missing:
                raise NotFoundError(f"no item with id {', '.join(map(str, sorted(missing)))}")
            reason = "id"
        elif query is not None:
            ids = self.search(query, k=k, namespace=namespace, log=False).ids
            reason = f"query: {redact(query[:200]).text}"
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
                # Only the namespace asked for: the same file indexed elsewhere stays live.
                self.db.execute(
                    "UPDATE documents SET forgotten_at = ? WHERE (path = ? OR path GLOB ?)"
                    + (" AND namespace = ?" if namespace is not None else ""),
                    [now, pattern, pattern, *([namespace] if namespace is not None else [])],
                )
        vectors.note_writes(self.db, count)
        if not vectors.maybe_rebuild(self.db) and count >= COMPACT_AFTER_DELETES:
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

    def related(self, item_id: int, k: int = 5, *, namespace: str | None = None) -> list[Hit]:
        """Items most similar to ``item_id`` by vector, plus those it links to.

        ``namespace`` restricts the results (similar and linked items) to one namespace, as
        for :meth:`search`; ``None`` looks in every namespace.
        """
        embedder = self._require_model_match()
        item = self.get(item_id, touch=False)
        vec = vectors.get(self.db, [item.id]).get(item.id)
        if vec is None:
            raise NotFoundError(f"item {item_id} has no vector: run `nbmemory doctor --repair`")
        where, params = Filters(namespace=namespace).sql()
        found, _ = vectors.search(self.db, vec, k + 1, embedder.dim, None if namespace is None else where, params)
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
        # Linked items keep their own namespace: drop those outside the one asked for.
        return [h for h in hits if namespace is None or h.namespace == namespace]

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
        for what, value in (("the query", query), ("namespace", namespace), ("path", path)):
            _check_unicode(value, what)
        for value in (*tags, *kinds):
            _check_unicode(value, "filter")
        if k > MAX_K:
            # search_log.k is an INTEGER and the retrievers fetch a multiple of k as a BIGINT.
            raise ConfigError(f"k must be at most {MAX_K}, got {k}")
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
        # A query can hold a secret pasted by mistake: the log keeps it redacted, like the items.
        entry = (utcnow(), redact(result.query).text, repr(filters) if not filters.empty else None, k, result.ids, ms)
        self._pending_log.append(entry)
        if len(self._pending_log) >= LOG_FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        """Write buffered retrieval counters and search-log rows."""
        pending, self._pending_log = self._pending_log, []
        if not pending:
            self._prune_logs()
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
        self._log_rows += len(pending)
        self._prune_logs()

    def _prune_logs(self, force: bool = False) -> None:
        """Apply the retention of search_log and request_keys (see SEARCH_LOG_KEEP)."""
        if self._log_rows < PRUNE_EVERY and not force:
            return
        self._log_rows = 0
        with self.db.transaction():
            self.db.execute(
                "DELETE FROM search_log WHERE id <= (SELECT max(id) FROM search_log) - ?", [SEARCH_LOG_KEEP]
            )
            self.db.execute("DELETE FROM request_keys WHERE created_at < ?", [utcnow() - REQUEST_KEY_TTL])

    # -- maintenance ------------------------------------------------------------------------
    def reembed(self) -> int:
        """Re-embed every live item with the current model (after a model change).

        Resumable: vectors are staged in batches that are committed one by one, so a run that is
        killed goes on from where it stopped the next time (here, on open, or through
        ``doctor(repair=True)``). Searches keep using the old vectors until one transaction swaps
        all of them at once. Returns the number of live items.
        """
        embedder = self._embedder or self._load_embedder()
        return self._reembed(embedder)

    def _load_embedder(self, version: Any = None) -> Embedder:
        """The configured model, or the active tuned version of it (``nbmemory models``)."""
        from nbmemory.embed.sentence import SentenceTransformerEmbedder, _prefixes_for
        from nbmemory.tune import versions

        chosen = version if version is not None else versions.active(self.db)
        if chosen is not None and chosen.path is not None:
            base = chosen.base_model or self.settings.model
            if version is not None or base == self.settings.model:
                if not chosen.path.is_dir():
                    if version is None:
                        self._log(f"model version {chosen.version} is missing ({chosen.path}): using {base}")
                        return SentenceTransformerEmbedder(self.settings.model, device=self.settings.device)
                    raise NotFoundError(
                        f"model version {chosen.version} has no weights at {chosen.path} "
                        "(refused versions keep only their scores): pick another with `nbmemory models`"
                    )
                q, d = _prefixes_for(base)
                return SentenceTransformerEmbedder(
                    str(chosen.path), device=self.settings.device, query_prefix=q, document_prefix=d
                )
        model = chosen.model if chosen is not None and version is not None else self.settings.model
        return SentenceTransformerEmbedder(model, device=self.settings.device)

    def _reembed(self, embedder: Embedder) -> int:
        self._stage_vectors(embedder)
        return self._swap_vectors(embedder)

    def _staged_target(self) -> str | None:
        return self.db.get_meta("reembed_target") if self.db.table_exists("vectors_new") else None

    def _stage_vectors(self, embedder: Embedder, batch: int = 256) -> int:
        """Embed every live item not yet staged for ``embedder`` into ``vectors_new``.

        Each batch is committed, so a killed run resumes: rows staged for the same model
        fingerprint and the item's current text (content hash) are kept. Returns how many were
        embedded now. The live ``vectors`` table and the current embedder are not touched.
        """
        import pyarrow as pa

        if self._staged_target() != embedder.fingerprint or self._staging_dim() != embedder.dim:
            with self.db.transaction():
                self.db.execute("DROP TABLE IF EXISTS vectors_new")
                self.db.execute(
                    "CREATE TABLE vectors_new (chunk_id BIGINT PRIMARY KEY, content_hash VARCHAR, "
                    f"vec FLOAT[{embedder.dim}])"
                )
                self.db.set_meta("reembed_target", embedder.fingerprint)
        rows = self._unstaged()
        total = int(self.db.scalar("SELECT count(*) FROM chunks WHERE deleted_at IS NULL"))
        bar = self._progress_bar(total, "re-embedding")
        bar.update(total - len(rows))
        for start in range(0, len(rows), batch):
            part = rows[start : start + batch]
            vecs = embedder.embed_documents([chunk_rows.embedding_text(h or "", t) for _, h, t, _ in part])
            ids = [int(r[0]) for r in part]
            table = pa.table(
                {
                    "chunk_id": pa.array(ids, pa.int64()),
                    "content_hash": pa.array([r[3] for r in part], pa.string()),
                    "vec": pa.FixedSizeListArray.from_arrays(
                        pa.array(vecs.astype(np.float32).reshape(-1)), embedder.dim
                    ),
                }
            )
            with self.db.transaction():
                self.db.execute(
                    "DELETE FROM vectors_new WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))", [ids]
                )
                self.db.with_arrow("_nbm_re", table, "INSERT INTO vectors_new SELECT * FROM _nbm_re")
            bar.update(len(part))
            if self._reembed_progress is not None:
                self._reembed_progress(total - len(rows) + start + len(part), total)
        bar.close()
        return len(rows)

    def _staging_dim(self) -> int | None:
        row = self.db.fetchone(
            "SELECT data_type FROM duckdb_columns() WHERE database_name = 'mem' AND "
            "table_name = 'vectors_new' AND column_name = 'vec'"
        )
        return None if row is None else int(str(row[0]).split("[")[-1].rstrip("]"))

    def _unstaged(self) -> list[tuple[Any, ...]]:
        # Live items with no staged vector for their current text (new or edited since staging).
        return self.db.fetchall(
            "SELECT c.id, c.heading, c.text, c.content_hash FROM chunks c "
            "LEFT JOIN vectors_new n ON n.chunk_id = c.id AND n.content_hash = c.content_hash "
            "WHERE c.deleted_at IS NULL AND n.chunk_id IS NULL ORDER BY c.id"
        )

    def _swap_vectors(self, embedder: Embedder) -> int:
        """Stage what was written meanwhile, then swap the staged vectors in, in one transaction.

        The database lock is held from the last catch-up to the swap, and the embedder is switched
        in the same step, so a search uses the old model with the old vectors or the new model with
        the new ones, never a mix. A write from another thread whose embedding began before the
        swap would still store an old-model vector; nbmemory's own callers never overlap calls on
        one Memory (the owner serializes its clients, a kernel runs one cell at a time).
        """
        # Catch up without the lock while much is missing, so searches are blocked only briefly.
        for _ in range(3):
            if len(self._unstaged()) <= 64:
                break
            self._stage_vectors(embedder)
        with self.db.lock:
            self._stage_vectors(embedder)
            # The swap is one transaction: a reader sees all old vectors or all new ones.
            with self.db.transaction():
                vectors.drop_index(self.db)
                self.db.execute(
                    "DELETE FROM vectors_new WHERE chunk_id NOT IN "
                    "(SELECT id FROM chunks WHERE deleted_at IS NULL)"
                )
                self.db.execute("DROP TABLE IF EXISTS vectors")
                self.db.execute("ALTER TABLE vectors_new RENAME TO vectors")
                self.db.execute("ALTER TABLE vectors DROP COLUMN content_hash")
                self.db.execute("DELETE FROM meta WHERE key = 'reembed_target'")
                self.db.set_meta("model_fingerprint", embedder.fingerprint)
                self.db.set_meta("model_name", embedder.name)
                self.db.set_meta("model_dim", embedder.dim)
            self._embedder = embedder
            self._model_checked = True
            self._model_mismatch = None
            vectors.create_index(self.db)
            return int(self.db.scalar("SELECT count(*) FROM vectors"))

    def _drop_staging(self) -> None:
        with self.db.transaction():
            self.db.execute("DROP TABLE IF EXISTS vectors_new")
            self.db.execute("DELETE FROM meta WHERE key = 'reembed_target'")

    # -- model versions (nbmemory.tune) -----------------------------------------------------
    def models(self) -> list[Any]:
        """Every model version of this memory (:class:`~nbmemory.tune.versions.ModelVersion`).

        ``in_use`` marks the model whose vectors the store holds; ``active`` the one it opens with.
        """
        from nbmemory.tune import versions

        stored = self.db.get_meta("model_fingerprint")
        name = self.db.get_meta("model_name")
        if stored is not None and name is not None and not versions.list_versions(self.db):
            # Before the first tuning, the model whose vectors the store holds is the base.
            with self.db.transaction():
                versions.ensure_base(self.db, name, stored)
        return versions.list_versions(self.db)

    def use_model(self, version: str) -> int:
        """Switch to a model version: re-embed every item with it (resumably), then make it active.

        Searches keep using the old model and vectors until the swap. Returns the live items.
        """
        from nbmemory.tune import versions

        self.models()  # records the base version the first time
        chosen = versions.get(self.db, version)
        if chosen.status == "refused":
            raise ConfigError(
                f"model version {version} was refused by the gate ({chosen.note}) and its weights "
                "were deleted: pick another with `nbmemory models`"
            )
        embedder = self._load_embedder(chosen)
        count = self._reembed(embedder)
        with self.db.transaction():
            versions.set_active(self.db, version)
        return count

    def tune(self, options: Any = None, progress: Callable[[str, float], None] | None = None) -> Any:
        """Mine triples from this memory, fine-tune the model, and adopt it only if the gate agrees.

        See :func:`nbmemory.tune.run.tune_memory` for ``options`` (a ``TuneOptions``) and the
        returned ``TuneReport``.
        """
        from nbmemory.tune.run import tune_memory

        return tune_memory(self, options, progress)

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


def _check_unicode(value: str | None, what: str) -> None:
    """Raise ConfigError for a string DuckDB cannot store or compare: one with lone surrogates."""
    if value is None:
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(
            f"{what} is not valid Unicode: lone surrogate U+{ord(value[exc.start]):04X} at position "
            f"{exc.start} (text decoded from bytes that are not UTF-8?); remove or replace it"
        ) from None


def _clean_tags(tags: Sequence[str] | str) -> list[str]:
    if isinstance(tags, str):
        tags = tags.split(",")
    out: list[str] = []
    for tag in tags:
        _check_unicode(tag, "tag")
        tag = tag.strip()
        if tag and tag not in out:
            out.append(tag)
    return out
