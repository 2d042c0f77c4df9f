"""A team memory on DuckLake with a real PostgreSQL catalog: two processes, two roles.

Each test's other client is a separate Python process with a personal file of its own; this
process is the second client. Plumbing only: the fake embedder."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest

from nbmemory import Memory
from nbmemory.embed import FakeEmbedder
from nbmemory.errors import ConfigError, TeamAccessError
from nbmemory.items import Hit
from nbmemory.store.team import TEAM_ID_MIN, TeamLake
from nbmemory.team import TeamConfig, team_config
from tests.team.conftest import Lake, finish, run_client, start_client

pytestmark = pytest.mark.integration

#: How long a remote write may take to reach this client (the issue's bound).
FOLLOW_S = 5.0


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # This process's replicas live in the test's own cache folder.
    monkeypatch.setenv("NBMEMORY_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("NBMEMORY_TEAM", raising=False)


@pytest.fixture
def here(lake: Lake, tmp_path: Path) -> Iterator[Memory]:
    """This process's memory: a personal file, the team attached with the writer's role."""
    with Memory(tmp_path / "here" / "memory.duckdb", embedder=FakeEmbedder(dim=32), team=lake.team()) as mem:
        yield mem


def poll(found: Callable[[], bool], seconds: float = FOLLOW_S) -> float:
    """Seconds until ``found()`` is true; fails after ``seconds``."""
    started = time.monotonic()
    while not found():
        if time.monotonic() - started > seconds:
            pytest.fail(f"not seen within {seconds} s")
        time.sleep(0.1)
    return time.monotonic() - started


def team_hits(mem: Memory, query: str) -> list[Hit]:
    return [h for h in mem.search(query, k=10) if h.store == "team"]


def lake_rows(lake: Lake) -> list[tuple[int, str, str]]:
    reader = TeamLake(lake.team().catalog, lake.team().data_path)
    try:
        return [(r.id, r.namespace, r.text) for r in reader.read_all(reader.current_snapshot())]
    finally:
        reader.close()


def test_remembered_by_one_process_is_found_by_the_other(here: Memory, lake: Lake, tmp_path: Path) -> None:
    assert team_hits(here, "centrifuge booking") == []  # this client has read the lake already
    out = run_client(
        lake,
        tmp_path / "there",
        """
        item = mem.remember("the centrifuge in room 204 needs booking a day ahead", namespace="team:lab")
        print(item.id)
        """,
    )
    remote_id = int(out.strip())
    assert remote_id >= TEAM_ID_MIN
    poll(lambda: bool(team_hits(here, "centrifuge booking")))
    hit = team_hits(here, "centrifuge booking")[0]
    assert (hit.id, hit.namespace, hit.store) == (remote_id, "team:lab", "team")
    assert "room 204" in hit.text
    assert hit.to_dict()["store"] == "team"


def test_a_forget_on_one_process_is_gone_on_the_other(here: Memory, lake: Lake, tmp_path: Path) -> None:
    item = here.remember("the cold room key hangs beside the autoclave", namespace="team:lab")
    assert [h.id for h in team_hits(here, "cold room key")] == [item.id]
    out = run_client(
        lake,
        tmp_path / "there",
        f"""
        hits = [h for h in mem.search("cold room key") if h.store == "team"]
        print([h.id for h in hits])
        print(mem.forget({item.id}))
        """,
    )
    assert out.split("\n")[:2] == [f"[{item.id}]", f"[{item.id}]"]
    poll(lambda: not team_hits(here, "cold room key"))
    assert lake_rows(lake) == []


def test_a_reader_without_write_rights_is_refused_and_writes_nothing(
    here: Memory, lake: Lake, tmp_path: Path
) -> None:
    here.remember("the plate reader is calibrated on mondays", namespace="team:lab")
    before = lake_rows(lake)
    with Memory(
        tmp_path / "reader" / "memory.duckdb", embedder=FakeEmbedder(dim=32), team=lake.team("nbm_reader")
    ) as mem:
        # It reads the team's items ...
        assert [h.text for h in team_hits(mem, "plate reader calibrated")] == [before[0][2]]
        # ... and may not write them.
        with pytest.raises(TeamAccessError) as refused:
            mem.remember("the reader's note", namespace="team:lab")
        message = str(refused.value)
        assert lake.database in message and "team:lab" in message and "nbm_reader" in message
        assert "INSERT" in message and "reader-secret" not in message
        with pytest.raises(TeamAccessError):
            mem.forget(before[0][0])
        with pytest.raises(TeamAccessError):
            mem.remember_many(["one", "two"], namespace="team:lab")
    assert lake_rows(lake) == before
    assert list(lake.data_path.rglob("*.parquet")) == []  # no file left behind by a refused write


def test_a_role_the_catalog_grants_nothing_is_refused_at_open(
    here: Memory, lake: Lake, tmp_path: Path
) -> None:
    here.remember("a team item", namespace="team:lab")  # the catalog's tables exist
    with pytest.raises(TeamAccessError) as refused:
        Memory(
            tmp_path / "outsider" / "memory.duckdb",
            embedder=FakeEmbedder(dim=32),
            team=lake.team("nbm_outsider"),
        )
    message = str(refused.value)
    assert "nbm_outsider" in message and lake.database in message and "SELECT" in message
    assert "outsider-secret" not in message


def test_the_personal_file_holds_no_team_rows_and_the_lake_no_personal_rows(
    lake: Lake, tmp_path: Path
) -> None:
    path = tmp_path / "mine" / "memory.duckdb"
    with Memory(path, embedder=FakeEmbedder(dim=32), team=lake.team()) as mem:
        personal = mem.remember("my own note about the plasmid prep")
        mem.remember_many(["my draft", "my reading list"], namespace="private")
        team = mem.remember_many(
            ["the lab's plasmid prep protocol", "the lab's freezer map"], namespace="team:lab"
        )
        assert {h.store for h in mem.search("plasmid prep", k=10)} == {"personal", "team"}
        replica = mem._team.replica_path if mem._team else None
    con = duckdb.connect(str(path), read_only=True)
    try:
        namespaces = {r[0] for r in con.execute("SELECT DISTINCT namespace FROM chunks").fetchall()}
        texts = {r[0] for r in con.execute("SELECT text FROM chunks").fetchall()}
    finally:
        con.close()
    assert namespaces == {"default", "private"}
    assert not any("the lab's" in t for t in texts)
    rows = lake_rows(lake)
    assert sorted(r[0] for r in rows) == sorted(team)
    assert {r[1] for r in rows} == {"team:lab"} and personal.id not in {r[0] for r in rows}
    assert replica is not None and replica != path and replica.exists()


def test_a_restarted_client_reads_only_the_snapshots_it_missed(lake: Lake, tmp_path: Path) -> None:
    path = tmp_path / "here" / "memory.duckdb"
    with Memory(path, embedder=FakeEmbedder(dim=32), team=lake.team()) as mem:
        mem.remember_many(["first protocol", "second protocol", "third protocol"], namespace="team:lab")
        assert len(team_hits(mem, "protocol")) == 3
    # While it is closed, another process writes twice and forgets once: three snapshots.
    run_client(
        lake,
        tmp_path / "there",
        """
        mem.remember("fourth protocol", namespace="team:lab")
        fifth = mem.remember("fifth protocol", namespace="team:lab")
        first = [h.id for h in mem.search("first protocol") if h.text == "first protocol"]
        mem.forget(first)
        """,
    )
    embedder = FakeEmbedder(dim=32)
    with Memory(path, embedder=embedder, team=lake.team()) as mem:
        assert mem._team is not None
        team = mem._team
        assert sorted(h.text for h in team_hits(mem, "protocol")) == [
            "fifth protocol",
            "fourth protocol",
            "second protocol",
            "third protocol",
        ]
        assert (team.full_reads, team.snapshots_read, team.changes_applied) == (0, 3, 3)
        # The rows came with their vectors: only the query was embedded.
        assert embedder.texts_embedded == 0


def test_a_search_ranks_a_team_hit_among_personal_hits(here: Memory, lake: Lake, tmp_path: Path) -> None:
    here.remember_many(
        ["gel electrophoresis notes from march", "buffer recipes for the gel", "my holiday plans"],
        namespace="default",
    )
    run_client(
        lake,
        tmp_path / "there",
        'mem.remember("agarose gel electrophoresis: run at 100 V for 40 minutes", namespace="team:lab")',
    )
    poll(lambda: bool(team_hits(here, "gel electrophoresis")))
    hits = here.search("gel electrophoresis", k=5).hits
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert {h.store for h in hits[:3]} == {"personal", "team"}
    for hit in hits:
        assert (hit.store == "team") == hit.namespace.startswith("team:")
        assert hit.to_dict()["store"] == hit.store
    # A personal namespace searches the personal file only, a team namespace the team only.
    assert {h.store for h in here.search("gel electrophoresis", namespace="default")} == {"personal"}
    assert {h.store for h in here.search("gel electrophoresis", namespace="team:lab")} == {"team"}


def test_a_team_namespace_without_a_team_is_refused(tmp_path: Path) -> None:
    with Memory(tmp_path / "memory.duckdb", embedder=FakeEmbedder(dim=32)) as mem:
        with pytest.raises(ConfigError, match="team:lab"):
            mem.remember("shared?", namespace="team:lab")
        assert mem.stats()["items"] == 0


def test_the_team_setting_reads_catalog_and_data_path(monkeypatch: pytest.MonkeyPatch) -> None:
    config = TeamConfig.parse("postgres:dbname=lab host=db.lab user=alice|/shared/lab memory")
    assert config == TeamConfig("postgres:dbname=lab host=db.lab user=alice", "/shared/lab memory")
    assert team_config(None) is None
    monkeypatch.setenv("NBMEMORY_TEAM", "/srv/lab.ducklake|/srv/lab-data")
    assert team_config(None) == TeamConfig("/srv/lab.ducklake", "/srv/lab-data")
    with pytest.raises(ConfigError, match="<catalog>\\|<data path>"):
        TeamConfig.parse("postgres:dbname=lab")


def test_two_processes_writing_at_once_both_land(here: Memory, lake: Lake, tmp_path: Path) -> None:
    # DuckLake retries a commit that does not conflict: concurrent inserts of two members all land.
    code = """
    for i in range(5):
        mem.remember_many([f"{name} sample {i} a", f"{name} sample {i} b"], namespace="team:lab")
    """
    clients = [
        start_client(lake, tmp_path / name, f"name = {name!r}\n" + textwrap.dedent(code))
        for name in ("ann", "ben")
    ]
    for client in clients:
        finish(client)
    assert len(lake_rows(lake)) == 20
    poll(lambda: len([h for h in here.search("sample", k=50) if h.store == "team"]) == 20)
