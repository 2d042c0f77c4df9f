"""A team's items in a DuckLake: a catalog (PostgreSQL, or a local ``.ducklake`` file for one
machine) and a data folder that every member reaches.

:class:`TeamLake` is the store layer of a team memory (:mod:`nbmemory.team`): it attaches the
lake, creates its ``items`` table when the role may, writes and deletes rows, reads them all at a
snapshot, and reads what changed between two snapshots. Who may read and who may write is the
catalog database's roles and the storage's permissions; a refusal raises
:class:`~nbmemory.errors.TeamAccessError` naming the catalog, the namespace and the missing right.

DuckLake facts this relies on: vectors are ``FLOAT[]`` (a fixed ``FLOAT[n]`` is refused); lake
tables take no FTS or HNSW index (search runs on a local replica); small writes are inlined into
the catalog's own tables (``ducklake_inlined_data_*``), larger ones are Parquet files in the data
folder; ``ducklake_table_changes`` returns a deleted row with all its columns.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import secrets
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from nbmemory.config import cache_folder
from nbmemory.errors import StoreError, TeamAccessError
from nbmemory.store.extensions import packaged_extension

#: Namespaces that live in the team's lake start with this; every other namespace is personal.
TEAM_PREFIX = "team:"
#: Ids of lake items are drawn at random from [TEAM_ID_MIN, 2**53): above any id a personal file
#: allocates, and exact as a JavaScript number in the front ends' JSON.
TEAM_ID_MIN = 2**50
_TEAM_ID_SPAN = 2**53 - TEAM_ID_MIN
ALIAS = "lake"
#: Seconds a PostgreSQL catalog may take to answer a connection (unless the catalog says).
CONNECT_TIMEOUT_S = 5
_METADATA = f"__ducklake_metadata_{ALIAS}"
# (package, file name in the package, the extension's own name: the file DuckDB loads must be
# called that, since its entry point is named after the file).
_EXTENSIONS = (
    ("duckdb_extension_ducklake", "ducklake", "ducklake"),
    ("duckdb_extension_postgres", "postgres", "postgres_scanner"),
)
_COLUMNS = (
    "id, namespace, kind, text, heading, source, tags, importance, vec, fingerprint, "
    "created_at, updated_at, event_at, speaker, conversation"
)
_DENIED = re.compile(r"permission denied|must be owner|read-only|Permission denied", re.IGNORECASE)


def is_team_namespace(namespace: str | None) -> bool:
    """Whether ``namespace`` lives in the team's lake (``team:<name>``)."""
    return bool(namespace) and str(namespace).startswith(TEAM_PREFIX)


def is_team_id(item_id: int) -> bool:
    """Whether ``item_id`` names a lake item (see :data:`TEAM_ID_MIN`)."""
    return int(item_id) >= TEAM_ID_MIN


@dataclass
class LakeRow:
    """One item of the team's lake, with its vector and the fingerprint of the model that made it."""

    id: int
    namespace: str
    kind: str
    text: str
    heading: str = ""
    source: str | None = None
    tags: list[str] = field(default_factory=list)
    importance: float = 0.5
    vec: np.ndarray | None = None
    fingerprint: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    event_at: datetime | None = None
    speaker: str | None = None
    conversation: str | None = None

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> LakeRow:
        (id_, ns, kind, text, heading, source, tags, imp, vec, fp, created, updated, event, speaker, conv) = (
            row
        )
        return cls(
            int(id_),
            ns,
            kind,
            text,
            heading or "",
            source,
            list(tags or []),
            float(imp if imp is not None else 0.5),
            None if vec is None else np.asarray(vec, dtype=np.float32),
            fp,
            created,
            updated,
            event,
            speaker,
            conv,
        )


@dataclass
class Change:
    """One row of ``ducklake_table_changes``: ``kind`` is ``insert`` or ``delete`` (an update's
    pre-image counts as a delete, its post-image as an insert)."""

    snapshot: int
    kind: str
    row: LakeRow


def new_ids(n: int, request_key: str | None = None) -> list[int]:
    """``n`` lake ids (see :data:`TEAM_ID_MIN`), random, so two machines writing at once never
    need to agree on a sequence; drawn from ``request_key`` when given, so a retried request
    names the items its first try wrote."""
    if request_key is None:
        return [TEAM_ID_MIN + secrets.randbelow(_TEAM_ID_SPAN) for _ in range(n)]
    digests = (hashlib.sha256(f"{request_key}\x00{i}".encode()).digest() for i in range(n))
    return [TEAM_ID_MIN + int.from_bytes(d[:8], "big") % _TEAM_ID_SPAN for d in digests]


@functools.cache
def extension_files() -> tuple[Path, ...]:
    """The ducklake and postgres extension files of the pinned PyPI packages, loadable by path.

    The postgres package ships ``postgres.duckdb_extension`` whose entry point is named
    ``postgres_scanner``: it is loaded through a link of that name in the cache folder.
    """
    files = []
    for package, filename, name in _EXTENSIONS:
        path = packaged_extension(package, filename, extra="team")
        if filename != name:
            link = cache_folder("duckdb-extensions", f"v{duckdb.__version__}") / f"{name}.duckdb_extension"
            if not link.is_symlink() or link.resolve() != path.resolve():
                # Made aside and renamed over: processes starting at once never see a half-made link.
                aside = link.with_name(f"{link.name}.{os.getpid()}")
                aside.unlink(missing_ok=True)
                aside.symlink_to(path)
                os.replace(aside, link)
            path = link
        files.append(path)
    return tuple(files)


def attach_target(catalog: str) -> str:
    """The ``ducklake:...`` string ATTACH takes for ``catalog``: ``postgres:<libpq keywords>``,
    a ``.ducklake`` file path, or either already prefixed with ``ducklake:``."""
    text = catalog.strip()
    if text.startswith("ducklake:"):
        text = text[len("ducklake:") :]
    if not text.startswith("postgres:"):
        text = str(Path(text).expanduser().absolute())
    elif "connect_timeout" not in text:
        # libpq waits for an unreachable host as long as the system does; a memory opening or a
        # search retrying the catalog should not.
        text += f" connect_timeout={CONNECT_TIMEOUT_S}"
    return f"ducklake:{text}"


def catalog_label(catalog: str) -> str:
    """``catalog`` as it may be shown: without its password."""
    return re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", catalog.strip())


def _role(catalog: str) -> str:
    found = re.search(r"\buser\s*=\s*'?([^'\s]+)", catalog)
    return found.group(1) if found else os.environ.get("PGUSER") or os.environ.get("USER") or "?"


class TeamLake:
    """The team's DuckLake, attached to an in-memory DuckDB connection of this process.

    Parameters
    ----------
    catalog:
        ``postgres:dbname=lab host=db.lab user=alice`` (libpq keywords; a password is better in
        ``~/.pgpass`` or ``PGPASSWORD``) or, for one machine, the path of a ``.ducklake`` file.
    data_path:
        The folder (or object-store prefix) holding the lake's Parquet files.
    """

    def __init__(self, catalog: str, data_path: str | os.PathLike[str]) -> None:
        self.catalog = catalog
        self.data_path = str(data_path)
        self.label = catalog_label(catalog)
        self.is_postgres = attach_target(catalog).startswith("ducklake:postgres:")
        self._lock = threading.Lock()
        self._can_write: bool | None = None
        self.con = duckdb.connect(":memory:", config={"autoload_known_extensions": False})
        try:
            for path in extension_files():
                self.con.execute(f"LOAD '{path}'")
            data = self.data_path if "://" in self.data_path else str(Path(self.data_path).expanduser())
            target = attach_target(catalog).replace("'", "''")
            self.con.execute(
                f"ATTACH '{target}' AS {ALIAS} (DATA_PATH '{data.replace(chr(39), chr(39) * 2)}')"
            )
        except duckdb.Error as exc:
            self.con.close()
            if _DENIED.search(str(exc)):
                raise TeamAccessError(
                    f"team catalog {self.label}: role {_role(catalog)!r} may not read it ({_first_line(exc)}); "
                    "ask its owner to GRANT USAGE on its schema and SELECT on its tables"
                ) from None
            raise StoreError(f"cannot attach the team catalog {self.label}: {_first_line(exc)}") from None
        self.has_items = self._ensure_table()

    # -- rights ---------------------------------------------------------------------------
    def _ensure_table(self) -> bool:
        """Create ``items`` where the role may; whether it exists."""
        if self._table_exists():
            return True
        try:
            self.con.execute(
                f"CREATE TABLE IF NOT EXISTS {ALIAS}.items (id BIGINT NOT NULL, namespace VARCHAR NOT NULL, "
                "kind VARCHAR NOT NULL, text VARCHAR NOT NULL, heading VARCHAR, source VARCHAR, "
                "tags VARCHAR[], importance DOUBLE, vec FLOAT[], fingerprint VARCHAR, "
                "created_at TIMESTAMP, updated_at TIMESTAMP, event_at TIMESTAMP, speaker VARCHAR, "
                "conversation VARCHAR)"
            )
        except duckdb.Error as exc:
            if not _DENIED.search(str(exc)):
                raise StoreError(
                    f"cannot create the items table of team catalog {self.label}: {exc}"
                ) from None
            return False  # a reader of a lake nobody wrote to yet: nothing to read
        return True

    def _table_exists(self) -> bool:
        return bool(
            self.con.execute(
                "SELECT count(*) FROM duckdb_tables() WHERE database_name = ? AND table_name = 'items'",
                [ALIAS],
            ).fetchone()[0]  # type: ignore[index]
        )

    def check_write(self, namespace: str) -> None:
        """Raise :class:`TeamAccessError` unless this role may write to the catalog and the data
        folder: checked before anything is written, so a refused write leaves nothing behind."""
        if self._can_write is True:
            return
        missing = []
        role = _role(self.catalog)
        if self.is_postgres:
            with self._reading():
                found = self.con.execute(
                    f"SELECT * FROM postgres_query('{_METADATA}', 'SELECT current_user::text, "
                    "has_table_privilege(''ducklake_snapshot'', ''INSERT'') AS snapshots, "
                    "has_table_privilege(''ducklake_snapshot_changes'', ''INSERT'') AS changes, "
                    "has_table_privilege(''ducklake_table_stats'', ''UPDATE'') AS stats')"
                ).fetchone()
            assert found is not None  # one row, always
            role = str(found[0])
            if not all(found[1:]):
                missing.append(
                    "INSERT and UPDATE on the catalog's tables (PostgreSQL: GRANT INSERT, UPDATE, DELETE "
                    f"ON ALL TABLES IN SCHEMA public TO {role})"
                )
        else:
            catalog_file = Path(attach_target(self.catalog)[len("ducklake:") :])
            if not os.access(catalog_file, os.W_OK):
                missing.append(f"write access to the catalog file {catalog_file}")
        if "://" not in self.data_path:
            folder = Path(self.data_path).expanduser()
            while not folder.exists() and folder != folder.parent:
                folder = folder.parent
            if not os.access(folder, os.W_OK | os.X_OK):
                missing.append(f"write access to the data folder {self.data_path}")
        if not self.has_items:
            self.has_items = self._ensure_table()
            if not self.has_items:
                missing.append("CREATE on the catalog's schema, to create its items table")
        if missing:
            self._can_write = False
            raise TeamAccessError(
                f"team catalog {self.label}: role {role!r} may not write namespace {namespace!r}: it lacks "
                + "; ".join(missing)
                + ". Nothing was written."
            )
        self._can_write = True

    @contextmanager
    def _writing(self, namespace: str) -> Iterator[duckdb.DuckDBPyConnection]:
        self.check_write(namespace)
        with self._lock:
            try:
                yield self.con
            except duckdb.Error as exc:
                if _DENIED.search(str(exc)):
                    raise TeamAccessError(
                        f"team catalog {self.label}: namespace {namespace!r} was refused a write: "
                        f"{_first_line(exc)}. Nothing was written."
                    ) from None
                raise StoreError(f"team catalog {self.label}: write failed: {_first_line(exc)}") from None

    @contextmanager
    def _reading(self) -> Iterator[None]:
        with self._lock:
            try:
                yield
            except duckdb.Error as exc:
                if _DENIED.search(str(exc)):
                    raise TeamAccessError(
                        f"team catalog {self.label}: role {_role(self.catalog)!r} may not read the lake "
                        f"({_first_line(exc)}): the catalog's tables need SELECT, the data folder "
                        f"{self.data_path} read access for this user"
                    ) from None
                raise StoreError(f"team catalog {self.label}: read failed: {_first_line(exc)}") from None

    # -- writes ---------------------------------------------------------------------------
    def insert(self, rows: Sequence[LakeRow]) -> None:
        """Insert ``rows`` in one lake transaction (one snapshot). Only team namespaces are taken:
        nothing personal is ever written to the lake."""
        if rows:
            with self._writing(rows[0].namespace) as con:
                self._insert_rows(con, rows)

    @staticmethod
    def _insert_rows(con: duckdb.DuckDBPyConnection, rows: Sequence[LakeRow]) -> None:
        personal = sorted({r.namespace for r in rows if not is_team_namespace(r.namespace)})
        if personal:
            raise StoreError(f"namespaces {personal} are personal: they are never written to the team lake")
        import pyarrow as pa

        table = pa.table(
            {
                "id": pa.array([r.id for r in rows], pa.int64()),
                "namespace": [r.namespace for r in rows],
                "kind": [r.kind for r in rows],
                "text": [r.text for r in rows],
                "heading": [r.heading for r in rows],
                "source": pa.array([r.source for r in rows], pa.string()),
                "tags": pa.array([list(r.tags) for r in rows], pa.list_(pa.string())),
                "importance": pa.array([r.importance for r in rows], pa.float64()),
                "vec": pa.array(
                    [None if r.vec is None else r.vec.astype(np.float32).tolist() for r in rows],
                    pa.list_(pa.float32()),
                ),
                "fingerprint": pa.array([r.fingerprint for r in rows], pa.string()),
                "created_at": pa.array([r.created_at for r in rows], pa.timestamp("us")),
                "updated_at": pa.array([r.updated_at for r in rows], pa.timestamp("us")),
                "event_at": pa.array([r.event_at for r in rows], pa.timestamp("us")),
                "speaker": pa.array([r.speaker for r in rows], pa.string()),
                "conversation": pa.array([r.conversation for r in rows], pa.string()),
            }
        )
        con.register("_nbm_lake_rows", table)
        try:
            con.execute(f"INSERT INTO {ALIAS}.items ({_COLUMNS}) SELECT {_COLUMNS} FROM _nbm_lake_rows")
        finally:
            con.unregister("_nbm_lake_rows")

    def delete(self, namespace: str, ids: Sequence[int] | None = None) -> list[int]:
        """Delete the items of ``namespace`` (those among ``ids`` when given); their ids."""
        if not self.has_items:
            return []
        with self._writing(namespace) as con:
            where = "namespace = ?" + (" AND id IN (SELECT unnest(?::BIGINT[]))" if ids is not None else "")
            params: list[Any] = [namespace] + ([list(map(int, ids))] if ids is not None else [])
            con.execute("BEGIN")
            try:
                found = [
                    int(r[0])
                    for r in con.execute(f"SELECT id FROM {ALIAS}.items WHERE {where}", params).fetchall()
                ]
                if found:
                    con.execute(f"DELETE FROM {ALIAS}.items WHERE {where}", params)
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        return found

    def replace(self, namespace: str, gone: Sequence[int], rows: Sequence[LakeRow]) -> None:
        """Delete the items ``gone`` of ``namespace`` and insert ``rows`` in one lake transaction
        (one snapshot): a file indexed again is never seen with both or neither of its versions."""
        if not gone and not rows:
            return
        outside = sorted({r.namespace for r in rows if r.namespace != namespace})
        if outside:
            raise StoreError(f"replace in {namespace!r} was given rows of {outside}")
        with self._writing(namespace) as con:
            con.execute("BEGIN")
            try:
                if gone:
                    con.execute(
                        f"DELETE FROM {ALIAS}.items WHERE namespace = ? AND id IN (SELECT unnest(?::BIGINT[]))",
                        [namespace, list(map(int, gone))],
                    )
                if rows:
                    self._insert_rows(con, rows)
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise

    def update(self, row: LakeRow) -> bool:
        """Write ``row``'s fields over the item of its id (one snapshot); whether it was there."""
        with self._writing(row.namespace) as con:
            con.execute(
                f"UPDATE {ALIAS}.items SET text = ?, tags = ?::VARCHAR[], importance = ?, vec = ?::FLOAT[], "
                "fingerprint = ?, updated_at = ?, event_at = ?, speaker = ?, conversation = ? "
                "WHERE id = ? AND namespace = ?",
                [
                    row.text,
                    list(row.tags),
                    row.importance,
                    None if row.vec is None else row.vec.astype(np.float32).tolist(),
                    row.fingerprint,
                    row.updated_at,
                    row.event_at,
                    row.speaker,
                    row.conversation,
                    int(row.id),
                    row.namespace,
                ],
            )
            changed = con.fetchone()
        return bool(changed and changed[0])

    def held_chunks(
        self, namespace: str, sources: Sequence[str], folders: Sequence[str]
    ) -> list[tuple[int, str, str, str]]:
        """``(id, source, heading, text)`` of the items of ``namespace`` whose source is one of
        ``sources`` or lies under one of ``folders`` (what an index of those paths wrote before)."""
        if not self.has_items:
            return []
        prefixes = [f.rstrip(os.sep) + os.sep for f in folders]
        with self._reading():
            found = self.con.execute(
                f"SELECT id, source, heading, text FROM {ALIAS}.items WHERE namespace = ? AND source IS NOT NULL "
                "AND (source IN (SELECT unnest(?::VARCHAR[])) "
                "OR EXISTS (SELECT 1 FROM unnest(?::VARCHAR[]) AS f(p) WHERE starts_with(source, f.p)))",
                [namespace, list(sources), prefixes],
            ).fetchall()
        return [(int(i), str(src), heading or "", text) for i, src, heading, text in found]

    def ids_from(self, namespace: str, pattern: str) -> list[int]:
        """The items of ``namespace`` whose source is ``pattern`` or matches it as a glob."""
        if not self.has_items:
            return []
        with self._reading():
            found = self.con.execute(
                f"SELECT id FROM {ALIAS}.items WHERE namespace = ? AND (source = ? OR source GLOB ?) ORDER BY id",
                [namespace, pattern, pattern],
            ).fetchall()
        return [int(r[0]) for r in found]

    def rows(self, ids: Sequence[int]) -> list[LakeRow]:
        """The items among ``ids`` that the lake holds."""
        if not ids or not self.has_items:
            return []
        with self._reading():
            found = self.con.execute(
                f"SELECT {_COLUMNS} FROM {ALIAS}.items WHERE id IN (SELECT unnest(?::BIGINT[]))",
                [list(map(int, ids))],
            ).fetchall()
        return [LakeRow.from_row(r) for r in found]

    def namespaces_of(self, ids: Sequence[int]) -> dict[int, str]:
        """The namespace of each of ``ids`` found in the lake."""
        if not ids or not self.has_items:
            return {}
        with self._reading():
            rows = self.con.execute(
                f"SELECT id, namespace FROM {ALIAS}.items WHERE id IN (SELECT unnest(?::BIGINT[]))",
                [list(map(int, ids))],
            ).fetchall()
        return {int(i): str(ns) for i, ns in rows}

    # -- reads ----------------------------------------------------------------------------
    def current_snapshot(self) -> int:
        """The id of the lake's latest snapshot."""
        with self._reading():
            found = self.con.execute(f"SELECT id FROM {ALIAS}.current_snapshot()").fetchone()
        assert found is not None  # a lake has a first snapshot from its creation on
        return int(found[0])

    def identity(self) -> str:
        """What tells this lake from another one at the same catalog address (one dropped and made
        again): its oldest snapshot's id and time."""
        with self._reading():
            found = self.con.execute(
                f"SELECT snapshot_id, snapshot_time::VARCHAR FROM {ALIAS}.snapshots() ORDER BY snapshot_id LIMIT 1"
            ).fetchone()
        assert found is not None  # a lake has a first snapshot from its creation on
        return f"{found[0]}@{found[1]}"

    def read_all(self, snapshot: int) -> list[LakeRow]:
        """Every item as of ``snapshot``."""
        with self._reading():
            if not self.has_items:
                self.has_items = self._table_exists()
            if not self.has_items:
                return []
            rows = self.con.execute(
                f"SELECT {_COLUMNS} FROM {ALIAS}.items AT (VERSION => {int(snapshot)}) ORDER BY id"
            ).fetchall()
        return [LakeRow.from_row(r) for r in rows]

    def changes(self, after: int, upto: int) -> list[Change]:
        """What changed in ``items`` in the snapshots after ``after`` up to ``upto``, in order.
        Raises :class:`LookupError` when a snapshot of that range is gone (expired)."""
        if upto <= after:
            return []
        with self._reading():
            if not self.has_items:
                self.has_items = self._table_exists()
            if not self.has_items:
                return []
            try:
                rows = self.con.execute(
                    f"SELECT snapshot_id, change_type, {_COLUMNS} FROM "
                    f"ducklake_table_changes('{ALIAS}', 'main', 'items', {int(after) + 1}, {int(upto)}) "
                    "ORDER BY snapshot_id, rowid, change_type DESC"
                ).fetchall()
            except duckdb.InvalidInputException as exc:
                if "No snapshot found" in str(exc):
                    raise LookupError(str(exc)) from None
                raise
        kinds = {
            "insert": "insert",
            "update_postimage": "insert",
            "delete": "delete",
            "update_preimage": "delete",
        }
        return [Change(int(r[0]), kinds[r[1]], LakeRow.from_row(r[2:])) for r in rows]

    def close(self) -> None:
        with self._lock:
            self.con.close()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    denied = re.search(r"ERROR:\s*(permission denied[^\n]*)", text)
    return denied.group(1).strip() if denied else text.splitlines()[0] if text else type(exc).__name__
