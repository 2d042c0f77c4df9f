"""Two people on one machine (a JupyterHub): two OS accounts, one team. The catalog's roles say
who may read and write the catalog; the data folder's permissions say who may write the lake's
files, checked against the account the process runs as. A real PostgreSQL catalog."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nbmemory import Memory
from nbmemory.embed import FakeEmbedder
from tests.team.conftest import Lake, run_client
from tests.team.test_team import poll, team_hits

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="starting a client as another OS account needs root"),
]

#: The second person: an account every Debian system has, with no rights of its own.
ACCOUNT = "nobody"


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBMEMORY_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("NBMEMORY_TEAM", raising=False)


@pytest.fixture
def shared(lake: Lake) -> Iterator[tuple[Lake, Path]]:
    """The lake with its data folder where both accounts reach it (pytest's folders are root's
    alone): the folder is this account's, and others may read it, not write it."""
    root = Path(tempfile.mkdtemp(prefix="nbm-shared-"))
    root.chmod(0o755)
    data = root / "lab-data"
    data.mkdir()
    data.chmod(0o755)
    try:
        yield Lake(lake.cluster, lake.database, data), root
    finally:
        shutil.rmtree(root, ignore_errors=True)


SEARCH_AND_TRY_A_WRITE = """
import json, os
from nbmemory.errors import TeamAccessError
seen = [h.text for h in mem.search("confocal warm up") if h.store == "team"]
try:
    mem.remember("the confocal booking moved to the wiki", namespace="team:lab")
    refused = ""
except TeamAccessError as exc:
    refused = str(exc)
print(json.dumps({"uid": os.getuid(), "seen": seen, "refused": refused}))
"""


def test_a_second_account_reads_the_team_and_writes_only_where_the_folder_lets_it(
    shared: tuple[Lake, Path], tmp_path: Path
) -> None:
    lake, root = shared
    with Memory(tmp_path / "alice" / "memory.duckdb", embedder=FakeEmbedder(dim=32), team=lake.team()) as alice:
        note = alice.remember("the confocal needs twenty minutes to warm up", namespace="team:lab")
        # Bob: another OS account with the same catalog role; the data folder is Alice's.
        got = json.loads(run_client(lake, root / "bob", SEARCH_AND_TRY_A_WRITE, account=ACCOUNT).splitlines()[-1])
        assert got["uid"] == pwd.getpwnam(ACCOUNT).pw_uid
        assert got["seen"] == [note.text]
        assert "data folder" in got["refused"] and "Nothing was written" in got["refused"]
        assert [h.id for h in team_hits(alice, "confocal")] == [note.id]

        # The lab shares the folder (here with everyone, sticky like /tmp): Bob's write lands.
        lake.data_path.chmod(0o1777)
        got = json.loads(run_client(lake, root / "bob", SEARCH_AND_TRY_A_WRITE, account=ACCOUNT).splitlines()[-1])
        assert got["refused"] == ""
        poll(lambda: len(team_hits(alice, "confocal")) == 2)
        assert "the confocal booking moved to the wiki" in [h.text for h in team_hits(alice, "confocal")]
    # Bob's personal memory is his: a file in his home that Alice's account does not own.
    bob_file = root / "bob" / "memory.duckdb"
    assert bob_file.stat().st_uid == pwd.getpwnam(ACCOUNT).pw_uid
