"""``nbmemory --team``: the command line attaches a team like ``Memory(team=...)``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.team.conftest import Lake

pytestmark = [pytest.mark.integration, pytest.mark.model]


def nbmemory(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "NBMEMORY_CACHE": str(home / "cache")}
    env.pop("NBMEMORY_TEAM", None)
    return subprocess.run(
        [sys.executable, "-m", "nbmemory.cli", "--home", str(home), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_team_option_writes_to_the_lake_and_a_search_says_where_hits_live(
    lake: Lake, tmp_path: Path
) -> None:
    team = lake.team_string()
    wrote = nbmemory(
        tmp_path / "alice",
        "--team",
        team,
        "remember",
        "the -80 freezer alarm code is 4711",
        "--ns",
        "team:lab",
    )
    assert wrote.returncode == 0, wrote.stderr
    mine = nbmemory(tmp_path / "bob", "--team", team, "remember", "my freezer inventory spreadsheet")
    assert mine.returncode == 0, mine.stderr
    found = nbmemory(tmp_path / "bob", "--team", team, "search", "freezer alarm code", "--json")
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)["hits"]
    assert {(h["namespace"], h["store"]) for h in hits} == {("team:lab", "team"), ("default", "personal")}
    assert hits[0]["store"] == "team" and "4711" in hits[0]["text"]
    # A folder indexed into the team by one person is found by another.
    runbooks = tmp_path / "runbooks"
    runbooks.mkdir()
    (runbooks / "laser.md").write_text("# Laser safety\n\nThe interlock key for the 488 nm laser is in the blue box.\n")
    indexed = nbmemory(tmp_path / "alice", "--team", team, "index", str(runbooks), "--ns", "team:lab")
    assert indexed.returncode == 0, indexed.stderr
    found = nbmemory(tmp_path / "bob", "--team", team, "search", "laser interlock key", "--json")
    hits = json.loads(found.stdout)["hits"]
    assert (hits[0]["store"], hits[0]["source"]) == ("team", str(runbooks / "laser.md"))
    # The reader's role may search the team but not write to it.
    refused = nbmemory(
        tmp_path / "carol", "--team", lake.team_string("nbm_reader"), "remember", "x", "--ns", "team:lab"
    )
    assert refused.returncode == 1
    assert (
        "nbm_reader" in refused.stderr and "team:lab" in refused.stderr and "Traceback" not in refused.stderr
    )
