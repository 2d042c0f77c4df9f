"""Conversation turns: an item's event time, speaker and conversation, stored, read, filtered on.

Plumbing on a real DuckDB file with the fake embedder; the command line, REST and MCP front ends
are tested with theirs (``tests/test_cli.py``, ``tests/server/test_handlers.py``, ``tests/test_mcp.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from nbmemory import ConfigError, Memory
from nbmemory.embed import FakeEmbedder
from nbmemory.remote import connect
from nbmemory.store.db import Database
from nbmemory.store.migrations import SCHEMA_VERSION

REPO = Path(__file__).resolve().parents[1]
TURNS = [
    ("I went to a LGBTQ support group yesterday", "2023-05-08T13:56:00", "Caroline", "session_1"),
    ("That sounds lovely, how was the support group?", "2023-05-08T13:57:00", "Melanie", "session_1"),
    ("I painted a sunrise over the lake last weekend", "2023-06-01T09:00:00", "Melanie", "session_2"),
    ("The support group made me feel accepted", "2023-06-01T09:02:00", "Caroline", "session_2"),
]


def store_turns(mem: Memory) -> list[int]:
    texts, times, speakers, conversations = (list(column) for column in zip(*TURNS, strict=True))
    return mem.remember_many(texts, times=times, speakers=speakers, conversations=conversations)


def test_a_turn_round_trips_through_remember_get_and_search(fake_mem: Memory) -> None:
    said = datetime(2023, 5, 8, 15, 56, tzinfo=timezone(timedelta(hours=2)))
    item = fake_mem.remember(
        "I went to a LGBTQ support group yesterday", at=said, speaker="Caroline", conversation="session_1"
    )
    # Kept as the store keeps every time: naive UTC.
    assert item.event_at == datetime(2023, 5, 8, 13, 56)
    assert (item.speaker, item.conversation) == ("Caroline", "session_1")
    assert item.created_at is not None and item.created_at > item.event_at  # stored now, said then
    got = fake_mem.get(item.id)
    assert (got.event_at, got.speaker, got.conversation) == (item.event_at, "Caroline", "session_1")
    assert got.to_dict()["event_at"] == "2023-05-08T13:56:00" and got.to_dict()["speaker"] == "Caroline"

    result = fake_mem.search("support group", k=3)
    [hit] = result.hits
    assert (hit.id, hit.event_at, hit.speaker, hit.conversation) == (
        item.id,
        datetime(2023, 5, 8, 13, 56),
        "Caroline",
        "session_1",
    )
    data = hit.to_dict()
    assert data["event_at"] == "2023-05-08T13:56:00"
    assert (data["speaker"], data["conversation"]) == ("Caroline", "session_1")
    assert json.loads(json.dumps(data))["event_at"] == "2023-05-08T13:56:00"
    frame = result.to_polars()
    assert frame["speaker"].to_list() == ["Caroline"] and frame["conversation"].to_list() == ["session_1"]

    plain = fake_mem.remember("a note that is no conversation turn")
    assert (plain.event_at, plain.speaker, plain.conversation) == (None, None, None)


def test_remember_takes_iso_strings_and_naive_datetimes_as_utc(fake_mem: Memory) -> None:
    assert fake_mem.remember("zulu", at="2023-05-08T13:56:00Z").event_at == datetime(2023, 5, 8, 13, 56)
    assert fake_mem.remember("offset", at="2023-05-08T15:56+02:00").event_at == datetime(2023, 5, 8, 13, 56)
    assert fake_mem.remember("a date", at="2023-05-08").event_at == datetime(2023, 5, 8)
    naive = datetime(2023, 5, 8, 13, 56, 7, 123000)
    assert fake_mem.remember("naive", at=naive).event_at == naive
    utc = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert fake_mem.remember("aware", at=utc).event_at == datetime(2023, 5, 8, 13, 56)


def test_remember_many_takes_one_time_speaker_and_conversation_per_text(fake_mem: Memory) -> None:
    ids = fake_mem.remember_many(
        ["first turn", "second turn", "a plain note"],
        times=["2023-05-08T13:56:00", datetime(2023, 5, 8, 13, 57, tzinfo=UTC), None],
        speakers=["user", "assistant", None],
        conversations=["chat-7", "chat-7", None],
    )
    items = [fake_mem.get(i, touch=False) for i in ids]
    assert [i.event_at for i in items] == [datetime(2023, 5, 8, 13, 56), datetime(2023, 5, 8, 13, 57), None]
    assert [i.speaker for i in items] == ["user", "assistant", None]
    assert [i.conversation for i in items] == ["chat-7", "chat-7", None]
    # Leaving them out stores none.
    [plain] = fake_mem.remember_many(["one more note"])
    assert fake_mem.get(plain).speaker is None and fake_mem.get(plain).event_at is None


def test_remember_many_refuses_misaligned_turn_values_before_writing(fake_mem: Memory) -> None:
    texts = ["first turn", "second turn"]
    with pytest.raises(ConfigError, match="times has 1 entries for 2 texts"):
        fake_mem.remember_many(texts, times=["2023-05-08"])
    with pytest.raises(ConfigError, match="speakers has 3 entries for 2 texts"):
        fake_mem.remember_many(texts, speakers=["a", "b", "c"])
    with pytest.raises(ConfigError, match="conversations must be a list with one entry per text"):
        fake_mem.remember_many(texts, conversations="chat-7")
    with pytest.raises(ConfigError, match="time 1 'soon' is not an ISO 8601 time"):
        fake_mem.remember_many(texts, times=["2023-05-08", "soon"])
    with pytest.raises(ConfigError, match="speaker 1 is not valid Unicode"):
        fake_mem.remember_many(texts, speakers=["user", "bad \ud800"])
    with pytest.raises(ConfigError, match="conversation 0 must be a string"):
        fake_mem.remember_many(texts, conversations=[7, "chat"])  # type: ignore[list-item]
    assert fake_mem.stats()["items"] == 0


def test_bad_turn_values_are_config_errors_naming_them(fake_mem: Memory) -> None:
    with pytest.raises(ConfigError, match="at 'yesterday-ish' is not an ISO 8601 time"):
        fake_mem.remember("what happened", at="yesterday-ish")
    with pytest.raises(ConfigError, match="at must be a datetime or an ISO 8601 string, got int"):
        fake_mem.remember("what happened", at=1683554160)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="at '9999-12-31T23:30-01:00' is out of range once converted to UTC"):
        fake_mem.remember("what happened", at="9999-12-31T23:30-01:00")
    with pytest.raises(ConfigError, match="speaker is not valid Unicode: lone surrogate U\\+D800"):
        fake_mem.remember("what happened", speaker="Caro\ud800line")
    with pytest.raises(ConfigError, match="conversation is not valid Unicode"):
        fake_mem.remember("what happened", conversation="\udfff")
    with pytest.raises(ConfigError, match="speaker is not valid Unicode"):
        fake_mem.search("what happened", speaker="\ud800")
    with pytest.raises(ConfigError, match="conversation is not valid Unicode"):
        fake_mem.search("what happened", conversation="\ud800")
    assert fake_mem.stats()["items"] == 0


def test_search_filters_by_speaker_and_by_conversation(fake_mem: Memory) -> None:
    ids = store_turns(fake_mem)
    fake_mem.remember("Caroline's support group meets on Fridays")  # no speaker: not hers to say

    def found(**filters: Any) -> set[int]:
        return set(fake_mem.search("support group painted sunrise", k=10, **filters).ids)

    assert found(speaker="Caroline") == {ids[0], ids[3]}
    assert found(speaker="Melanie") == {ids[1], ids[2]}
    assert found(conversation="session_2") == {ids[2], ids[3]}
    assert found(speaker="Caroline", conversation="session_1") == {ids[0]}
    # Exact matches: another case or a prefix is another speaker.
    assert found(speaker="caroline") == set() and found(conversation="session") == set()
    assert len(found()) == 5


def test_since_and_until_range_over_the_event_time(fake_mem: Memory) -> None:
    ids = store_turns(fake_mem)
    note = fake_mem.remember("a support group note written today, no event time").id

    def found(**filters: Any) -> set[int]:
        return set(fake_mem.search("support group painted sunrise", k=10, **filters).ids)

    # Stored today, said in 2023: the turns fall in May and June 2023, the note today.
    assert found(since="2023-05-01", until="2023-05-31") == {ids[0], ids[1]}
    assert found(since="2023-06-01") == {ids[2], ids[3], note}
    assert found(until="2023-12-31") == set(ids)
    assert found(since="30d") == {note}
    assert found(since="2023-05-08T13:56:30", until="2023-06-01T09:01") == {ids[1], ids[2]}
    # A bound with a time zone is compared as the UTC time it names.
    assert found(since="2023-05-08T15:56:30+02:00", until="2023-06-01T11:01+02:00") == {ids[1], ids[2]}
    until = datetime(2023, 5, 8, 9, 56, 30, tzinfo=timezone(timedelta(hours=-4)))
    assert found(until=until) == {ids[0]}


def test_update_changes_and_clears_the_turn_fields(fake_mem: Memory) -> None:
    item = fake_mem.remember("I painted a sunrise", at="2023-06-01T09:00", speaker="Mel", conversation="s2")
    changed = fake_mem.update(item.id, speaker="Melanie", at="2023-06-01T10:00:00+01:00")
    assert (changed.speaker, changed.event_at, changed.conversation) == (
        "Melanie",
        datetime(2023, 6, 1, 9, 0),
        "s2",
    )
    assert fake_mem.search("painted sunrise", speaker="Melanie").ids == [item.id]
    assert fake_mem.search("painted sunrise", speaker="Mel").ids == []
    cleared = fake_mem.update(item.id, conversation="", at="")
    assert (cleared.speaker, cleared.event_at, cleared.conversation) == ("Melanie", None, None)
    with pytest.raises(ConfigError, match="at 'later' is not an ISO 8601 time"):
        fake_mem.update(item.id, at="later")
    with pytest.raises(ConfigError, match="speaker is not valid Unicode"):
        fake_mem.update(item.id, speaker="\ud800")
    assert fake_mem.get(item.id).speaker == "Melanie"


def test_export_writes_the_turn_fields(fake_mem: Memory, tmp_path: Path) -> None:
    store_turns(fake_mem)
    assert fake_mem.export(tmp_path / "items.jsonl") == len(TURNS)
    rows = [json.loads(line) for line in (tmp_path / "items.jsonl").read_text().splitlines()]
    assert [r["speaker"] for r in rows] == [t[2] for t in TURNS]
    assert [r["conversation"] for r in rows] == [t[3] for t in TURNS]
    assert [datetime.fromisoformat(r["event_at"]) for r in rows] == [datetime.fromisoformat(t[1]) for t in TURNS]


def test_a_store_made_before_turns_gets_the_columns_on_open(tmp_path: Path, fake_embedder: FakeEmbedder) -> None:
    path = tmp_path / "old.duckdb"
    with Memory(path, embedder=fake_embedder) as mem:
        old = mem.remember_many(["a note from before turns", "another old note"], tags=["old"])
    db = Database(path)
    # As a store of schema 6 was: no event time, speaker nor conversation.
    for column in ("event_at", "speaker", "conversation"):
        db.execute(f"ALTER TABLE chunks DROP COLUMN {column}")
    db.execute("DELETE FROM migrations WHERE version >= 7")
    db.close()
    with Memory(path, embedder=fake_embedder) as mem:
        assert mem.db.schema_version() == SCHEMA_VERSION
        items = [mem.get(i) for i in old]
        assert [i.text for i in items] == ["a note from before turns", "another old note"]
        assert all(i.tags == ["old"] and i.event_at is None and i.speaker is None for i in items)
        assert set(mem.search("old note", k=5).ids) == set(old)
        turn = mem.remember("a new turn", at="2023-05-08", speaker="user", conversation="c1")
        assert mem.search("new turn", speaker="user").ids == [turn.id]
    with Memory(path, embedder=fake_embedder) as mem:  # applied once: opening again changes nothing
        assert mem.db.migrate() == [] and mem.get(turn.id).speaker == "user"


CLIENT = textwrap.dedent(
    """
    import json, sys
    from datetime import datetime, timedelta, timezone
    from nbmemory.remote import connect
    from nbmemory.embed import FakeEmbedder
    mem = connect(sys.argv[1], embedder=FakeEmbedder(dim=32))
    said = datetime(2023, 5, 8, 15, 56, tzinfo=timezone(timedelta(hours=2)))
    item = mem.remember("client turn about the lake", at=said, speaker="Caroline", conversation="s1")
    ids = mem.remember_many(["client turn two", "client turn three"], times=["2023-05-09", None],
                            speakers=["Melanie", None], conversations=["s1", None])
    updated = mem.update(ids[1], speaker="Caroline")
    hits = mem.search("client turn", k=5, speaker="Caroline", conversation="s1").hits
    print(json.dumps({"role": mem.role, "item": item.to_dict(), "ids": ids, "updated": updated.speaker,
                      "hits": [h.to_dict() for h in hits]}))
    mem.close()
    """
)


@pytest.mark.integration
def test_a_client_of_the_owner_sends_and_reads_the_turn_fields(tmp_path: Path) -> None:
    path = tmp_path / "m.duckdb"
    with connect(path, embedder=FakeEmbedder(dim=32)) as owner:
        assert owner.role == "owner"
        done = subprocess.run(
            [sys.executable, "-c", CLIENT, str(path)], capture_output=True, text=True, cwd=REPO, timeout=240
        )
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout.splitlines()[-1])
        assert out["role"] == "client" and out["updated"] == "Caroline"
        assert out["item"]["event_at"] == "2023-05-08T13:56:00" and out["item"]["speaker"] == "Caroline"
        assert [h["id"] for h in out["hits"]] == [out["item"]["id"]]
        assert out["hits"][0]["conversation"] == "s1" and out["hits"][0]["event_at"] == "2023-05-08T13:56:00"
        two = owner.get(out["ids"][0])
        assert (two.event_at, two.speaker, two.conversation) == (datetime(2023, 5, 9), "Melanie", "s1")
