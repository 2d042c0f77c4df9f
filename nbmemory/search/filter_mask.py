"""Search filters evaluated on the memory-resident index's columns: a mask of rows, no SQL.

Through SQL, a filtered search of the memory-resident index (:mod:`nbmemory.search.hot`) would
read the rows matching its filters from the chunks table, one statement per retriever and search,
each a fixed cost, with DuckDB's threads competing with BLAS's for the cores. Here the index holds
what the filters read, per row: namespace, kind, source, speaker and conversation as integer
codes over their distinct values, tags likewise (one code per distinct list), ``updated_at``
and ``event_at`` as microseconds. A :class:`~nbmemory.search.filters.Filters` becomes a boolean
mask over the rows from those arrays; a test over a column's distinct values (a glob, a kind's
prefix, a tag set) is made once per distinct value and kept.

Never a wrong answer: each field is evaluated only where :meth:`Filters.sql` gives, for the
value asked, exactly the SQL this module implements (:data:`_RULES`); a field it does not know,
a value of another type, or SQL written another way makes :func:`plan` return None and the
caller reads the rows through SQL. ``tests/search/test_filter_mask.py`` holds the arrays'
answer against the SQL condition's on random memories and filters.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nbmemory.search.filters import Filters
from nbmemory.store import index_reads

#: Columns coded over their distinct values, and what is read for each (the tags as JSON text:
#: one string per distinct list, decoded once per distinct value).
CODED: dict[str, str] = {
    "namespace": "namespace",
    "kind": "kind",
    "source": "source",
    "tags": "CAST(to_json(tags) AS VARCHAR)",
    "speaker": "speaker",
    "conversation": "conversation",
}
#: Timestamp columns, held as microseconds since the epoch (``NULL_TIME`` for NULL).
TIMES = ("updated_at", "event_at")
NULL_TIME = np.iinfo(np.int64).min
_EPOCH = datetime(1970, 1, 1)
_MICROSECOND = timedelta(microseconds=1)
#: Distinct filters whose plans are kept (:func:`plan`), and masks per index (:class:`Columns`).
MAX_PLANS = 256
MAX_MASKS = 32


class Coded:
    """One column as ``int32`` codes over its distinct values (which only grow: a value no row
    holds any more keeps its code). A test of the distinct values is kept per key and extended
    to values coded since (:meth:`table`)."""

    def __init__(self) -> None:
        self.values: list[Any] = []
        self.code_of: dict[Any, int] = {}
        self.codes = np.empty(0, dtype=np.int32)
        self._tables: dict[Any, np.ndarray] = {}
        self._arrow: pa.Array | None = None

    def code(self, value: Any) -> int:
        found = self.code_of.get(value)
        if found is None:
            found = self.code_of[value] = len(self.values)
            self.values.append(value)
        return found

    def encode(
        self, column: pa.ChunkedArray | pa.Array, decode: Callable[[Any], Any] | None = None
    ) -> np.ndarray:
        """Codes of an arrow column of strings (nulls are the value None); ``decode``: what a
        distinct string stands for (the tags' JSON)."""
        whole = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        encoded = pc.dictionary_encode(whole)
        distinct = encoded.dictionary.to_pylist()
        first = not self.values
        lookup = np.array(
            [self.code(decode(v) if decode else v) for v in distinct] + [self.code(None)], dtype=np.int32
        )
        if first and decode is None:
            # The first values coded are the dictionary's, in order: its arrow copy is at hand.
            self._arrow = pa.concat_arrays(
                [encoded.dictionary.cast(pa.string()), pa.array([None], type=pa.string())]
            )
        at = encoded.indices.fill_null(len(distinct)).to_numpy(zero_copy_only=False)
        return lookup[at.astype(np.int64, copy=False)]

    def arrow(self, start: int) -> pa.Array:
        """The distinct values from code ``start`` on as an arrow array (of strings: kept, and
        extended by the values coded since)."""
        have = 0 if self._arrow is None else len(self._arrow)
        if have < len(self.values):
            fresh = pa.array(self.values[have:], type=pa.string())
            self._arrow = fresh if self._arrow is None else pa.concat_arrays([self._arrow, fresh])
        return (self._arrow if self._arrow is not None else pa.array([], type=pa.string())).slice(start)

    def table(self, key: Any, test: Callable[[int], np.ndarray]) -> np.ndarray:
        """``test`` (a code -> one bool per distinct value from that code on) of every distinct
        value, by code; made once per ``key`` and extended to the values coded since."""
        held = self._tables.get(key)
        start = 0 if held is None else len(held)
        if start < len(self.values):
            fresh = np.asarray(test(start), dtype=bool)
            held = fresh if held is None else np.concatenate([held, fresh])
            if len(self._tables) >= MAX_MASKS * 4:
                self._tables.clear()
            self._tables[key] = held
        return held if held is not None else np.zeros(0, dtype=bool)

    def matching(self, key: Any, test: Callable[[int], np.ndarray]) -> np.ndarray:
        """Per row, whether its value passes ``test``."""
        return self.table(key, test)[self.codes]


class Columns:
    """The filter columns of a :class:`~nbmemory.search.hot.HotIndex`, row for row.

    ``present``: which of :data:`CODED` and :data:`TIMES` the chunks table has (a store from
    before a column's migration lacks it); a filter on a missing one is left to SQL.
    """

    def __init__(self, present: Iterable[str] = ()) -> None:
        self.present = frozenset(present)
        self.coded = {name: Coded() for name in CODED if name in self.present}
        self.times = {name: np.empty(0, dtype=np.int64) for name in TIMES if name in self.present}
        self.n = 0
        #: Masks already made (:func:`mask`), dropped by every change of the rows.
        self.masks: dict[Filters, np.ndarray] = {}
        #: What other stages derive from the columns (a conversation's turns in order,
        #: :mod:`~nbmemory.search.turns`), dropped with the masks.
        self.derived: dict[Any, Any] = {}

    @staticmethod
    def present_in(con: Any) -> list[str]:
        """The filter columns the chunks table has, through ``con``."""
        names = set(index_reads.chunk_columns(con))
        return [c for c in (*CODED, *TIMES) if c in names]

    def select(self) -> str:
        """The columns to read, aliased by name, each after a comma (they follow ``id, live,
        seq`` in the index's reads)."""
        return "".join(f", {CODED[c]} AS {c}" for c in self.coded) + "".join(f", {c}" for c in self.times)

    def read(self, table: pa.Table) -> None:
        """All rows, from the index's first read (``table`` ordered as its rows)."""
        for name, coded in self.coded.items():
            coded.codes = coded.encode(table.column(name), _tag_set if name == "tags" else None)
        for name in self.times:
            self.times[name] = _micros(table.column(name))
        self.n = table.num_rows
        self.masks.clear()
        self.derived.clear()

    def grow(self, count: int) -> None:
        """Rows added at the end (empty until :meth:`put`)."""
        for coded in self.coded.values():
            coded.codes = np.concatenate([coded.codes, np.full(count, coded.code(None), dtype=np.int32)])
        for name, values in self.times.items():
            self.times[name] = np.concatenate([values, np.full(count, NULL_TIME, dtype=np.int64)])
        self.n += count
        self.masks.clear()
        self.derived.clear()

    def put(self, rows: np.ndarray, table: pa.Table) -> None:
        """Rows ``rows`` as read again (``table``, one row each, in the same order)."""
        if len(rows) == 0:
            return
        for name, coded in self.coded.items():
            coded.codes[rows] = coded.encode(table.column(name), _tag_set if name == "tags" else None)
        for name in self.times:
            self.times[name][rows] = _micros(table.column(name))
        self.masks.clear()
        self.derived.clear()


def _tag_set(text: str | None) -> frozenset[Any] | None:
    return None if text is None else frozenset(json.loads(text))


def micros(value: datetime) -> int:
    """A naive UTC time as the columns hold it: microseconds since 1970."""
    return (value - _EPOCH) // _MICROSECOND


def _micros(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    if not pa.types.is_timestamp(column.type) or column.type.unit != "us" or column.type.tz is not None:
        raise TypeError(f"a filter column of type {column.type} (expected TIMESTAMP)")
    as_int = pc.fill_null(pc.cast(column, pa.int64()), NULL_TIME)
    return np.array(as_int.to_numpy(), dtype=np.int64)  # a copy: arrow's buffer is read-only


# -- the rules: a field, the SQL it must give, and the same condition on the arrays ------------
Mask = Callable[[Columns, Any, Callable[[Any], np.ndarray]], np.ndarray | None]


@dataclasses.dataclass(frozen=True)
class _Rule:
    """``sql(value)``: what ``Filters(field=value).sql()`` gives when this rule applies to it
    (None: the value is not one the arrays evaluate); ``mask``: the rows it keeps."""

    sql: Callable[[Any], tuple[str, list[Any]] | None]
    mask: Mask
    #: The column this rule reads (a store may lack it).
    needs: tuple[str, ...]


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _equal(column: str) -> _Rule:
    def mask(cols: Columns, value: str, _rows_of: Any) -> np.ndarray:
        coded = cols.coded[column]
        code = coded.code_of.get(value)
        return np.zeros(cols.n, dtype=bool) if code is None else coded.codes == code

    return _Rule(lambda v: (f"c.{column} = ?", [v]) if _text(v) else None, mask, (column,))


def _kinds_sql(kinds: Any) -> tuple[str, list[Any]] | None:
    if not isinstance(kinds, tuple) or not all(map(_text, kinds)):
        return None
    ors = " OR ".join("(c.kind = ? OR starts_with(c.kind, ?))" for _ in kinds)
    return f"({ors})", [p for k in kinds for p in (k, k + "-")]


def _kinds(cols: Columns, kinds: tuple[str, ...], _rows_of: Any) -> np.ndarray:
    coded = cols.coded["kind"]

    def test(start: int) -> np.ndarray:
        return np.array(
            [
                v is not None and any(v == k or v.startswith(k + "-") for k in kinds)
                for v in coded.values[start:]
            ],
            dtype=bool,
        )

    return coded.matching(("kinds", kinds), test)


def _glob(cols: Columns, pattern: str, _rows_of: Any) -> np.ndarray:
    coded = cols.coded["source"]
    return coded.matching(("glob", pattern), lambda start: globbed(coded.arrow(start), pattern))


def _tags_sql(tags: Any) -> tuple[str, list[Any]] | None:
    if not isinstance(tags, tuple) or not all(map(_text, tags)):
        return None
    return "list_has_all(c.tags, ?::VARCHAR[])", [list(tags)]


def _tags(cols: Columns, tags: tuple[str, ...], _rows_of: Any) -> np.ndarray:
    wanted = frozenset(tags)
    coded = cols.coded["tags"]
    return coded.matching(
        ("tags", wanted),
        lambda start: np.array([v is not None and wanted <= v for v in coded.values[start:]], dtype=bool),
    )


def _when(event: bool) -> str:
    return "coalesce(c.event_at, c.updated_at)" if event else "c.updated_at"


def _time_rule(op: str, event: bool) -> _Rule:
    def sql(value: Any) -> tuple[str, list[Any]] | None:
        # Only a naive datetime compares as TIMESTAMP does (an aware one is bound as TIMESTAMPTZ).
        if type(value) is not datetime or value.tzinfo is not None:
            return None
        return f"{_when(event)} {op} ?", [value]

    def mask(cols: Columns, value: datetime, _rows_of: Any) -> np.ndarray:
        when = cols.times["updated_at"]
        if event:
            held = cols.times["event_at"]
            when = np.where(held != NULL_TIME, held, when)
        at = micros(value)
        kept = when >= at if op == ">=" else when <= at
        return kept & (when != NULL_TIME)  # a NULL time compares to nothing

    return _Rule(sql, mask, ("updated_at", "event_at") if event else ("updated_at",))


def _ids_sql(ids: Any) -> tuple[str, list[Any]] | None:
    if not isinstance(ids, tuple) or not all(type(i) is int and -(2**63) <= i < 2**63 for i in ids):
        return None
    return "c.id IN (SELECT unnest(?::BIGINT[]))", [list(ids)]


def _ids(cols: Columns, ids: tuple[int, ...], rows_of: Callable[[Any], np.ndarray]) -> np.ndarray:
    out = np.zeros(cols.n, dtype=bool)
    out[rows_of(np.asarray(ids, dtype=np.int64))] = True
    return out


#: Per field of :class:`Filters`, the ways its SQL may be written that the arrays evaluate (the
#: first that gives the field's SQL for the value asked is used). A field missing here, or whose
#: SQL none of its rules give, is evaluated in SQL.
_RULES: dict[str, tuple[_Rule, ...]] = {
    "namespace": (_equal("namespace"),),
    "kinds": (_Rule(_kinds_sql, _kinds, ("kind",)),),
    "path": (_Rule(lambda v: ("c.source GLOB ?", [v]) if _text(v) else None, _glob, ("source",)),),
    "tags": (_Rule(_tags_sql, _tags, ("tags",)),),
    "since": (_time_rule(">=", event=True), _time_rule(">=", event=False)),
    "until": (_time_rule("<=", event=True), _time_rule("<=", event=False)),
    "speaker": (_equal("speaker"),),
    "conversation": (_equal("conversation"),),
    "ids": (_Rule(_ids_sql, _ids, ()),),
}

Plan = tuple[tuple[_Rule, Any], ...]
_plans: dict[Filters, Plan | None] = {}


def plan(filters: Filters) -> Plan | None:
    """The rules that evaluate ``filters`` on the arrays, with their values (fields that restrict
    nothing left out), or None when some field must be evaluated in SQL. Each field's SQL is
    that of a ``Filters`` holding only that field, and their conjunction must be the whole
    condition; kept per distinct filters."""
    try:
        return _plans[filters]
    except KeyError:
        pass
    except TypeError:  # a field's value that cannot be hashed: planned every time
        return _plan(filters)
    made = _plan(filters)
    if len(_plans) >= MAX_PLANS:
        _plans.clear()
    _plans[filters] = made
    return made


def _plan(filters: Filters) -> Plan | None:
    steps: list[tuple[_Rule, Any]] = []
    parts: list[str] = []
    params: list[Any] = []
    try:
        for f in dataclasses.fields(Filters):
            value = getattr(filters, f.name)
            alone_sql, alone_params = Filters(**{f.name: value}).sql()
            if alone_sql == "TRUE":
                continue
            rule = next(
                (r for r in _RULES.get(f.name, ()) if r.sql(value) == (alone_sql, alone_params)), None
            )
            if rule is None:
                return None
            steps.append((rule, value))
            parts.append(alone_sql)
            params += alone_params
        whole = filters.sql()
    except Exception:  # a value Filters itself refuses alone: SQL decides
        return None
    if whole != ((" AND ".join(parts) if parts else "TRUE"), params):
        return None
    return tuple(steps)


def mask(
    filters: Filters, cols: Columns, live: np.ndarray, rows_of: Callable[[Any], np.ndarray]
) -> np.ndarray | None:
    """The live rows matching ``filters`` (read-only; kept in ``cols`` until its rows change),
    or None when the arrays cannot evaluate them. ``rows_of``: the rows of those of some chunk
    ids that the index holds (for the ``ids`` field)."""
    try:
        held = cols.masks.get(filters)
    except TypeError:
        held = None
    if held is not None:
        return held
    steps = plan(filters)
    if steps is None or any(c not in cols.present for rule, _ in steps for c in rule.needs):
        return None
    out = live.copy()
    for rule, value in steps:
        got = rule.mask(cols, value, rows_of)
        if got is None:
            return None
        out &= got
    out.flags.writeable = False
    try:
        if len(cols.masks) >= MAX_MASKS:
            cols.masks.clear()
        cols.masks[filters] = out
    except TypeError:
        pass
    return out


# -- globs, exactly as DuckDB matches them ------------------------------------------------------
_glob_con: duckdb.DuckDBPyConnection | None = None
_glob_lock = threading.Lock()
#: What GLOB reads as other than itself (DuckDB's ``Glob``): past the first, no literal prefix.
_GLOB_SPECIAL = re.compile(r"[*?\[\\]")


def globbed(values: pa.Array | list[Any], pattern: str) -> np.ndarray:
    """``value GLOB pattern`` for each of ``values`` (None: False), by DuckDB itself on a
    connection of its own (its GLOB works on bytes and knows escapes: ``fnmatch`` does not
    match it); only values that start with the pattern's literal part are asked. One statement
    per pattern and batch of new distinct sources, not per search."""
    values = values if isinstance(values, pa.Array) else pa.array(values, type=pa.string())
    special = _GLOB_SPECIAL.search(pattern)
    prefix = pattern if special is None else pattern[: special.start()]
    out = np.zeros(len(values), dtype=bool)
    asked = np.arange(len(values))
    if prefix:
        starts = pc.fill_null(pc.starts_with(values, prefix), False).to_numpy(zero_copy_only=False)
        asked = np.flatnonzero(starts)
        values = values.take(pa.array(asked))
    if len(asked):
        out[asked] = _duckdb_glob(values, pattern)
    return out


def _duckdb_glob(values: pa.Array, pattern: str) -> np.ndarray:
    global _glob_con
    with _glob_lock:
        if _glob_con is None:
            _glob_con = duckdb.connect(":memory:")
            _glob_con.execute("SET threads = 1")
        _glob_con.register("_nbm_sources", pa.table({"s": values}))
        try:
            got = _glob_con.execute(
                "SELECT coalesce(s GLOB ?, false) FROM _nbm_sources", [pattern]
            ).fetchnumpy()
        finally:
            _glob_con.unregister("_nbm_sources")
    return np.asarray(next(iter(got.values())), dtype=bool)


def prepare() -> None:
    """Open the connection globs are matched on, before a search needs it (opening it is slower
    than the match)."""
    _duckdb_glob(pa.array([], type=pa.string()), "*")
