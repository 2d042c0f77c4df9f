"""A team lake whose catalog is a local ``.ducklake`` file (one machine, several memories), and
the store layer's own refusals. No PostgreSQL needed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nbmemory import Memory
from nbmemory.embed import FakeEmbedder
from nbmemory.errors import ConfigError, StoreError, TeamAccessError
from nbmemory.store.team import LakeRow, TeamLake
from nbmemory.team import TeamConfig


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBMEMORY_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("NBMEMORY_TEAM", raising=False)


def test_two_memories_share_a_local_catalog(tmp_path: Path) -> None:
    team = TeamConfig(str(tmp_path / "lab.ducklake"), str(tmp_path / "lab-data"))
    with Memory(tmp_path / "a" / "memory.duckdb", embedder=FakeEmbedder(dim=32), team=team) as a:
        item = a.remember("the microscope booking sheet is on the door", namespace="team:lab")
    # One writer at a time for a DuckDB catalog file: the second memory opens after the first closed.
    with Memory(tmp_path / "b" / "memory.duckdb", embedder=FakeEmbedder(dim=32), team=team) as b:
        hits = [h for h in b.search("microscope booking") if h.store == "team"]
        assert [(h.id, h.namespace) for h in hits] == [(item.id, "team:lab")]


def test_a_retried_request_writes_once(tmp_path: Path) -> None:
    team = TeamConfig(str(tmp_path / "lab.ducklake"), str(tmp_path / "lab-data"))
    with Memory(tmp_path / "memory.duckdb", embedder=FakeEmbedder(dim=32), team=team) as mem:
        first = mem.remember("order more pipette tips", namespace="team:lab", request_key="req-1")
        again = mem.remember("order more pipette tips", namespace="team:lab", request_key="req-1")
        many = mem.remember_many(["one", "two"], namespace="team:lab", request_key="req-2")
        assert mem.remember_many(["one", "two"], namespace="team:lab", request_key="req-2") == many
        assert again.id == first.id
        assert [h.id for h in mem.search("pipette tips", k=10) if h.text == first.text] == [first.id]


def test_the_lake_refuses_personal_rows(tmp_path: Path) -> None:
    lake = TeamLake(str(tmp_path / "lab.ducklake"), tmp_path / "lab-data")
    try:
        with pytest.raises(StoreError, match="personal"):
            lake.insert([LakeRow(id=2**50, namespace="default", kind="memory", text="mine")])
        assert lake.read_all(lake.current_snapshot()) == []
    finally:
        lake.close()


def test_a_password_never_shows_in_a_message() -> None:
    from nbmemory.store.team import catalog_label

    assert catalog_label("postgres:dbname=lab user=alice password=s3cret host=db") == (
        "postgres:dbname=lab user=alice password=*** host=db"
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write any folder: the refusal cannot be seen")
def test_a_data_folder_the_user_may_not_write_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "lab-data"
    team = TeamConfig(str(tmp_path / "lab.ducklake"), str(data))
    with Memory(tmp_path / "memory.duckdb", embedder=FakeEmbedder(dim=32), team=team) as mem:
        data.mkdir(exist_ok=True)
        data.chmod(0o555)
        try:
            with pytest.raises(TeamAccessError, match="data folder"):
                mem.remember("a note", namespace="team:lab")
        finally:
            data.chmod(0o755)


def test_forget_by_query_and_the_refusals_of_a_team_namespace(tmp_path: Path) -> None:
    team = TeamConfig(str(tmp_path / "lab.ducklake"), str(tmp_path / "lab-data"))
    with Memory(tmp_path / "memory.duckdb", embedder=FakeEmbedder(dim=32), team=team) as mem:
        shared = mem.remember("the old autoclave manual", namespace="team:lab")
        mine = mem.remember("my autoclave manual notes")
        assert mem.forget(query="autoclave manual", namespace="team:lab", dry_run=True) == [shared.id]
        assert mem.forget(query="autoclave manual", namespace="team:lab") == [shared.id]
        assert [h.id for h in mem.search("autoclave manual")] == [mine.id]
        with pytest.raises(ConfigError, match="team namespace"):
            mem.forget(path="*.md", kind="markdown", namespace="team:lab")
        with pytest.raises(ConfigError, match="team namespace"):
            mem.capture([{"source": "1 + 1", "notebook": "a.ipynb"}], namespace="team:lab")


def test_a_client_whose_snapshots_were_expired_reads_the_lake_again(tmp_path: Path) -> None:
    team = TeamConfig(str(tmp_path / "lab.ducklake"), str(tmp_path / "lab-data"))
    here, there = tmp_path / "here" / "memory.duckdb", tmp_path / "there" / "memory.duckdb"
    with Memory(here, embedder=FakeEmbedder(dim=32), team=team) as mem:
        mem.remember("first sample", namespace="team:lab")
    with Memory(there, embedder=FakeEmbedder(dim=32), team=team) as other:
        other.remember("second sample", namespace="team:lab")
        other.remember("third sample", namespace="team:lab")
    lake = TeamLake(team.catalog, team.data_path)
    try:
        lake.con.execute("CALL ducklake_expire_snapshots('lake', older_than => now())")
    finally:
        lake.close()
    with Memory(here, embedder=FakeEmbedder(dim=32), team=team) as mem:
        assert sorted(h.text for h in mem.search("sample", k=10) if h.store == "team") == [
            "first sample",
            "second sample",
            "third sample",
        ]
        assert mem._team is not None and mem._team.full_reads == 1
