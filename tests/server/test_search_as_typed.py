"""What the sidebar asks of the REST API (a real Jupyter server, the fake embedder): Forget on a
file's hit forgets the file (``source_of``) and its Undo restores all of it; search as you type
reads the last, unfinished word as a prefix (``prefix=1``); a query with no word is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.server.test_handlers import call, payload, wait_job

# A note of several chunks: a search shows it once, its other chunks under `more`.
RUNBOOK = "# Runbook\n\n" + "".join(
    f"## Median step {i}\n\nCompute the median instead of the average, step {i} of the pelican runbook.\n\n"
    for i in range(6)
)


async def index(jp_fetch: Any, path: str) -> None:
    job = payload(await call(jp_fetch, "POST", "index", body={"paths": [path]}))
    assert (await wait_job(jp_fetch, job["id"]))["state"] == "done"


async def search(jp_fetch: Any, q: str, **params: str) -> dict[str, Any]:
    response = await call(jp_fetch, "GET", "search", q=q, **params)
    assert response.code == 200, response.body
    return payload(response)  # type: ignore[no-any-return]


async def test_forget_of_a_files_hit_forgets_the_file_and_restore_brings_all_back(
    jp_fetch: Any, jp_root_dir: Path
) -> None:
    (jp_root_dir / "runbook[1].md").write_text(RUNBOOK)
    # Its name as a glob would also match this one: it must stay.
    (jp_root_dir / "runbook1.md").write_text("# Other\n\nCompute the median of the pelican counts.\n")
    await index(jp_fetch, ".")
    query = "compute the median instead of the average"
    hits = (await search(jp_fetch, query))["hits"]
    file_hit = next(h for h in hits if h["path"] == "runbook[1].md")
    assert len(file_hit["more"]) == 5  # one result for the file's six chunks

    forgotten = payload(await call(jp_fetch, "POST", "forget", body={"source_of": file_hit["id"]}))[
        "forgotten"
    ]
    assert sorted(forgotten) == sorted([file_hit["id"], *file_hit["more"]])
    paths = [h["path"] for h in (await search(jp_fetch, query, chunks="1", k="50"))["hits"]]
    assert "runbook[1].md" not in paths and "runbook1.md" in paths

    restored = payload(await call(jp_fetch, "POST", "restore", body={"ids": forgotten}))["restored"]
    assert sorted(restored) == sorted(forgotten)
    back = next(h for h in (await search(jp_fetch, query))["hits"] if h["path"] == "runbook[1].md")
    assert sorted([back["id"], *back["more"]]) == sorted(forgotten)

    # A remembered text has no file: the item alone is forgotten.
    note = payload(await call(jp_fetch, "POST", "remember", body={"text": "pelican median note"}))
    alone = payload(await call(jp_fetch, "POST", "forget", body={"source_of": note["id"]}))
    assert alone == {"forgotten": [note["id"]]}
    for body, message in (
        ({"source_of": "3"}, "source_of must be an item id"),
        ({"source_of": True}, "source_of must be an item id"),
        ({"source_of": 1, "path": "runbook1.md"}, "exactly one of query, path or source_of"),
    ):
        bad = await call(jp_fetch, "POST", "forget", body=body)
        assert bad.code == 400 and message in payload(bad)["message"], payload(bad)
    missing = await call(jp_fetch, "POST", "forget", body={"source_of": 999999})
    assert missing.code == 404


async def test_prefix_reads_the_last_unfinished_word_as_the_start_of_a_word(
    jp_fetch: Any, jp_root_dir: Path
) -> None:
    (jp_root_dir / "runbook.md").write_text(RUNBOOK)
    (jp_root_dir / "lunch.md").write_text("# Lunch\n\nThe office lunch menu changes on Mondays.\n")
    await index(jp_fetch, ".")

    def keyword_paths(result: dict[str, Any]) -> list[str]:
        return [h["path"] for h in result["hits"] if "bm25" in h["ranks"]]

    # Typed so far: "pelic". As a word it is in no note; as a prefix it is "pelican".
    assert keyword_paths(await search(jp_fetch, "pelic")) == []
    typed = await search(jp_fetch, "pelic", prefix="1")
    assert typed["query"] == "pelic" and typed["searched"] == "pelican"
    assert keyword_paths(typed) == ["runbook.md"]
    # The words before the last are kept; the last one stands for the words it begins.
    typed = await search(jp_fetch, "office lun", prefix="1")
    assert typed["searched"] == "office lunch" and keyword_paths(typed)[0] == "lunch.md"
    # A word that is complete (indexed), a space after it, a stopword, two letters: as typed.
    for q in ("pelican", "pelic ", "office the", "office lu"):
        assert (await search(jp_fetch, q, prefix="1"))["searched"] == q.strip(), q


async def test_a_query_without_a_word_is_refused(jp_fetch: Any) -> None:
    for q in ("?!...", "---", "__"):
        response = await call(jp_fetch, "GET", "search", q=q)
        assert response.code == 400
        assert "has no words to search for: give a letter or a digit" in payload(response)["message"]
