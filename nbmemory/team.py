"""A team memory beside the personal one: namespaces ``team:<name>`` live in a DuckLake shared by a
lab group or a JupyterHub (:mod:`nbmemory.store.team`), everything else stays in the personal file.

:class:`Team` is what a :class:`~nbmemory.Memory` opened with ``team=...`` delegates to: it writes
team namespaces to the lake, keeps a local replica of the lake (a memory file of its own in the
cache folder, searched with the same code as the personal file) in step with the lake's snapshots,
and merges the replica's hits with the personal ones, each hit saying where it lives
(``Hit.store``: ``"personal"`` or ``"team"``).

The replica follows the lake: before a search, at most once every :data:`REFRESH_S` seconds, it
reads the changes of the snapshots since the one it applied (``ducklake_table_changes``), never
the whole lake again (unless the snapshots it needs were expired). Rows arrive with their vectors:
a row made by the model in use is not embedded again.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from nbmemory.config import cache_folder
from nbmemory.embed.base import Embedder
from nbmemory.errors import ConfigError, NotFoundError, StoreError, TeamAccessError
from nbmemory.ingest.indexer import Indexer, IndexReport, batch_chunks, shown_path, walk
from nbmemory.ingest.redact import redact
from nbmemory.ingest.remembered import remembered_rows
from nbmemory.items import Hit, Item
from nbmemory.search.result import SearchResult
from nbmemory.store import chunks as chunk_rows
from nbmemory.store import team_replica
from nbmemory.store.db import Database, utcnow
from nbmemory.store.team import (
    TEAM_PREFIX,
    LakeRow,
    TeamLake,
    catalog_label,
    is_team_id,
    is_team_namespace,
    new_ids,
)

#: How often, at most, a search asks the lake for new snapshots (seconds).
REFRESH_S = 1.0
#: How often, at most, a search tries again to reach a lake it could not reach (seconds): each
#: try may wait for the catalog's connect timeout.
RETRY_S = 30.0
ENV = "NBMEMORY_TEAM"
__all__ = [
    "TEAM_PREFIX",
    "Team",
    "TeamConfig",
    "check_personal",
    "is_team_id",
    "is_team_ids",
    "is_team_namespace",
    "merge",
    "team_config",
]


@dataclass(frozen=True)
class TeamConfig:
    """Where a team memory lives: a DuckLake catalog and its data folder.

    ``catalog`` is ``postgres:<libpq keywords>`` (``postgres:dbname=lab host=db.lab user=alice``;
    keep a password in ``~/.pgpass`` or ``PGPASSWORD``) or, for one machine, the path of a
    ``.ducklake`` catalog file; either may start with ``ducklake:``. ``data_path`` is the folder
    every member reaches (a shared file system) where the lake's Parquet files are kept.

    As one string (``Memory(team=...)``, ``NBMEMORY_TEAM``, ``nbmemory --team``) it is
    ``<catalog>|<data path>``, e.g. ``postgres:dbname=lab host=db.lab user=alice|/shared/lab-memory``.
    """

    catalog: str
    data_path: str

    def __post_init__(self) -> None:
        if not self.catalog.strip() or not str(self.data_path).strip():
            raise ConfigError(f"a team needs a catalog and a data path, got {self!r}")

    @classmethod
    def parse(cls, text: str) -> TeamConfig:
        """``<catalog>|<data path>`` (see the class docstring)."""
        catalog, bar, data = text.rpartition("|")
        if not bar or not catalog.strip() or not data.strip():
            raise ConfigError(
                f"team {text!r} is not '<catalog>|<data path>', e.g. "
                "'postgres:dbname=lab host=db.lab user=alice|/shared/lab-memory'"
            )
        return cls(catalog.strip(), data.strip())

    @property
    def key(self) -> str:
        """Names this lake's replica folder: the same catalog and data path, the same replica."""
        return hashlib.sha256(f"{self.catalog}\x00{self.data_path}".encode()).hexdigest()[:16]


def is_team_ids(item_id: int | Sequence[int] | None) -> bool:
    """Whether ``item_id`` (an id or a list of them) names a lake item."""
    if item_id is None:
        return False
    return any(is_team_id(i) for i in ([item_id] if isinstance(item_id, int) else item_id))


def team_config(team: TeamConfig | str | None) -> TeamConfig | None:
    """The team to attach: ``team`` when given, else ``NBMEMORY_TEAM``; None for none (``""``
    attaches none whatever the environment says)."""
    if isinstance(team, TeamConfig):
        return team
    text = team if team is not None else os.environ.get(ENV, "")
    return TeamConfig.parse(text) if text.strip() else None


class SearchesMemory(Protocol):
    """What the replica must offer: a memory file with the facade's search."""

    db: Database

    @property
    def embedder(self) -> Embedder: ...

    @property
    def search(self) -> Callable[..., SearchResult]: ...

    def close(self) -> None: ...

    def wait_refined(self, timeout: float | None = None) -> bool: ...

    def refining_after(self) -> contextlib.AbstractContextManager[None]: ...


#: Opens the replica file: (path, home folder, embedder) -> a memory that searches it.
OpenReplica = Callable[[Path, Path, Embedder], SearchesMemory]


class Team:
    """The team side of one :class:`~nbmemory.Memory`.

    Parameters
    ----------
    config:
        The lake (:class:`TeamConfig`).
    embedder:
        Gives the personal memory's embedder (loaded on first use): team rows are embedded with it.
    open_replica:
        Opens the replica's memory file (the facade passes a function making a ``Memory``).
    personal:
        The personal memory file: each has a replica of its own (two memories of one user that
        attach the same team do not contend for one file).
    """

    def __init__(
        self,
        config: TeamConfig,
        embedder: Callable[[], Embedder],
        open_replica: OpenReplica,
        personal: Path,
    ) -> None:
        self.config = config
        self.personal = Path(personal).expanduser().absolute()
        self.label = catalog_label(config.catalog)
        self._lake: TeamLake | None = None
        #: Why the lake cannot be reached now (None: it can): searches then use the replica as
        #: of the last snapshot it applied, writes are refused.
        self.unreachable: str | None = None
        self._tried_at = 0.0
        self._embedder = embedder
        self._open_replica = open_replica
        self._replica: SearchesMemory | None = None
        self._lock = threading.RLock()
        self._checked_at = 0.0
        self._identity_checked = False
        #: Lake changes (rows inserted or deleted) this process applied to the replica, and the
        #: snapshots they came from: a client restarted reads only those it missed.
        self.changes_applied = 0
        self.snapshots_read = 0
        self.full_reads = 0
        # A role the catalog refuses is told now; a catalog that cannot be reached is noted in
        # ``unreachable``, and this memory opens on the replica it has.
        try:
            self._attach()
        except TeamAccessError:
            raise
        except StoreError:
            pass  # noted in ``unreachable``

    def _attach(self) -> TeamLake:
        """The attached lake; raises :class:`StoreError` when it cannot be reached (noted in
        :attr:`unreachable`) and :class:`TeamAccessError` when this role may not read it."""
        with self._lock:
            if self._lake is None:
                self._tried_at = time.monotonic()
                try:
                    self._lake = TeamLake(self.config.catalog, self.config.data_path)
                except TeamAccessError:
                    raise
                except StoreError as exc:
                    self.unreachable = str(exc)
                    raise
                self.unreachable = None
            return self._lake

    @property
    def lake(self) -> TeamLake:
        """The lake, attached now if it was not (raises :class:`StoreError` when it cannot be reached)."""
        try:
            return self._attach()
        except TeamAccessError:
            raise
        except StoreError:
            raise StoreError(
                f"the team catalog {self.label} cannot be reached ({self.unreachable}): nothing was "
                "written; searches use this machine's copy of the team memory until it answers"
            ) from None

    def _lost(self, exc: StoreError) -> None:
        """The lake stopped answering: searches use the replica until a later try reaches it."""
        with self._lock:
            self.unreachable = str(exc)
            self._tried_at = time.monotonic()
            if self._lake is not None:
                with contextlib.suppress(Exception):
                    self._lake.close()
                self._lake = None

    @property
    def replica_path(self) -> Path:
        """``<cache>/team/<catalog and data path's key>/replica-<personal file's key>.duckdb``."""
        personal = hashlib.sha256(str(self.personal).encode()).hexdigest()[:12]
        return cache_folder("team", self.config.key) / f"replica-{personal}.duckdb"

    def replica(self) -> SearchesMemory:
        with self._lock:
            if self._replica is None:
                path = self.replica_path
                self._replica = self._open_replica(path, path.parent, self._embedder())
                # Checked against the file's model: a first open records it and makes its vectors table.
                self._replica.embedder  # noqa: B018
                team_replica.ensure_tables(self._replica.db)
            return self._replica

    def close(self) -> None:
        with self._lock:
            if self._replica is not None:
                self._replica.close()
                self._replica = None
            if self._lake is not None:
                self._lake.close()
                self._lake = None

    def wait_refined(self, timeout: float | None = None) -> bool:
        """Until the replica's passages are made (see :meth:`Memory.wait_refined`)."""
        return self.replica().wait_refined(timeout)

    def status(self) -> dict[str, Any]:
        """What ``stats`` says of the team: its catalog, the replica's items and snapshot, and
        whether the lake answers."""
        replica = self.replica()
        return {
            "catalog": self.label,
            "data_path": self.config.data_path,
            "items": team_replica.count(replica.db),
            "snapshot": team_replica.applied_snapshot(replica.db),
            "unreachable": self.unreachable,
        }

    # -- following the lake ----------------------------------------------------------------
    def refresh(self, force: bool = False) -> int:
        """Apply the lake's snapshots since the replica's last (at most once every
        :data:`REFRESH_S` seconds unless ``force``); the number of changes applied."""
        with self._lock:
            now = time.monotonic()
            if not force and now - self._checked_at < REFRESH_S:
                return 0
            if self._lake is None and not force and now - self._tried_at < RETRY_S:
                return 0  # unreachable a moment ago: the replica as it is
            self._checked_at = now
            try:
                return self._follow(self._attach())
            except TeamAccessError:
                raise
            except StoreError as exc:
                # A write that landed is not undone by a refresh that failed after it: the
                # replica catches up at a later try.
                self._lost(exc)
                return 0

    def _follow(self, lake: TeamLake) -> int:
        with self._lock:
            db = self.replica().db
            current = lake.current_snapshot()
            applied = team_replica.applied_snapshot(db)
            identity = None
            if not self._identity_checked:
                identity = lake.identity()
                if team_replica.lake_identity(db) != identity:
                    applied = None  # another lake (or none yet) at this address: read it whole
                self._identity_checked = True
            if applied is not None and applied >= current:
                return 0
            if applied is not None:
                try:
                    changes = lake.changes(applied, current)
                except LookupError:  # the snapshots it needs were expired: read the lake again
                    applied = None
            if applied is None:
                rows = lake.read_all(current)
                self._apply(db, rows, [], current, reset=True, identity=identity or lake.identity())
                self.full_reads += 1
                return len(rows)
            # The net effect of the range, by id: the last change of an item wins; an item
            # deleted and inserted again (an update) is replaced.
            last: dict[int, LakeRow | None] = {}
            for change in changes:
                last[change.row.id] = change.row if change.kind == "insert" else None
            rewritten = {c.row.id for c in changes if c.kind == "delete"}
            held = team_replica.present(db, list(last))
            inserted = [
                row for i, row in last.items() if row is not None and (i not in held or i in rewritten)
            ]
            deleted = [i for i, row in last.items() if i in held and (row is None or i in rewritten)]
            self._apply(db, inserted, deleted, current)
            self.changes_applied += len(changes)
            self.snapshots_read += current - applied
            return len(changes)

    def _apply(
        self,
        db: Database,
        rows: list[LakeRow],
        deleted: list[int],
        snapshot: int,
        reset: bool = False,
        identity: str | None = None,
    ) -> None:
        vecs = self._vectors(rows)
        # The replica's passages (sentence windows) of new prose follow in its background refiner,
        # as a personal file's do: team hits then rank as personal ones of the same text.
        with self.replica().refining_after():
            team_replica.apply(db, rows, vecs, deleted, snapshot, reset, identity)

    def _vectors(self, rows: Sequence[LakeRow]) -> np.ndarray:
        """The rows' vectors: the lake's own where the model in use made them, else embedded here."""
        embedder = self._embedder()
        out = np.zeros((len(rows), embedder.dim), dtype=np.float32)
        again = []
        for i, row in enumerate(rows):
            if (
                row.fingerprint == embedder.fingerprint
                and row.vec is not None
                and len(row.vec) == embedder.dim
            ):
                out[i] = row.vec
            else:
                again.append(i)
        if again:
            texts = [chunk_rows.embedding_text(rows[i].heading, rows[i].text) for i in again]
            out[again] = embedder.embed_documents(texts)
        return out

    # -- writes ----------------------------------------------------------------------------
    def remember_many(
        self,
        texts: Sequence[str],
        namespace: str,
        tags: list[str],
        importance: float,
        sources: Sequence[str | None],
        headings: Sequence[str],
        times: Sequence[datetime | None],
        speakers: Sequence[str | None],
        conversations: Sequence[str | None],
        request_key: str | None = None,
    ) -> list[Item]:
        """Write remembered texts (checked by the caller) to the lake in one snapshot; the items.
        A ``request_key`` already answered gives the items its first try wrote."""
        self.lake.check_write(namespace)  # before the model embeds anything
        ids = new_ids(len(texts), request_key)
        if request_key is not None:
            earlier = {row.id: row for row in self.lake.rows(ids)}
            if earlier:
                return [_item(earlier[i]) for i in ids if i in earlier]
        chunks = remembered_rows(
            texts, namespace, tags, importance, sources, headings, times, speakers, conversations
        )
        rows = self._lake_rows(ids, chunks)
        self.lake.insert(rows)
        self.refresh(force=True)  # this process finds what it wrote at once
        return [_item(row) for row in rows]

    def _lake_rows(self, ids: Sequence[int], chunks: Sequence[chunk_rows.NewChunk]) -> list[LakeRow]:
        """``chunks`` embedded with the model in use, as lake rows of ``ids``."""
        embedder = self._embedder()
        vecs = embedder.embed_documents([chunk_rows.embedding_text(r.heading, r.text) for r in chunks])
        now = utcnow()
        return [
            LakeRow(
                id=lake_id,
                namespace=r.namespace,
                kind=r.kind,
                text=r.text,
                heading=r.heading,
                source=r.source,
                tags=list(r.tags),
                importance=r.importance,
                vec=vec,
                fingerprint=embedder.fingerprint,
                created_at=now,
                updated_at=now,
                event_at=r.event_at,
                speaker=r.speaker,
                conversation=r.conversation,
            )
            for lake_id, r, vec in zip(ids, chunks, vecs, strict=True)
        ]

    def index(
        self,
        paths: Sequence[str | os.PathLike[str]],
        namespace: str,
        max_bytes: int,
        log: Callable[[str], None] | None = None,
    ) -> IndexReport:
        """Index files and folders into the team namespace ``namespace``.

        Each file is read and chunked as a personal index does (the same checks, secrets
        redacted), then compared with the chunks the lake holds from it, by text: only new text is
        embedded, and a changed file's gone and new chunks change in one snapshot. Files gone
        from an indexed folder leave the lake (not those under a folder that could not be listed).
        """
        started = time.perf_counter()
        lake = self.lake
        lake.check_write(namespace)  # before the model embeds anything
        log = log or (lambda message: None)
        report = IndexReport()
        roots = []
        for root in (Path(p).expanduser().absolute() for p in paths):
            if root.exists():
                roots.append(root)
            else:
                report.skipped.append((shown_path(str(root)), "no such file or folder"))
        unlistable: list[str] = []

        def unlisted(exc: OSError) -> None:
            unlistable.append(str(exc.filename) + os.sep)
            report.skipped.append((shown_path(str(exc.filename)), f"cannot list folder: {exc.strerror}"))

        files = [f for root in roots for f in walk(root, unlisted)]
        seen = {str(f) for f in files}
        held: dict[str, dict[str, list[int]]] = {}
        folders = [str(r) for r in roots if r.is_dir()]
        for lake_id, source, heading, text in lake.held_chunks(namespace, sorted(seen), folders):
            held.setdefault(source, {}).setdefault(chunk_rows.content_hash(heading, text), []).append(lake_id)
        embedder = self._embedder()
        reader = Indexer(self.replica().db, embedder, max_bytes, log=log, passages=False)
        gone: list[int] = []
        new: list[chunk_rows.NewChunk] = []
        batch = batch_chunks(embedder)
        for file in files:
            report.files_seen += 1
            rows = reader.read_file(file, namespace, report)
            if rows is None:
                continue  # skipped (the report says why): what the lake holds of it stays
            existing = {digest: list(ids) for digest, ids in held.pop(str(file), {}).items()}
            fresh = []
            for row in rows:
                ids = existing.get(row.hash)
                if ids:
                    ids.pop(0)
                    report.chunks_kept += 1
                else:
                    fresh.append(row)
            stale = [i for ids in existing.values() for i in ids]
            if not fresh and not stale:
                report.files_unchanged += 1
                continue
            report.files_changed += 1
            new += fresh
            gone += stale
            if len(new) >= batch:
                self._write_index(namespace, gone, new, report)
                gone, new = [], []
        for source, chunks in held.items():
            # Held but not seen: named under an indexed folder that no longer has it.
            if source not in seen and not any(source.startswith(u) for u in unlistable):
                report.files_removed += 1
                gone += [i for ids in chunks.values() for i in ids]
        self._write_index(namespace, gone, new, report)
        self.refresh(force=True)
        report.seconds = time.perf_counter() - started
        return report

    def _write_index(
        self, namespace: str, gone: list[int], new: list[chunk_rows.NewChunk], report: IndexReport
    ) -> None:
        rows = self._lake_rows(new_ids(len(new)), new) if new else []
        self.lake.replace(namespace, gone, rows)
        report.chunks_added += len(rows)
        report.chunks_embedded += len(rows)
        report.chunks_removed += len(gone)

    def get(self, item_id: int) -> Item:
        """The lake item ``item_id`` (read from the lake, not the replica: it is current)."""
        found = self.lake.rows([item_id])
        if not found:
            raise NotFoundError(f"no item with id {item_id} in the team catalog {self.label}")
        return _item(found[0])

    def update(
        self,
        item_id: int,
        text: str | None,
        tags: list[str] | None,
        importance: float | None,
        event: dict[str, Any],
    ) -> Item:
        """Change a lake item's text (embedded again), tags, importance or event fields in one
        snapshot; the item as written."""
        found = self.lake.rows([item_id])
        if not found:
            raise NotFoundError(f"no item with id {item_id} in the team catalog {self.label}")
        row = found[0]
        self.lake.check_write(row.namespace)
        if text is not None and text.strip() and text.strip() != row.text:
            embedder = self._embedder()
            row.text = redact(text.strip()).text
            row.vec = embedder.embed_documents([chunk_rows.embedding_text(row.heading, row.text)])[0]
            row.fingerprint = embedder.fingerprint
        if tags is not None:
            row.tags = list(tags)
        if importance is not None:
            row.importance = importance
        row.event_at = event.get("event_at", row.event_at)
        row.speaker = event.get("speaker", row.speaker)
        row.conversation = event.get("conversation", row.conversation)
        row.updated_at = utcnow()
        if not self.lake.update(row):
            raise NotFoundError(f"item {item_id} left the team catalog {self.label} while it was updated")
        self.refresh(force=True)
        return _item(row)

    def forget(self, ids: Sequence[int], namespace: str | None = None) -> list[int]:
        """Delete lake items by id (of ``namespace`` when given); the ids deleted."""
        found = self.lake.namespaces_of(ids)
        if namespace is not None:
            found = {i: ns for i, ns in found.items() if ns == namespace}
        deleted: list[int] = []
        for ns in sorted(set(found.values())):
            deleted += self.lake.delete(ns, [i for i, n in found.items() if n == ns])
        if deleted:
            self.refresh(force=True)
        return sorted(deleted)

    def forget_path(self, pattern: str, namespace: str, dry_run: bool = False) -> list[int]:
        """Delete the items of ``namespace`` indexed from ``pattern`` (a path or a glob); their ids.
        The lake keeps no mark of it: an index of the folder that still has the file brings it back."""
        ids = self.lake.ids_from(namespace, pattern)
        if dry_run or not ids:
            return ids
        deleted = self.lake.delete(namespace, ids)
        self.refresh(force=True)
        return sorted(deleted)

    # -- search ----------------------------------------------------------------------------
    def search(self, query: str, k: int, **kwargs: Any) -> SearchResult:
        """Search the replica (after following the lake); hits name lake ids and ``store="team"``."""
        self.refresh()
        replica = self.replica()
        result = replica.search(query, k, log=False, **kwargs)
        result.trace.team = {
            "snapshot": team_replica.applied_snapshot(replica.db),
            "unreachable": self.unreachable,
        }
        ids = team_replica.lake_ids(replica.db, [i for h in result.hits for i in (h.id, *h.more)])
        for hit in result.hits:
            hit.id = ids.get(hit.id, hit.id)
            hit.more = [ids.get(i, i) for i in hit.more]
            hit.store = "team"
        for stage in result.trace.stages:  # merge reads the hits' stage scores by their lake ids
            stage.scores = {ids.get(i, i): score for i, score in stage.scores.items()}
        return result


def merge(personal: SearchResult, team: SearchResult, k: int) -> SearchResult:
    """One ranking of personal and team hits (``personal``'s trace kept: the team hits' parts
    are in the replica's own trace).

    Each side keeps its own order (its diversity and recency stages ran on it); the two are
    merged head by head on a score both sides put on the same scale: a hit's cross-encoder score
    when the rerank stage scored it, else its convex fusion score, else its vector retriever's
    cosine, else its BM25 score. The final score is not used: stages like MMR rescale it within
    their own side's candidates, and reciprocal rank fusion's scores are ranks.
    The result says "no confident answer" when every side that found something said so.
    """
    mine, theirs = _comparable(personal), _comparable(team)
    hits: list[Hit] = []
    a, b = list(personal.hits), list(team.hits)
    while len(hits) < k and (a or b):
        take_a = bool(a) and (not b or mine.get(a[0].id, a[0].score) >= theirs.get(b[0].id, b[0].score))
        hits.append(a.pop(0) if take_a else b.pop(0))
    found = [r for r in (personal, team) if r.hits]
    rejected = bool(found) and all(r.rejected for r in found)
    reason = next((r.reason for r in found if r.rejected), "") if rejected else ""
    personal.trace.team = team.trace.team
    return SearchResult(personal.query, hits, personal.trace, rejected, reason)


def _comparable(result: SearchResult) -> dict[int, float]:
    """Each hit's score from the latest stage whose scores mean the same in any store."""
    trace = result.trace
    # Not RRF's: a rank-based score says nothing across two rankings.
    named = [trace.stage(n) for n in ("rerank", "convex", "vector", "bm25")]
    scores: dict[int, float] = {}
    for stage in reversed([s for s in named if s is not None]):
        scores.update(stage.scores)  # the earlier in ``named``, the later it writes: it wins
    return scores


def check_personal(namespace: str | None) -> None:
    """Refuse a team namespace where no team is attached: it would land in the personal file."""
    if is_team_namespace(namespace):
        raise ConfigError(
            f"namespace {namespace!r} belongs to a team ({TEAM_PREFIX}<name>) but this memory has none: "
            f"open it with team='<catalog>|<data path>' (or set {ENV}), or use another namespace"
        )


def _item(row: LakeRow) -> Item:
    return Item(
        id=row.id,
        namespace=row.namespace,
        kind=row.kind,
        source=row.source,
        text=row.text,
        heading=row.heading,
        tags=list(row.tags),
        importance=row.importance,
        created_at=row.created_at,
        updated_at=row.updated_at,
        event_at=row.event_at,
        speaker=row.speaker,
        conversation=row.conversation,
    )
