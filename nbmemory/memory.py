"""The Memory facade: the one entry point for the CLI, magics, widgets and server.

It checks arguments, picks the model, and delegates: the store (``nbmemory.store``: rows,
indexes, the search log, request keys, re-embedding, doctor), ingestion (``nbmemory.ingest``),
search (``nbmemory.search``) and tuning (``nbmemory.tune``). Its operations are declared, with
their docstrings, in :class:`nbmemory.api.MemoryAPI`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from nbmemory import api, executions, runtime, validate
from nbmemory import team as team_memory
from nbmemory.active_model import ActiveModel, ModelPolicy, load_for_store
from nbmemory.config import Settings
from nbmemory.embed.base import Embedder
from nbmemory.errors import ConfigError
from nbmemory.ingest.indexer import Indexer, IndexReport
from nbmemory.ingest.redact import redact
from nbmemory.ingest.remembered import remembered_rows
from nbmemory.items import Hit, Item
from nbmemory.progress import IndexMeter, fitted, index_bar
from nbmemory.refine import RefineMode, Refiner, near_miss_measured, refine_mode
from nbmemory.refine import progress as refine_progress
from nbmemory.search import hot, nearmiss, reject
from nbmemory.search.config import PipelineConfig
from nbmemory.search.pipeline import MAX_K, SearchPipeline
from nbmemory.search.related import related
from nbmemory.search.result import SearchResult
from nbmemory.store import chunks as chunk_rows
from nbmemory.store import executions as execution_rows
from nbmemory.store import fts, item_rows, passages, request_keys, vectors
from nbmemory.store import roots as root_rows
from nbmemory.store.db import Database, utcnow
from nbmemory.store.doctor import DoctorReport, run_doctor
from nbmemory.store.search_log import SearchLog
from nbmemory.tune import versions

# Bulk deletes past this many rows compact the HNSW graph (docs/architecture.md, note 4).
COMPACT_AFTER_DELETES = 500


@api.implements
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
    refine:
        When the passages of long chunks of prose are made: ``"background"`` (default, or
        ``NBMEMORY_REFINE``): a write returns once its chunks are searchable (BM25 and their own
        vectors), and a thread of this process fills the passages after it, at low priority
        (:mod:`nbmemory.refine`, :meth:`wait_refined`); ``"inline"``: each write makes them before
        it returns.
    team:
        A team memory to attach beside the personal file (a :class:`~nbmemory.team.TeamConfig`
        or ``"<catalog>|<data path>"``; default ``NBMEMORY_TEAM``): namespaces ``team:<name>``
        are written to its lake, and searches rank its items with the personal ones
        (:mod:`nbmemory.team`).
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
        refine: RefineMode | None = None,
        team: team_memory.TeamConfig | str | None = None,
    ) -> None:
        settings = (settings or Settings()).override(path, model, namespace)
        #: ``"background"`` or ``"inline"``: see ``refine`` above.
        self.refine: RefineMode = refine_mode(refine)
        if on_model_change not in ("reembed", "error", "defer"):
            raise ConfigError(f"on_model_change must be reembed, error or defer, not {on_model_change!r}")
        self.settings = settings
        self.on_model_change = on_model_change
        self.show_progress = progress
        self.pipeline_config = pipeline or PipelineConfig(rrf_k=settings.rrf_k)
        self.db = Database(settings.db_path, own_folder=settings.own_folder)
        #: The model, checked against the file's; writes share it, a swap (a background ``tune``)
        #: holds it alone, so a write never stores a vector of a model just replaced.
        self._model = ActiveModel(self.db, settings, embedder, on_model_change, self._log, progress)
        self._search_log = SearchLog(self.db, lambda query: redact(query).text)
        if not fts.index_exists(self.db):
            fts.rebuild(self.db)
        #: Makes pending passages in the background (None: each write makes its own).
        self._refiner: Refiner | None = None
        if self.refine == "background" and settings.passages and not self.db.read_only:
            self._refiner = Refiner(self.db, self._model, self._log)
            # Passages a process killed before it made them are made now.
            self._refiner.start()
        config = team_memory.team_config(team)
        #: The team memory beside this file (None: personal only).
        self._team = (
            None
            if config is None
            else team_memory.Team(config, lambda: self.embedder, self._replica, self.path)
        )

    # -- lifecycle --------------------------------------------------------------------------
    def close(self) -> None:
        if self._refiner is not None:
            self._refiner.close()  # the step under way ends; what is left, the next opening makes
        self._search_log.close()  # writes the buffered searches, then stops its writer
        self.db.close()
        if self._team is not None:
            self._team.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def path(self) -> Path:
        return self.settings.db_path

    # -- the model --------------------------------------------------------------------------
    @property
    def embedder(self) -> Embedder:
        """The embedder, loaded on first use and checked against the file's model."""
        return self._model.embedder()

    def _require_model_match(self) -> Embedder:
        return self._model.matching()

    def _replica(self, path: Path, home: Path, embedder: Embedder) -> Memory:
        """Opens the local replica of the team's lake: a memory file of its own, searched like this one."""
        # Passages as a personal file has them (made in the background), so a team hit ranks as
        # the same text would here; team="": the replica attaches no team, whatever NBMEMORY_TEAM says.
        settings = Settings(home=home, passages=self.settings.passages)
        return Memory(path, embedder=embedder, settings=settings, refine="background", team="")

    def _team_for(self, namespace: str | None) -> team_memory.Team | None:
        """The team when ``namespace`` (or the default) is a team namespace, None for a personal one."""
        ns = namespace or self.settings.namespace
        if not team_memory.is_team_namespace(ns):
            return None
        if self._team is None:
            team_memory.check_personal(ns)
        return self._team

    def _log(self, message: str) -> None:
        if self.show_progress:
            print(message, file=sys.stderr)

    # -- ingest -----------------------------------------------------------------------------
    def index(
        self,
        *paths: str | os.PathLike[str],
        namespace: str | None = None,
        progress: Callable[..., None] | None = None,
    ) -> IndexReport:
        started = time.perf_counter()
        if not paths:
            raise ConfigError("index needs at least one file or folder")
        if (team := self._team_for(namespace)) is not None:
            report = team.index(paths, str(namespace or self.settings.namespace), self._max_bytes, self._log)
            report.seconds = time.perf_counter() - started
            return report
        with index_bar(self.show_progress and progress is None) as bar:
            meter = IndexMeter(fitted(progress) if progress is not None else bar, started=started)
            meter.phase("loading the model")
            with self._model.writing() as embedder:
                defer = self._refiner is not None
                indexer = Indexer(
                    self.db,
                    embedder,
                    self._max_bytes,
                    meter=meter,
                    log=self._log,
                    passages=self.settings.passages,
                    defer_passages=defer,
                )
                with self._passages_after(embedder):
                    report = indexer.run(paths, namespace or self.settings.namespace)
            meter.phase("updating the search index")
            for folder in (Path(p).expanduser().absolute() for p in paths):
                # A name too long for the system raises here; the report says it was skipped.
                with contextlib.suppress(OSError):
                    if folder.is_dir():
                        root_rows.add(self.db, folder, namespace or self.settings.namespace)
            self._after_bulk_write(report.chunks_added + report.chunks_removed, report.chunks_removed)
            changed = report.chunks_added or report.chunks_removed
            if changed and reject.thresholds_for(embedder.fingerprint) and not report.passages_pending:
                # Measured here, in a call that is waited for anyway, rather than by the first search
                # without a clear answer; with passages pending, the refiner measures it once they are made.
                nearmiss.near_miss(self.db, embedder)
                near_miss_measured(self.db, embedder.fingerprint)
            # The wall time of the whole call: the model's load and the index update included.
            report.seconds = time.perf_counter() - started
            meter.finish(report.files_seen, report.chunks_added, report.seconds)
        return report

    @contextlib.contextmanager
    def _passages_after(
        self, embedder: Embedder | None
    ) -> Iterator[Callable[[list[passages.Content]], None]]:
        """Around a write's commit: gives what to call with the contents it stored, which makes
        their passages now (``refine="inline"``), or does nothing while the block tells the
        background refiner that they are pending, from before the commit on."""
        if embedder is None or self._refiner is None:
            yield lambda contents: self._model.fill_passages(embedder, contents) if embedder else None
            return
        with self._refiner.writing(embedder.fingerprint):
            yield lambda contents: None

    @property
    def _max_bytes(self) -> int:
        return int(self.settings.max_file_mb * 1e6)

    @contextlib.contextmanager
    def refining_after(self) -> Iterator[None]:
        """Around a write made beside the facade (a team replica's rows): the passages of the
        prose it stores are made after it, in the background (or at its end, inline)."""
        if not self.settings.passages:
            yield
        elif self._refiner is not None:
            with self._refiner.writing(self.embedder.fingerprint):
                yield
        else:
            yield
            self.wait_refined()

    @property
    def refining(self) -> bool:
        """Whether the background refiner has passages to make (an owner that stops when idle
        waits for it)."""
        return self._refiner is not None and self._refiner.busy

    def wait_refined(self, timeout: float | None = None) -> bool:
        if self._team is not None:
            started = time.monotonic()
            if not self._team.wait_refined(timeout):
                return False
            if timeout is not None:
                timeout = max(0.0, timeout - (time.monotonic() - started))
        if not self.settings.passages:
            return True
        embedder = self._require_model_match()  # a file of another model is re-embedded first
        if self._refiner is None:
            # Inline: only a killed write leaves passages pending; make them here.
            if passages.missing(self.db, embedder.fingerprint):
                with self._model.writing() as embedder:
                    self._model.fill_passages(embedder)
            return True
        return self._refiner.wait(timeout)

    def _after_bulk_write(self, written: int, deleted: int) -> None:
        vectors.maybe_rebuild(self.db)
        if written:
            fts.ensure_fresh(self.db)
        if deleted >= COMPACT_AFTER_DELETES:
            vectors.compact_index(self.db)
        if deleted:
            passages.prune(self.db)

    def roots(self) -> list[dict[str, Any]]:
        return root_rows.listed(self.db)

    def remove_root(self, path: str | os.PathLike[str], *, namespace: str | None = None) -> int:
        validate.check_fields(path=str(path), namespace=namespace)
        return root_rows.remove(self.db, str(Path(path).expanduser().absolute()), namespace)

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
        at: str | datetime | None = None,
        speaker: str | None = None,
        conversation: str | None = None,
        request_key: str | None = None,
    ) -> Item:
        if request_key is not None:
            earlier = request_keys.answered(self.db, request_key)
            if earlier is not None:
                return self.get(int(earlier), touch=False)
        if not text or not text.strip():
            raise ConfigError("nothing to remember: the text is empty")
        validate.check_importance(importance)
        validate.check_fields(text=text, heading=heading, source=source, namespace=namespace)
        turn = (
            [validate.event_time(at)],
            [validate.turn_field(speaker, "speaker")],
            [validate.turn_field(conversation, "conversation")],
        )
        if (team := self._team_for(namespace)) is not None:
            ns = namespace or self.settings.namespace
            return team.remember_many(
                [text], ns, validate.clean_tags(tags), importance, [source], [heading], *turn, request_key
            )[0]
        new_id = self._store_texts(
            [text], namespace, validate.clean_tags(tags), importance, [source], [heading], turn, request_key
        )[0]
        vectors.maybe_rebuild(self.db)
        return self.get(new_id, touch=False)

    def remember_many(
        self,
        texts: Sequence[str],
        *,
        tags: Sequence[str] = (),
        importance: float = 0.5,
        namespace: str | None = None,
        sources: Sequence[str | None] | None = None,
        headings: Sequence[str] | None = None,
        times: Sequence[str | datetime | None] | None = None,
        speakers: Sequence[str | None] | None = None,
        conversations: Sequence[str | None] | None = None,
        batch_size: int = 512,
        progress: Callable[[int], None] | None = None,
        request_key: str | None = None,
    ) -> list[int]:
        validate.check_batch(
            texts, sources, headings, times=times, speakers=speakers, conversations=conversations
        )
        validate.check_unicode(namespace, "namespace")
        validate.check_importance(importance)
        # Every value checked before anything is written (a bad one in the last batch stores nothing).
        n = len(texts)
        event_at = [validate.event_time(t, f"time {i}") for i, t in enumerate(times or [None] * n)]
        speaker = [validate.turn_field(v, f"speaker {i}") for i, v in enumerate(speakers or [None] * n)]
        conversation = [
            validate.turn_field(v, f"conversation {i}") for i, v in enumerate(conversations or [None] * n)
        ]
        if (team := self._team_for(namespace)) is not None:
            ns = namespace or self.settings.namespace
            batch = (sources or [None] * n, headings or [""] * n, event_at, speaker, conversation)
            items = team.remember_many(texts, ns, validate.clean_tags(tags), importance, *batch, request_key)
            if progress is not None:
                progress(n)
            return [item.id for item in items]
        self._require_model_match()
        clean_tags = validate.clean_tags(tags)
        ids: list[int] = []
        with vectors.bulk_load(self.db, vectors.is_bulk(self.db, len(texts))):
            for start in range(0, len(texts), batch_size):
                stop = min(start + batch_size, len(texts))
                batch_key = f"{request_key}:{start}" if request_key else None
                earlier = request_keys.answered(self.db, batch_key) if batch_key is not None else None
                if earlier is not None:
                    ids += [int(i) for i in earlier.split(",")]
                    continue
                ids += self._store_texts(
                    texts[start:stop],
                    namespace,
                    clean_tags,
                    importance,
                    sources[start:stop] if sources else [None] * (stop - start),
                    headings[start:stop] if headings else [""] * (stop - start),
                    (event_at[start:stop], speaker[start:stop], conversation[start:stop]),
                    batch_key,
                )
                if progress is not None:
                    progress(stop - start)
        self._after_bulk_write(len(ids), 0)
        return ids

    def _store_texts(
        self,
        texts: Sequence[str],
        namespace: str | None,
        tags: list[str],
        importance: float,
        sources: Sequence[str | None],
        headings: Sequence[str],
        turns: tuple[Sequence[datetime | None], Sequence[str | None], Sequence[str | None]],
        request_key: str | None = None,
    ) -> list[int]:
        """Redact, embed and insert remembered texts in one transaction, with their request key.
        ``turns``: the checked event times, speakers and conversations, one of each per text."""
        ns = namespace or self.settings.namespace
        rows = remembered_rows(texts, ns, tags, importance, sources, headings, *turns)
        with self._model.writing() as embedder, self._passages_after(embedder) as fill:
            vecs = embedder.embed_documents([chunk_rows.embedding_text(r.heading, r.text) for r in rows])
            postings = fts.postings_of(self.db, [(r.heading, r.text) for r in rows])
            with self.db.transaction():
                new_ids = chunk_rows.insert(self.db, rows, vecs, utcnow(), postings)
                self._search_log.note_rows(
                    request_keys.record(self.db, request_key, ",".join(map(str, new_ids)))
                )
            fill([(r.hash, r.heading, r.text, r.kind) for r in rows])
        return new_ids

    def capture(self, runs: Sequence[Mapping[str, Any]], *, namespace: str | None = None) -> list[int]:
        validate.check_unicode(namespace, "namespace")
        if self._team_for(namespace) is not None:
            raise ConfigError(
                f"cell runs are personal: capture into {namespace!r}, a team namespace, is refused"
            )
        rows = executions.run_rows(runs, namespace or self.settings.namespace)
        # A cell run twice in one batch is one item, at its last run.
        last = {executions.run_key(row, source): i for i, (row, source) in enumerate(rows)}
        unique = [rows[i] for i in sorted(last.values())]
        with self._model.writing() as embedder, self._passages_after(embedder) as fill:
            earlier = []
            for row, source in unique:
                found = execution_rows.candidates(self.db, row, source)
                earlier.append(next((c for c in found if executions.source_of(c[2], source)), None))
            fresh = [row for (row, _), old in zip(unique, earlier, strict=True) if old is None]
            changed = [
                (old[0], row)
                for (row, _), old in zip(unique, earlier, strict=True)
                if old is not None and (old[1], old[2]) != (row.heading, row.text)
            ]
            written = fresh + [row for _, row in changed]
            # A run again with the same output embeds nothing: only its time changes.
            texts = [chunk_rows.embedding_text(r.heading, r.text) for r in written]
            vecs = embedder.embed_documents(texts) if texts else np.empty((0, embedder.dim), dtype=np.float32)
            postings = fts.postings_of(self.db, [(r.heading, r.text) for r in fresh])
            with self.db.transaction():
                new_ids = iter(chunk_rows.insert(self.db, fresh, vecs[: len(fresh)], utcnow(), postings))
                vecs_changed = dict(zip((i for i, _ in changed), vecs[len(fresh) :], strict=True))
                ids = []
                for (row, _), old in zip(unique, earlier, strict=True):
                    if old is None:
                        ids.append(next(new_ids))
                        continue
                    execution_rows.ran_again(self.db, old[0], row, vecs_changed.get(old[0]))
                    ids.append(old[0])
            fill([(r.hash, r.heading, r.text, r.kind) for r in written])
        vectors.maybe_rebuild(self.db)
        by_key = {executions.run_key(row, source): i for (row, source), i in zip(unique, ids, strict=True)}
        return [by_key[executions.run_key(row, source)] for row, source in rows]

    def get(self, item_id: int, *, touch: bool = True, include_forgotten: bool = False) -> Item:
        if self._team is not None and team_memory.is_team_id(item_id):
            return self._team.get(item_id)
        self.flush()
        return item_rows.get(self.db, item_id, touch=touch, include_forgotten=include_forgotten)

    def update(
        self,
        item_id: int,
        *,
        text: str | None = None,
        tags: Sequence[str] | None = None,
        importance: float | None = None,
        pinned: bool | None = None,
        at: str | datetime | None = None,
        speaker: str | None = None,
        conversation: str | None = None,
    ) -> Item:
        validate.check_unicode(text, "text")
        event: dict[str, Any] = {}
        if at is not None:
            event["event_at"] = validate.event_time(at)
        if speaker is not None:
            event["speaker"] = validate.turn_field(speaker, "speaker")
        if conversation is not None:
            event["conversation"] = validate.turn_field(conversation, "conversation")
        clean_tags = None if tags is None else validate.clean_tags(tags)
        if importance is not None:
            validate.check_importance(importance)
        if self._team is not None and team_memory.is_team_id(item_id):
            if pinned is not None:
                raise ConfigError("team items cannot be pinned: a pin is personal")
            return self._team.update(item_id, text, clean_tags, importance, event)
        item = self.get(item_id, touch=False)
        new_text = None
        changed = text is not None and bool(text.strip()) and text.strip() != item.text
        if changed:
            self._require_model_match()  # a model change re-embeds here, before the write begins
        with self._model.use.writing():
            embedder = None
            if changed and text is not None:
                clean = redact(text.strip()).text
                embedder = self._require_model_match()
                new_text = (clean, embedder.embed_documents([chunk_rows.embedding_text(item.heading, clean)]))
            with self._passages_after(embedder) as fill:
                with self.db.transaction():
                    item_rows.update(self.db, item, clean_tags, importance, pinned, new_text, event)
                if new_text is not None:
                    digest = chunk_rows.content_hash(item.heading, new_text[0])
                    fill([(digest, item.heading, new_text[0], item.kind)])
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
        kind: str | Sequence[str] | None = None,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        dry_run: bool = False,
    ) -> list[int]:
        selected = path is not None or kind is not None or since is not None or until is not None
        if sum(x is not None for x in (item_id, query)) + selected != 1:
            raise ConfigError(
                "forget needs exactly one of: an id, query=..., or path=... and/or kind=, since=, until="
            )
        validate.check_fields(query=query, path=path, namespace=namespace)
        if (team := self._team_for(namespace)) is not None and selected:
            if path is None or kind is not None or since is not None or until is not None:
                raise ConfigError(f"forget in a team namespace ({namespace!r}) takes an id, query=... or path=...")
            return team.forget_path(item_rows.path_pattern(path), str(namespace), dry_run)
        if item_id is not None and not isinstance(item_id, int):
            item_id = list(item_id)  # read once: it may be an iterator
        if self._team is not None and (query is not None or team_memory.is_team_ids(item_id)):
            return self._forget_with_team(self._team, item_id, query, k, namespace, dry_run)
        if item_id is not None:
            ids = item_rows.require_ids(self.db, item_id)
            reason = "id"
        elif query is not None:
            ids = self.search(query, k=k, namespace=namespace, log=False).ids
            reason = f"query: {redact(query[:200]).text}"
        else:
            filters = validate.search_filters("", None, kind, None, (), since, until)
            pattern = item_rows.path_pattern(path) if path is not None else None
            ids = item_rows.live_ids_under(self.db, pattern, namespace, filters.sql())
            given = {"path": path, "kind": kind, "since": since, "until": until}
            reason = ", ".join(f"{name}: {value}" for name, value in given.items() if value is not None)
        if dry_run:
            return ids
        with self.db.transaction():
            count = chunk_rows.soft_delete(self.db, ids, reason, utcnow())
            if path is not None and kind is None and since is None and until is None:
                item_rows.forget_files(self.db, item_rows.path_pattern(path), namespace)
        vectors.note_writes(self.db, count)
        if not vectors.maybe_rebuild(self.db) and count >= COMPACT_AFTER_DELETES:
            vectors.compact_index(self.db)
        return ids if count else []

    def restore(self, item_id: int | Iterable[int]) -> list[int]:
        ids = item_rows.require_ids(self.db, item_id)
        rows = chunk_rows.forgotten(self.db, ids)
        if not rows:
            return []
        with self._model.writing() as embedder, self._passages_after(embedder) as fill:
            # soft_delete dropped their vectors: the text row is all that was kept.
            vecs = embedder.embed_documents([chunk_rows.embedding_text(h, t) for _, h, t, _, _ in rows])
            with self.db.transaction():
                chunk_rows.restore(self.db, [r[0] for r in rows], vecs)
            fill([(digest, h, t, kind) for _, h, t, kind, digest in rows])
        vectors.maybe_rebuild(self.db)
        return [r[0] for r in rows]

    def link(self, src: int, dst: int, type: str = "related", note: str | None = None) -> None:
        item_rows.check_link(src, dst, type)
        validate.check_unicode(note, "the link's note")
        self.get(src, touch=False)
        self.get(dst, touch=False)
        item_rows.add_link(self.db, src, dst, type, note)

    def links(self, item_id: int) -> list[dict[str, Any]]:
        return item_rows.links(self.db, item_id)

    def related(self, item_id: int, k: int = 5, *, namespace: str | None = None) -> list[Hit]:
        if not 0 < k <= MAX_K:
            raise ConfigError(f"k must be between 1 and {MAX_K}, got {k}")
        self._require_model_match()
        return related(self.db, self.get(item_id, touch=False), k, namespace)

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
        speaker: str | None = None,
        conversation: str | None = None,
        config: PipelineConfig | None = None,
        log: bool = True,
    ) -> SearchResult:
        started = time.perf_counter()
        filters = validate.search_filters(
            query, namespace, kind, path, tags, since, until, speaker, conversation
        )
        if k > MAX_K:
            # search_log.k is an INTEGER and the retrievers fetch a multiple of k as a BIGINT.
            raise ConfigError(f"k must be at most {MAX_K}, got {k}")
        embedder = self._require_model_match()
        refiner = self._refiner.searching() if self._refiner is not None else contextlib.nullcontext()
        with self.db.searching(), refiner:
            result = SearchPipeline(self.db, embedder, config or self.pipeline_config).run(query, k, filters)
        if log:
            ms = (time.perf_counter() - started) * 1000
            self._search_log.record(result.query, None if filters.empty else repr(filters), k, result.ids, ms)
        if self._team is not None and (namespace is None or team_memory.is_team_namespace(namespace)):
            given = {"kind": kind, "path": path, "tags": tags, "since": since, "until": until}
            turns = {"speaker": speaker, "conversation": conversation, "config": config}
            found = self._team.search(query, k, namespace=namespace, **given, **turns)
            result = team_memory.merge(result, found, k)
        return result

    def _forget_with_team(
        self,
        team: team_memory.Team,
        item_id: Any,
        query: str | None,
        k: int,
        namespace: str | None,
        dry_run: bool,
    ) -> list[int]:
        """forget by id or query with a team attached: lake items leave the lake, the others this file."""
        if item_id is not None:
            ids = [int(item_id)] if isinstance(item_id, int) else [int(i) for i in item_id]
        else:
            ids = self.search(str(query), k=k, namespace=namespace, log=False).ids
        personal = [i for i in ids if not team_memory.is_team_id(i)]
        lake = [i for i in ids if team_memory.is_team_id(i)]
        forgotten = self.forget(personal, dry_run=dry_run) if personal else []
        return forgotten + (lake if dry_run else team.forget(lake, namespace))

    def flush(self) -> None:
        """Write buffered retrieval counters and search-log rows."""
        self._search_log.flush()

    # -- maintenance ------------------------------------------------------------------------
    def reembed(self) -> int:
        return self._reembed(self._model.loaded())

    def _reembed(self, embedder: Embedder) -> int:
        return self._model.reembed(embedder)

    # -- model versions (nbmemory.tune) -----------------------------------------------------
    def models(self) -> list[versions.ModelVersion]:
        return versions.with_base(self.db)

    def use_model(self, version: str) -> int:
        """Switch to a model version: re-embed every item with it (resumably), then make it active.

        Searches keep using the old model and vectors until the swap. Returns the live items.
        """
        chosen = versions.usable(self.db, version)
        embedder = load_for_store(self.db, self.settings.model, self.settings.device, version=chosen)
        # Active in the swap's own transaction: a kill leaves the old version with its vectors
        # or the new one with its.
        return self._model.reembed(embedder, also=lambda: versions.set_active(self.db, version))

    def tune(self, options: Any = None, progress: Callable[[str, float], None] | None = None) -> Any:
        """Mine triples from this memory, fine-tune the model, and adopt it only if the gate agrees.

        See :func:`nbmemory.tune.run.tune_memory` for ``options`` (a ``TuneOptions``) and the
        returned ``TuneReport``.
        """
        from nbmemory.tune.run import tune_memory

        current = self._require_model_match()
        self.flush()  # the search log is one of the query sources
        return tune_memory(
            self.db, current, self.settings, self.pipeline_config, self._model.swap, options, progress
        )

    def stats(self) -> dict[str, Any]:
        self.flush()
        stats = item_rows.stats(self.db, self.path)
        stats["roots"] = len(root_rows.listed(self.db))
        # What the live indexers of this memory (in any process) have pending, doing or failed.
        stats["live"] = runtime.summary(self.path)
        # Passages stored, of those the live chunks need (they differ while the refiner works).
        fingerprint = stats.get("model_fingerprint") if self.settings.passages else None
        if self._refiner is not None:
            stats["refine"] = self._refiner.progress(fingerprint)
        else:
            stats["refine"] = refine_progress(self.db, fingerprint)
        if self._team is not None:
            stats["team"] = self._team.status()
        return stats

    def doctor(self, repair: bool = False) -> DoctorReport:
        report = run_doctor(
            self.db, self._model.loaded, self.reembed, repair, hot.describe, self.settings.passages
        )
        if report.model_ok is not None:
            self._model.set_state(report.model_ok, None if report.model_ok else "model mismatch")
        return report

    def export(self, out: str | os.PathLike[str], include_forgotten: bool = False) -> int:
        self.flush()
        return item_rows.export(self.db, Path(out).expanduser(), include_forgotten)
