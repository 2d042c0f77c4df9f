"""``/nbmemory/notebooks``, the Lab launcher's contract, against a real Jupyter server: the list,
a fresh copy each time (``name-1.ipynb``, ...), and the refusals that name what was wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat

from nbmemory.jupyter.builtin_notebooks import FOLDER


async def post(jp_fetch: Any, body: Any) -> Any:
    text = body if isinstance(body, str) else json.dumps(body)
    return await jp_fetch("nbmemory", "notebooks", method="POST", body=text, raise_error=False)


async def test_get_lists_both_notebooks_as_the_launcher_reads_them(jp_fetch: Any) -> None:
    response = await jp_fetch("nbmemory", "notebooks")
    assert response.code == 200
    listed = json.loads(response.body)["notebooks"]
    assert [(n["name"], n["title"]) for n in listed] == [
        ("diagnostics", "Memory diagnostics"),
        ("beir", "BEIR evaluation"),
    ]
    assert all((FOLDER / n["file"]).is_file() for n in listed)


async def test_post_makes_a_fresh_copy_each_time_and_never_overwrites(jp_fetch: Any, jp_root_dir: Path) -> None:
    (jp_root_dir / "work" / "sub").mkdir(parents=True)
    paths = []
    for _ in range(3):
        response = await post(jp_fetch, {"name": "diagnostics", "dir": "work/sub"})
        assert response.code == 201
        paths.append(json.loads(response.body)["path"])
    assert paths == [
        "work/sub/memory_diagnostics.ipynb",
        "work/sub/memory_diagnostics-1.ipynb",
        "work/sub/memory_diagnostics-2.ipynb",
    ]
    first = jp_root_dir / paths[0]
    nb = nbformat.read(first, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["nbmemory"]["builtin"] == "diagnostics"
    # A copy the person edited stays as it is: the next one takes the next free name.
    first.write_text(first.read_text().replace("Memory diagnostics", "My diagnostics"))
    edited = first.read_text()
    response = await post(jp_fetch, {"name": "diagnostics", "dir": "work/sub"})
    assert json.loads(response.body)["path"] == "work/sub/memory_diagnostics-3.ipynb"
    assert first.read_text() == edited
    root = await post(jp_fetch, {"name": "beir", "dir": ""})
    assert root.code == 201 and json.loads(root.body) == {"path": "beir_evaluation.ipynb"}
    assert (jp_root_dir / "beir_evaluation.ipynb").is_file()


async def test_post_refuses_what_it_cannot_do_and_names_it(jp_fetch: Any, jp_root_dir: Path) -> None:
    (jp_root_dir / "a-file.txt").write_text("not a folder")
    cases = [
        ({"name": "nope", "dir": ""}, 400, "'nope'"),
        ({"dir": ""}, 400, "'diagnostics'"),
        ({"name": "beir", "dir": "../outside"}, 400, "outside the server's root"),
        ({"name": "beir", "dir": "/tmp"}, 400, "not relative"),
        ({"name": "beir", "dir": "missing/folder"}, 404, "'missing/folder': no such folder"),
        ({"name": "beir", "dir": "a-file.txt"}, 404, "not a folder"),
        ({"name": "beir", "dir": 3}, 400, "dir must be"),
        ("[1, 2]", 400, "JSON object"),
        ("{not json", 400, "not valid JSON"),
    ]
    for body, code, words in cases:
        response = await post(jp_fetch, body)
        assert response.code == code, (body, response.code, response.body)
        assert words in json.loads(response.body)["message"], (body, response.body)
    assert sorted(p.name for p in jp_root_dir.iterdir()) == ["a-file.txt"]
