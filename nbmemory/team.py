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
from nbmemory.errors import ConfigError
from nbmemory.ingest.remembered import remembered_rows
from nbmemory.items import Item
from nbmemory.search.result import SearchResult
from nbmemory.store import chunks as chunk_rows
from nbmemory.store import team_replica
from nbmemory.store.db import Database, utcnow
from nbmemory.store.team import TEAM_PREFIX, LakeRow, TeamLake, is_team_id, is_team_namespace, new_ids

#: How often, at most, a search asks the lake for new snapshots (seconds).
REFRESH_S = 1.0
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
        self.lake = TeamLake(config.catalog, config.data_path)
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
            self.lake.close()

    # -- following the lake ----------------------------------------------------------------
    def refresh(self, force: bool = False) -> int:
        """Apply the lake's snapshots since the replica's last (at most once every
        :data:`REFRESH_S` seconds unless ``force``); the number of changes applied."""
        with self._lock:
            now = time.monotonic()
            if not force and now - self._checked_at < REFRESH_S:
                return 0
            self._checked_at = now
            db = self.replica().db
            current = self.lake.current_snapshot()
            applied = team_replica.applied_snapshot(db)
            identity = None
            if not self._identity_checked:
                identity = self.lake.identity()
                if team_replica.lake_identity(db) != identity:
                    applied = None  # another lake (or none yet) at this address: read it whole
                self._identity_checked = True
            if applied is not None and applied >= current:
                return 0
            if applied is not None:
                try:
                    changes = self.lake.changes(applied, current)
                except LookupError:  # the snapshots it needs were expired: read the lake again
                    applied = None
            if applied is None:
                rows = self.lake.read_all(current)
                self._apply(db, rows, [], current, reset=True, identity=identity or self.lake.identity())
                self.full_reads += 1
                return len(rows)
            # The net effect of the range, by id: the last change of an item wins.
            last: dict[int, LakeRow | None] = {}
            for change in changes:
                last[change.row.id] = change.row if change.kind == "insert" else None
            held = team_replica.present(db, list(last))
            inserted = [row for i, row in last.items() if row is not None and i not in held]
            deleted = [i for i, row in last.items() if row is None and i in held]
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
        team_replica.apply(db, rows, self._vectors(rows), deleted, snapshot, reset, identity)

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
        embedder = self._embedder()
        vecs = embedder.embed_documents([chunk_rows.embedding_text(r.heading, r.text) for r in chunks])
        now = utcnow()
        rows = [
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
        self.lake.insert(rows)
        self.refresh(force=True)  # this process finds what it wrote at once
        return [_item(row) for row in rows]

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

    # -- search ----------------------------------------------------------------------------
    def search(self, query: str, k: int, **kwargs: Any) -> SearchResult:
        """Search the replica (after following the lake); hits name lake ids and ``store="team"``."""
        self.refresh()
        replica = self.replica()
        result = replica.search(query, k, log=False, **kwargs)
        ids = team_replica.lake_ids(replica.db, [i for h in result.hits for i in (h.id, *h.more)])
        for hit in result.hits:
            hit.id = ids.get(hit.id, hit.id)
            hit.more = [ids.get(i, i) for i in hit.more]
            hit.store = "team"
        return result


def merge(personal: SearchResult, team: SearchResult, k: int) -> SearchResult:
    """One ranking of personal and team hits by score, best first (``personal``'s trace kept:
    the team hits' parts are in the replica's own trace)."""
    hits = sorted([*personal.hits, *team.hits], key=lambda h: -h.score)[:k]
    rejected = personal.rejected and team.rejected
    return SearchResult(personal.query, hits, personal.trace, rejected, personal.reason if rejected else "")


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
