"""Filters evaluated on the memory-resident index's columns (:mod:`nbmemory.search.filter_mask`):
the same rows as the SQL condition of :meth:`Filters.sql` on random memories and filters, kept in
step with writes made after the index was built, and no statement on the chunks table in a
filtered search; where the arrays cannot evaluate a field, SQL does."""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nbmemory import Memory
from nbmemory.search import filter_mask, hot
from nbmemory.search.filters import KINDS, Filters
from nbmemory.store import chunks as chunk_rows
from nbmemory.store import vectors
from nbmemory.store.db import Database, utcnow

NAMESPACES = ["work", "home", "é-notes", "w"]
ROW_KINDS = ["markdown", "notebook", "code", "code-python", "text", "memory", "pdf", "notebooks"]
TAGS = ["x", "y", "ops", "Ops", "é", ""]
SOURCES = [None, "a/b.md", "a/c.md", "ops/run.ipynb", "é/x.md", "a*b", "a\\b", "x/[1].md", "deep/a/b/c.py"]
PEOPLE = [None, "user", "assistant", "Caroline", "caroline"]
T0 = datetime(2025, 1, 1)


@pytest.fixture(autouse=True)
def in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vectors, "IN_MEMORY", True)
    monkeypatch.delenv("NBMEMORY_HOT", raising=False)


def chunk_columns(db: Database) -> set[str]:
    return {d[0] for d in db.execute("SELECT * FROM chunks LIMIT 0").description}


def write_random(db: Database, rng: random.Random, count: int, dim: int) -> list[int]:
    """``count`` chunks of random namespaces, kinds, sources, tags, times and (where the table has
    them) event times, speakers and conversations; a few without a vector."""
    rows = [
        chunk_rows.NewChunk(
            namespace=rng.choice(NAMESPACES),
            kind=rng.choice(ROW_KINDS),
            text=f"row {rng.random()}",
            source=rng.choice(SOURCES),
            tags=rng.sample(TAGS, rng.randint(0, 3)),
        )
        for _ in range(count)
    ]
    vecs = np.asarray([[rng.gauss(0, 1) for _ in range(dim)] for _ in range(count)], dtype=np.float32)
    with db.transaction():
        ids = chunk_rows.insert(db, rows, vecs, utcnow())
        for i in ids:
            retime(db, rng, i)
    return ids


def retime(db: Database, rng: random.Random, chunk_id: int) -> None:
    """New times (and event columns, where the table has them) for one chunk, as a writer does."""
    db.rows_changed([chunk_id])
    db.execute(
        "UPDATE chunks SET updated_at = ? WHERE id = ?",
        [T0 + timedelta(minutes=rng.randint(0, 1000)), chunk_id],
    )
    have = chunk_columns(db)
    if "event_at" in have:
        at = None if rng.random() < 0.5 else T0 + timedelta(minutes=rng.randint(0, 1000))
        db.execute("UPDATE chunks SET event_at = ? WHERE id = ?", [at, chunk_id])
    for column in ("speaker", "conversation"):
        if column in have:
            db.execute(f"UPDATE chunks SET {column} = ? WHERE id = ?", [rng.choice(PEOPLE), chunk_id])


def moment(rng: random.Random) -> datetime:
    return T0 + timedelta(minutes=rng.randint(-10, 1010), microseconds=rng.choice([0, 0, 1, 999_999]))


#: A random value of each field of Filters: a field added to Filters without one here fails the
#: property test (and so does one the arrays do not evaluate).
VALUES: dict[str, Callable[[random.Random, list[int]], Any]] = {
    "namespace": lambda rng, ids: rng.choice([*NAMESPACES, "nowhere"]),
    "kinds": lambda rng, ids: tuple(rng.sample(KINDS, rng.randint(1, 3))),
    "path": lambda rng, ids: rng.choice(
        [
            "*",
            "a/*",
            "*.md",
            "?/*",
            "[ae]/*",
            "é/*",
            "?/x.md",
            "a\\*b",
            "a\\b",
            "*[1]*",
            "deep/*/c.py",
            "",
            "nope",
        ]
    ),
    "tags": lambda rng, ids: tuple(rng.sample(TAGS, rng.randint(1, 2))),
    "since": lambda rng, ids: moment(rng),
    "until": lambda rng, ids: moment(rng),
    "speaker": lambda rng, ids: rng.choice([p for p in PEOPLE if p] + ["nobody"]),
    "conversation": lambda rng, ids: rng.choice([p for p in PEOPLE if p] + ["nobody"]),
    "ids": lambda rng, ids: (*rng.sample(ids, min(len(ids), rng.randint(1, 6))), 10**9),
}


def random_filters(rng: random.Random, ids: list[int]) -> Filters:
    names = [f.name for f in dataclasses.fields(Filters)]
    missing = [n for n in names if n not in VALUES]
    assert not missing, f"give the property test a value of the new Filters field(s) {missing}"
    chosen = rng.sample(names, rng.randint(1, 3))
    return Filters(**{name: VALUES[name](rng, ids) for name in chosen})


def sql_rows(db: Database, filters: Filters) -> set[int]:
    where, params = filters.sql()
    return {
        int(r[0])
        for r in db.fetchall(f"SELECT c.id FROM chunks c WHERE c.deleted_at IS NULL AND ({where})", params)
    }


def mask_rows(index: hot.HotIndex, filters: Filters) -> set[int]:
    mask = filter_mask.mask(filters, index.columns, index.live, index._rows_held)
    assert mask is not None, f"the arrays do not evaluate {filters}"
    return set(index.ids[mask].tolist())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_mask_holds_the_rows_the_sql_condition_holds(fake_mem: Memory, seed: int) -> None:
    rng = random.Random(seed)
    db, dim = fake_mem.db, fake_mem.embedder.dim
    fake_mem.remember("a first item, so that the store has its model")
    ids = write_random(db, rng, 120, dim)
    index = hot.ensure(db)
    assert index is not None

    asked: list[Filters] = []

    def check(rounds: int) -> None:
        served = hot.serving(db)
        assert served is index  # kept in step, not rebuilt
        # The filters asked before too: their masks are kept until the rows change.
        for filters in asked + [random_filters(rng, ids) for _ in range(rounds)]:
            assert mask_rows(index, filters) == sql_rows(db, filters), filters
            asked.append(filters)

    check(150)
    # Writes after the build: new rows, forgotten and purged ones, new tags and times.
    ids += write_random(db, rng, 40, dim)
    with db.transaction():
        chunk_rows.soft_delete(db, rng.sample(ids, 15), "test", utcnow())
        chunk_rows.purge(db, rng.sample(ids, 5))
        for i in rng.sample(ids, 20):
            db.rows_changed([i])
            db.execute("UPDATE chunks SET tags = ? WHERE id = ?", [rng.sample(TAGS, rng.randint(0, 3)), i])
        for i in rng.sample(ids, 20):
            retime(db, rng, i)
    check(150)
    # A forgotten chunk brought back, a tag change with no other write.
    with db.transaction():
        gone = [int(r[0]) for r in db.fetchall("SELECT id FROM chunks WHERE deleted_at IS NOT NULL LIMIT 3")]
        chunk_rows.restore(db, gone, np.ones((len(gone), dim), dtype=np.float32))
    fake_mem.update(ids[0], tags=["ops", "x"])
    check(150)
    # Rows gone from the table, nothing else written.
    with db.transaction():
        chunk_rows.purge(db, rng.sample([i for i in ids if i in set(index.ids[index.live].tolist())], 10))
    check(0)


def test_every_filters_field_has_a_rule_the_arrays_evaluate() -> None:
    rng = random.Random(5)
    for f in dataclasses.fields(Filters):
        filters = Filters(**{f.name: VALUES[f.name](rng, [1, 2, 3])})
        assert filter_mask.plan(filters) is not None, (
            f"nbmemory/search/filter_mask.py has no rule for {f.name}"
        )


def test_a_field_the_arrays_do_not_know_is_evaluated_in_sql(
    fake_mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    for text, ns in [("kafka consumer lag", "work"), ("kafka at home", "home")]:
        fake_mem.remember(text, namespace=ns)
    fake_mem.search("warm up", log=False)
    monkeypatch.setattr(
        filter_mask, "_RULES", {k: v for k, v in filter_mask._RULES.items() if k != "namespace"}
    )
    monkeypatch.setattr(filter_mask, "_plans", {})
    with counting(fake_mem.db) as statements:
        hits = fake_mem.search("kafka", namespace="home", log=False)
    assert [h.namespace for h in hits.hits] == ["home"]
    assert any(reads_chunks(s) for s in statements)  # the fallback: through SQL
    # SQL that a rule does not give for the value asked (as a changed Filters.sql would be) too.
    monkeypatch.setattr(Filters, "sql", lambda self: ("c.namespace <> ?", ["work"]))
    assert filter_mask.plan(Filters(namespace="home")) is None


# -- searches -----------------------------------------------------------------------------------
class Recording:
    """The store's connection, recording the text of every statement run through it."""

    def __init__(self, con: Any, statements: list[str]) -> None:
        self._con = con
        self._statements = statements

    def execute(self, sql: str, *args: Any) -> Any:
        self._statements.append(sql)
        return self._con.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


class counting:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.statements: list[str] = []

    def __enter__(self) -> list[str]:
        self.con = self.db.con
        self.db.con = Recording(self.con, self.statements)  # type: ignore[assignment]
        return self.statements

    def __exit__(self, *exc: object) -> None:
        self.db.con = self.con


def reads_chunks(sql: str) -> bool:
    return re.search(r"\bchunks\b", sql) is not None


@pytest.fixture
def shaped(fake_mem: Memory) -> Iterator[Memory]:
    """Items in three namespaces with tags and sources, one holding the symbol ``g??``."""
    for i in range(60):
        fake_mem.remember(
            f"note {i} about {'kafka' if i % 2 else 'vim'} and {'lag' if i % 3 else 'rot13 with g?? here'}",
            namespace=["work", "home", "misc"][i % 3],
            tags=[["ops"], ["x", "ops"], []][i % 3],
            source=f"notes/{['a', 'b'][i % 2]}/n{i}.md",
            at=f"2024-01-{1 + i % 28:02d}T10:00:00",
            speaker=["user", "assistant"][i % 2],
            conversation=f"session_{i % 4}",
        )
    yield fake_mem


SEARCH_FILTERS: list[dict[str, Any]] = [
    {"namespace": "work"},
    {"kind": "memory"},
    {"tags": ["ops"]},
    {"path": "notes/a/*"},
    {"since": "2000-01-01"},
    {"until": "2100-01-01", "namespace": "home"},
    {"namespace": "home", "tags": ["x"], "path": "*/b/*"},
    {"speaker": "user"},
    {"conversation": "session_1", "since": "2024-01-05"},
]


def test_a_filtered_search_reads_no_chunk_row_through_sql(shaped: Memory) -> None:
    # Fails with the filters read through SQL (one SELECT ... FROM chunks per retriever, and
    # one for a symbol's holders). Statements a search runs whatever its filters (the turns'
    # neighbours) may read chunks; none with a filter's condition, and no more than unfiltered.
    query = "kafka lag g??"
    shaped.search(query, log=False)
    for filters in SEARCH_FILTERS:
        shaped.search(query, log=False, **filters)  # warm: any sync of writes done
    with counting(shaped.db) as unfiltered:
        shaped.search(query, log=False)
    for filters in SEARCH_FILTERS:
        with counting(shaped.db) as statements:
            result = shaped.search(query, log=False, **filters)
        parts = search_filters(filters).sql()[0].split(" AND ")
        assert [s for s in statements if reads_chunks(s) and any(p in s for p in parts)] == [], filters
        assert sum(map(reads_chunks, statements)) <= sum(map(reads_chunks, unfiltered)), filters
        for name in ("bm25", "vector"):
            stage = result.trace.stage(name)
            assert stage is not None and stage.notes["method"] == "memory", (name, filters)
        assert result.hits, filters


def search_filters(given: dict[str, Any]) -> Filters:
    """The Filters of a search given these keywords (as :meth:`Memory.search` makes them)."""
    from nbmemory import validate

    keywords = {"namespace": None, "kind": None, "path": None, "tags": (), "since": None, "until": None}
    return validate.search_filters("q", **{**keywords, **given})


def test_filtered_rankings_equal_those_with_the_rows_read_through_sql(
    fake_mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(3)
    words = [
        "kafka",
        "lag",
        "vim",
        "rot13",
        "deploy",
        "staging",
        "aws",
        "key",
        "rotate",
        "export",
        "s3",
        "notes",
    ]
    for ns in ("work", "home", "misc", "lab"):
        fake_mem.remember_many(
            [" ".join(rng.choices(words, k=8)) for _ in range(500)],
            namespace=ns,
            tags=["ops"] if ns in ("work", "lab") else [],
            sources=[f"{ns}/{rng.choice('abc')}/n{i}.md" for i in range(500)],
        )
    queries = [" ".join(rng.choices(words, k=3)) for _ in range(15)]
    filters: list[dict[str, Any]] = [*SEARCH_FILTERS, {"namespace": "lab", "path": "lab/a/*"}, {}]

    def ranked() -> list[list[tuple[int, float]]]:
        return [
            [(h.id, h.score) for h in fake_mem.search(q, log=False, **f).hits]
            for f in filters
            for q in queries
        ]

    arrays = ranked()
    monkeypatch.setattr(filter_mask, "mask", lambda *args: None)  # every mask read through SQL
    assert ranked() == arrays
    assert sum(len(r) for r in arrays) > 0


def test_writes_between_searches_are_seen_by_the_next_filtered_search(shaped: Memory) -> None:
    def ids(**filters: Any) -> set[int]:
        return set(shaped.search("kafka", k=50, log=False, **filters).ids)

    work = ids(namespace="work")
    assert work and work == ids(namespace="work")  # the second from the kept mask
    new = shaped.remember("kafka in the new namespace", namespace="new", tags=["fresh"]).id
    assert ids(namespace="new") == {new} and new not in ids(namespace="work")
    assert ids(tags=["fresh"]) == {new}
    shaped.update(new, tags=["stale"])
    assert ids(tags=["fresh"]) == set() and ids(tags=["stale"]) == {new}
    shaped.forget(new)
    assert ids(namespace="new") == set() and ids(tags=["stale"]) == set()
    gone = sorted(work)[0]
    shaped.forget(gone)
    assert ids(namespace="work") == work - {gone}


def test_a_store_without_the_event_columns_is_filtered_by_its_update_times(tmp_path: Path) -> None:
    # An index built over a chunks table lacking a filter column leaves filters on it to SQL.
    cols = filter_mask.Columns(["namespace", "kind", "source", "tags", "updated_at"])
    assert "event_at" not in cols.select() and "speaker" not in cols.select()
    assert (
        filter_mask.mask(Filters(namespace="x"), cols, np.zeros(0, dtype=bool), lambda ids: ids) is not None
    )
    if "speaker" in {f.name for f in dataclasses.fields(Filters)}:
        assert filter_mask.mask(Filters(speaker="x"), cols, np.zeros(0, dtype=bool), lambda ids: ids) is None


def test_a_glob_matches_as_duckdb_matches() -> None:
    # Not fnmatch: DuckDB's GLOB works on bytes (``?`` is not ``é``) and knows escapes.
    import duckdb

    con = duckdb.connect()
    values = ["é/x.md", "a*b", "axb", "a\\b", "x/[1].md", "x/1.md", None, "A/b.md"]
    for pattern in ["?/x.md", "a\\*b", "a\\b", "x/[1].md", "*", "a/*", "[aA]/*", "[!a]*"]:
        want = [
            bool(con.execute("SELECT coalesce(? GLOB ?, false)", [v, pattern]).fetchone()[0]) for v in values
        ]
        assert filter_mask.globbed(values, pattern).tolist() == want, pattern
