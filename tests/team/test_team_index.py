"""Indexing files into a team namespace, reading and changing team items by id, the replica's
passages, and a lake that stops answering. A local ``.ducklake`` catalog: no PostgreSQL needed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nbmemory import Memory
from nbmemory.config import Settings
from nbmemory.embed import FakeEmbedder
from nbmemory.errors import ConfigError, NotFoundError, StoreError
from nbmemory.store import team_replica
from nbmemory.store.team import TeamLake, is_team_id
from nbmemory.team import TeamConfig

NOTE = """# Cluster access

Log in to the lab cluster with `ssh lab-gpu` from the VPN.
The scratch folder is wiped every Sunday night, so copy results to the project share.
Book GPU nodes in the calendar before a long training run.
Jobs longer than two days need the queue for long jobs, and a note in the channel.
Checkpoints go to the project share too, under a folder named after the run and its date.
The cluster's Python is a module: load it before you make a virtual environment.
Ask the admins for more quota by mail; they answer within a day on weekdays.
"""


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBMEMORY_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("NBMEMORY_TEAM", raising=False)


@pytest.fixture
def team(tmp_path: Path) -> TeamConfig:
    return TeamConfig(str(tmp_path / "lab.ducklake"), str(tmp_path / "lab-data"))


@pytest.fixture
def runbooks(tmp_path: Path) -> Path:
    folder = tmp_path / "runbooks"
    folder.mkdir()
    (folder / "cluster.md").write_text(NOTE)
    (folder / "freezer.md").write_text("# Freezer\n\nThe -80 freezer alarm code is on the lab wiki.\n")
    return folder


def lake_rows(team: TeamConfig | Memory) -> list[tuple[str, str | None, str]]:
    """What the lake holds: through a memory's own lake (a local catalog takes one client at a
    time), or a lake of its own."""
    if isinstance(team, Memory):
        lake = team._team.lake  # type: ignore[union-attr]
        return sorted((r.namespace, r.source, r.text) for r in lake.read_all(lake.current_snapshot()))
    lake = TeamLake(team.catalog, team.data_path)
    try:
        return sorted((r.namespace, r.source, r.text) for r in lake.read_all(lake.current_snapshot()))
    finally:
        lake.close()


def test_an_indexed_folder_lands_in_the_lake_and_is_found_with_its_file(
    tmp_path: Path, team: TeamConfig, runbooks: Path
) -> None:
    with Memory(tmp_path / "me.duckdb", embedder=FakeEmbedder(dim=32), team=team) as mem:
        report = mem.index(runbooks, namespace="team:lab")
        assert (report.files_seen, report.files_changed, report.chunks_added) == (
            2,
            2,
            report.chunks_embedded,
        )
        hits = [h for h in mem.search("scratch folder wiped Sunday") if h.store == "team"]
        assert hits and hits[0].source == str(runbooks / "cluster.md") and is_team_id(hits[0].id)
        # Nothing of it in the personal file.
        assert mem.db.scalar("SELECT count(*) FROM chunks") == 0
    assert {source for _, source, _ in lake_rows(team)} == {
        str(runbooks / "cluster.md"),
        str(runbooks / "freezer.md"),
    }


def test_indexing_again_embeds_only_new_text_and_removes_what_left(
    tmp_path: Path, team: TeamConfig, runbooks: Path
) -> None:
    with Memory(tmp_path / "me.duckdb", embedder=FakeEmbedder(dim=32), team=team) as mem:
        first = mem.index(runbooks, namespace="team:lab")
        again = mem.index(runbooks, namespace="team:lab")
        assert (again.files_unchanged, again.chunks_added, again.chunks_removed) == (2, 0, 0)
        assert again.chunks_kept == first.chunks_added
        (runbooks / "cluster.md").write_text(NOTE.replace("every Sunday night", "on the first of the month"))
        (runbooks / "freezer.md").unlink()
        changed = mem.index(runbooks, namespace="team:lab")
        assert changed.files_changed == 1 and changed.files_removed == 1
        assert 0 < changed.chunks_embedded < first.chunks_added + 1
        texts = " ".join(text for _, _, text in lake_rows(mem))
        assert "first of the month" in texts and "Sunday" not in texts and "freezer" not in texts
        hits = [h for h in mem.search("freezer alarm code", k=10) if h.store == "team"]
        assert all("freezer" not in h.text for h in hits)
        assert any("first of the month" in h.text for h in mem.search("scratch folder wiped", k=10))


def test_forget_by_path_removes_a_file_from_the_team(tmp_path: Path, team: TeamConfig, runbooks: Path) -> None:
    with Memory(tmp_path / "me.duckdb", embedder=FakeEmbedder(dim=32), team=team) as mem:
        mem.index(runbooks, namespace="team:lab")
        freezer = str(runbooks / "freezer.md")
        planned = mem.forget(path=freezer, namespace="team:lab", dry_run=True)
        assert planned and all(is_team_id(i) for i in planned)
        assert mem.forget(path=freezer, namespace="team:lab") == planned
        assert {source for _, source, _ in lake_rows(mem)} == {str(runbooks / "cluster.md")}
        assert not [h for h in mem.search("freezer alarm code", k=10) if "alarm" in h.text]
        assert mem.forget(path=str(runbooks / "*.md"), namespace="team:lab")
        assert lake_rows(mem) == []


def test_an_unreadable_file_keeps_what_the_lake_holds_of_it(
    tmp_path: Path, team: TeamConfig, runbooks: Path
) -> None:
    with Memory(tmp_path / "me.duckdb", embedder=FakeEmbedder(dim=32), team=team) as mem:
        mem.index(runbooks, namespace="team:lab")
        (runbooks / "freezer.md").write_bytes(b"# Freezer\n\xff\xfe not text \x00\x01")
        report = mem.index(runbooks, namespace="team:lab")
        assert [path for path, _ in report.skipped] == [str(runbooks / "freezer.md")]
    assert any("alarm code" in text for _, _, text in lake_rows(team))


def test_secrets_are_redacted_before_they_reach_the_lake(tmp_path: Path, team: TeamConfig) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    key = "AKIA" + "Q3EGX7PLM2VN4RTZ"
    (folder / "aws.md").write_text(f"# AWS\n\nThe lab's key is {key} for the bucket.\n")
    with Memory(tmp_path / "me.duckdb", embedder=FakeEmbedder(dim=32), team=team) as mem:
        report = mem.index(folder, namespace="team:lab")
        assert sum(report.redactions.values()) >= 1
    assert key not in " ".join(text for _, _, text in lake_rows(team))


def test_a_team_item_is_read_and_changed_by_id_everywhere(tmp_path: Path, team: TeamConfig) -> None:
    with Memory(tmp_path / "a.duckdb", embedder=FakeEmbedder(dim=32), team=team) as a:
        item = a.remember("the centrifuge rotor is in drawer 3", namespace="team:lab", tags=["lab"])
        assert a.get(item.id).text == item.text
        changed = a.update(item.id, text="the centrifuge rotor is in drawer 5", tags=["lab", "moved"])
        assert (changed.id, changed.text, changed.tags) == (
            item.id,
            "the centrifuge rotor is in drawer 5",
            ["lab", "moved"],
        )
        hits = [h for h in a.search("centrifuge rotor drawer", k=10) if h.store == "team"]
        assert [(h.id, h.text) for h in hits] == [(item.id, changed.text)]
        with pytest.raises(ConfigError, match="pinned"):
            a.update(item.id, pinned=True)
        with pytest.raises(NotFoundError, match="team catalog"):
            a.get(item.id + 1)
    # Another memory (its own replica) sees the update, not the old text.
    with Memory(tmp_path / "b.duckdb", embedder=FakeEmbedder(dim=32), team=team) as b:
        assert b.get(item.id).text == changed.text
        hits = [h for h in b.search("centrifuge rotor drawer", k=10) if h.store == "team"]
        assert [(h.id, h.text) for h in hits] == [(item.id, changed.text)]


def test_an_update_reaches_a_replica_that_held_the_old_text(tmp_path: Path, team: TeamConfig) -> None:
    with Memory(tmp_path / "a.duckdb", embedder=FakeEmbedder(dim=32), team=team) as a:
        item = a.remember("the autoclave runs at 121 degrees", namespace="team:lab")
    with Memory(tmp_path / "b.duckdb", embedder=FakeEmbedder(dim=32), team=team) as b:
        assert [h.text for h in b.search("autoclave", k=5) if h.store == "team"] == [item.text]
    with Memory(tmp_path / "a.duckdb", embedder=FakeEmbedder(dim=32), team=team) as a:
        a.update(item.id, text="the autoclave runs at 134 degrees for prions")
    with Memory(tmp_path / "b.duckdb", embedder=FakeEmbedder(dim=32), team=team) as b:
        b._team.refresh(force=True)  # type: ignore[union-attr]
        assert [h.text for h in b.search("autoclave", k=5) if h.store == "team"] == [
            "the autoclave runs at 134 degrees for prions"
        ]
        assert team_replica.count(b._team.replica().db) == 1  # type: ignore[union-attr]


def test_the_replica_makes_passages_so_team_hits_rank_as_personal_ones(
    tmp_path: Path, team: TeamConfig, runbooks: Path
) -> None:
    with Memory(tmp_path / "me.duckdb", embedder=FakeEmbedder(dim=32), team=team) as mem:
        mem.index(runbooks, namespace="team:lab")
        assert mem.wait_refined(timeout=60)
        replica = mem._team.replica()  # type: ignore[union-attr]
        assert replica.db.scalar("SELECT count(*) FROM passages") > 0
    # The same files in a personal memory: the same ranking of the same texts.
    with Memory(tmp_path / "local.duckdb", embedder=FakeEmbedder(dim=32), refine="inline") as local:
        local.index(runbooks)
        expected = [h.text for h in local.search("copy results to the project share", k=5)]
    with Memory(tmp_path / "me.duckdb", embedder=FakeEmbedder(dim=32), team=team) as mem:
        mem.wait_refined(timeout=60)
        got = [h.text for h in mem.search("copy results to the project share", k=5, namespace="team:lab")]
    assert got == expected


def test_a_lake_that_stops_answering_leaves_search_on_the_replica_and_refuses_writes(
    tmp_path: Path, team: TeamConfig
) -> None:
    with Memory(tmp_path / "me.duckdb", embedder=FakeEmbedder(dim=32), team=team) as mem:
        item = mem.remember("the glovebox oxygen sensor reads high after a purge", namespace="team:lab")
    shutil.move(team.catalog, tmp_path / "moved.ducklake")  # the catalog is gone from its address
    Path(team.catalog).mkdir()  # and its path is now a folder: attaching it fails
    with Memory(tmp_path / "me.duckdb", embedder=FakeEmbedder(dim=32), team=team) as mem:
        assert mem.stats()["team"]["unreachable"]
        hits = mem.search("glovebox oxygen sensor", k=5)
        assert [h.id for h in hits if h.store == "team"] == [item.id]
        assert hits.trace.team is not None and hits.trace.team["unreachable"]
        with pytest.raises(StoreError, match=r"cannot be reached.*nothing was written"):
            mem.remember("a new fact", namespace="team:lab")
        mem.remember("a personal fact stays writable")
        assert [h.text for h in mem.search("personal fact", k=3) if h.store != "team"] == [
            "a personal fact stays writable"
        ]


def test_passages_off_reaches_the_replica(tmp_path: Path, team: TeamConfig, runbooks: Path) -> None:
    settings = Settings(passages=False)
    with Memory(tmp_path / "me.duckdb", embedder=FakeEmbedder(dim=32), team=team, settings=settings) as mem:
        mem.index(runbooks, namespace="team:lab")
        assert mem.wait_refined(timeout=5)
        assert mem._team.replica().db.scalar("SELECT count(*) FROM passages") == 0  # type: ignore[union-attr]
