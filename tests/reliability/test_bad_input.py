"""Nasty files and nasty queries: a clear error or a correct result, never a crash or a loss.

The corpus is generated in ``tmp_path`` at test time (the 100 MB file is sparse). Every case
ends with the items stored before it unchanged. Plumbing tests: the fake embedder throughout.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbmemory import Memory, PipelineConfig
from nbmemory.config import Settings
from nbmemory.embed import FakeEmbedder
from nbmemory.errors import BadFileError, ConfigError
from nbmemory.ingest.chunking import MAX_CHARS, chunk_file
from nbmemory.ingest.redact import redact
from nbmemory.search import hot
from nbmemory.search.prefix import has_words
from nbmemory.store import vectors
from tests.quick import examples

REPO = Path(__file__).resolve().parents[2]
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
CONTROL_TEXTS = [f"control item ctl{i} about backups and latency" for i in range(12)]


def snapshot(mem: Memory) -> dict[int, tuple[str, str, bool]]:
    """Every stored row's text, heading and forgotten state."""
    return {
        int(r[0]): (r[1], r[2], r[3] is not None)
        for r in mem.db.fetchall("SELECT id, text, heading, deleted_at FROM chunks ORDER BY id")
    }


def assert_kept(before: dict[int, tuple[str, str, bool]], mem: Memory) -> None:
    after = snapshot(mem)
    lost = {i: row for i, row in before.items() if after.get(i) != row}
    assert not lost, f"stored items changed or vanished: {lost}"


def assert_consistent(mem: Memory, degenerate_vectors: bool = False) -> None:
    """doctor passes, and the HNSW index holds one entry per row of the vectors table.

    With ``degenerate_vectors`` (thousands of chunks of a few repeated words, which the fake
    embedder maps onto a few dozen distinct vectors) HNSW cannot route a query to every copy,
    so doctor's self-probe may miss; the index must still hold exactly the table's vectors.
    """
    report = mem.doctor()
    failing = {c.name for c in report.checks if not c.ok}
    assert failing <= ({"vector index"} if degenerate_vectors else set()), report.summary()
    stored = mem.db.scalar("SELECT count(*) FROM vectors")
    if not vectors.persisted(mem.db):
        index = hot.ensure(mem.db)  # the memory-resident index holds every stored vector
        assert index is not None and int(index.has_vec.sum()) == stored
        return
    entries = mem.db.scalar(
        "SELECT count FROM pragma_hnsw_index_info() WHERE catalog_name = 'mem' AND index_name = 'vectors_hnsw'"
    )
    assert entries == stored


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[Memory]:
    with Memory(tmp_path / "bad.duckdb", embedder=FakeEmbedder(dim=32)) as memory:
        memory.remember_many(CONTROL_TEXTS)
        yield memory


# -- the corpus -----------------------------------------------------------------------------
NOTEBOOK = {
    "nbformat": 4,
    "nbformat_minor": 5,
    "metadata": {},
    "cells": [
        {"cell_type": "markdown", "id": "a", "metadata": {}, "source": ["# Title\n", "nbgoodtok text"]},
        {
            "cell_type": "code",
            "id": "b",
            "metadata": {},
            "execution_count": 1,
            "source": "print('x')",
            "outputs": [{"output_type": "stream", "name": "stdout", "text": "x\n"}],
        },
    ],
}


def nb(cells: Any, **top: Any) -> bytes:
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells, **top}).encode()


# name -> (bytes, expectation): "index:<token>" (indexed and found by the token) or
# "skip:<words the skip reason must contain>".
Case = tuple[bytes, str]


def notebook_cases() -> dict[str, Case]:
    good = json.dumps(NOTEBOOK).encode()
    cases: dict[str, Case] = {
        "good.ipynb": (good, "index:nbgoodtok"),
        "bad-json.ipynb": (b"{not json at all", "skip:not valid notebook JSON"),
        "empty.ipynb": (b"", "skip:not valid notebook JSON"),
        "list.ipynb": (b"[1, 2, 3]", "skip:top level is a list"),
        "string.ipynb": (b'"just a string"', "skip:top level is a str"),
        "null.ipynb": (b"null", "skip:top level is a null"),
        "no-cells.ipynb": (b'{"metadata": {}}', 'skip:no "cells" list'),
        "cells-not-list.ipynb": (nb("abc"), 'skip:"cells" is a str'),
        "nbformat2.ipynb": (json.dumps({"nbformat": 2, "cells": []}).encode(), "skip:unsupported nbformat"),
        "nbformat-str.ipynb": (
            json.dumps({"nbformat": "4", "cells": []}).encode(),
            "skip:unsupported nbformat",
        ),
        "nbformat3.ipynb": (
            json.dumps(
                {
                    "nbformat": 3,
                    "worksheets": [
                        {
                            "cells": [
                                {"cell_type": "heading", "level": 1, "source": "Old nb3tok notebook"},
                                {
                                    "cell_type": "code",
                                    "input": "print(1)",
                                    "outputs": [{"output_type": "pyout", "text": "1", "png": "iVBORw0KGgo="}],
                                },
                            ]
                        }
                    ],
                }
            ).encode(),
            "index:nb3tok",
        ),
        "nbformat3-bad-sheets.ipynb": (
            json.dumps({"nbformat": 3, "worksheets": "x"}).encode(),
            'skip:"worksheets"',
        ),
        "cell-not-object.ipynb": (nb([1]), "skip:cell 0 is a int"),
        "cell-no-type.ipynb": (nb([{"source": "x"}]), 'skip:no "cell_type"'),
        "cell-source-int.ipynb": (nb([{"cell_type": "markdown", "source": 5}]), "skip:expected a string"),
        "cell-no-source.ipynb": (
            nb([{"cell_type": "markdown"}, {"cell_type": "markdown", "source": "nosrctok"}]),
            "index:nosrctok",
        ),
        "outputs-not-list.ipynb": (
            nb([{"cell_type": "code", "source": "x", "outputs": {"a": 1}}]),
            'skip:"outputs" is a dict',
        ),
        "output-not-object.ipynb": (
            nb([{"cell_type": "code", "source": "x", "outputs": ["x"]}]),
            "skip:expected an object",
        ),
        "traceback-bad.ipynb": (
            nb([{"cell_type": "code", "source": "x", "outputs": [{"output_type": "error", "traceback": 3}]}]),
            "skip:traceback",
        ),
        "binary-outputs.ipynb": (
            nb(
                [
                    {
                        "cell_type": "code",
                        "source": "plot('binouttok')",
                        "outputs": [
                            {
                                "output_type": "display_data",
                                "data": {
                                    "image/png": "iVBORw0KGgoAAAANSUhEUg" * 4000,
                                    "application/octet-stream": "\u0000\u0001\u00ff" * 100,
                                    "text/plain": "<Figure size 640x480>",
                                },
                            }
                        ],
                    }
                ]
            ),
            "index:binouttok",
        ),
        "raw-nul.ipynb": (good[:40] + b"\x00" + good[40:], "skip:binary file"),
        "utf16.ipynb": (
            "\ufeff".encode("utf-16-le") + json.dumps(NOTEBOOK).encode("utf-16-le"),
            "skip:byte order mark",
        ),
        "deep-json.ipynb": (b"[" * 200_000 + b"]" * 200_000, "skip:nested too deeply"),
    }
    for cut in (1, len(good) // 3, len(good) // 2, len(good) - 2):
        cases[f"truncated-{cut}.ipynb"] = (good[:cut], "skip:not valid notebook JSON")
    return cases


def binary_cases() -> dict[str, Case]:
    rng = __import__("random").Random(7)
    noise = bytes(rng.randrange(256) for _ in range(6000))
    return {
        "noise.md": (noise, "skip:"),  # a NUL or a non-UTF-8 byte: either reason is right
        "noise.py": (noise[1000:], "skip:"),
        "noise.txt": (noise[2000:], "skip:"),
        "elf.py": (b"\x7fELF\x02\x01\x01\x00" + noise, "skip:binary file (NUL byte at offset 7)"),
        "png.md": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + noise, "skip:binary file (NUL byte at offset 8)"),
        "gzip.txt": (b"\x1f\x8b\x08\x00" + noise, "skip:binary file (NUL byte at offset 3)"),
        "zeros.md": (b"\x00" * 4096, "skip:binary file (NUL byte at offset 0)"),
    }


def nul_cases() -> dict[str, Case]:
    # Past the first 8 KiB a NUL is not taken as a binary marker: the text is indexed as is.
    return {
        "nul-start.md": (b"\x00# heading", "skip:binary file (NUL byte at offset 0)"),
        "nul-middle.txt": (
            b"text nulmidtok " + b"\x00" + b" more",
            "skip:binary file (NUL byte at offset 15)",
        ),
        "nul-late.md": (b"# Late\n\nnullatetok " + b"x" * 9000 + b"\x00tail\n", "index:nullatetok"),
    }


def utf8_cases() -> dict[str, Case]:
    return {
        "latin1.md": ("café naïve".encode("latin-1"), "skip:not valid UTF-8 (byte 0xe9 at offset 3)"),
        "lone-continuation.txt": (b"ok \x80 bad", "skip:not valid UTF-8 (byte 0x80 at offset 3)"),
        "overlong.md": (b"a \xc0\xaf b", "skip:not valid UTF-8 (byte 0xc0"),
        "surrogate-utf8.py": (b"x = '\xed\xa0\x80'", "skip:not valid UTF-8 (byte 0xed"),
        "cut-multibyte.txt": (b"fine " + "東".encode()[:2], "skip:not valid UTF-8"),
        "utf16.md": ("\ufeffhello".encode("utf-16-le"), "skip:UTF-16 byte order mark"),
        "bom-utf8.md": (b"\xef\xbb\xbf# BOM\n\nbomtok ok\n", "index:bomtok"),
    }


def nested_cases() -> dict[str, Case]:
    return {
        "quotes.md": (("> " * 20_000 + "deepquotetok\n").encode(), "index:deepquotetok"),
        "lists.md": (
            "".join("  " * i + "- item\n" for i in range(1000)).encode() + b"deeplisttok\n",
            "index:deeplisttok",
        ),
        "brackets.md": (b"[" * 50_000 + b"bracktok" + b"]" * 50_000, "index:bracktok"),
        "html.md": (b"<div>" * 20_000 + b"htmltok" + b"</div>" * 20_000, "index:htmltok"),
        "headings.md": (
            b"".join(b"#" * (1 + i % 6) + b" h%d\n" % i for i in range(600)) + b"headtok\n",
            "index:headtok",
        ),
        "parens.py": (b"x = " + b"(" * 100_000 + b"1" + b")" * 100_000 + b"\n# parentok\n", "index:parentok"),
        "nested-defs.py": (
            "".join("    " * i + f"def f{i}():\n" for i in range(300)).encode()
            + b"    " * 300
            + b"return 'deftok'\n",
            "index:deftok",
        ),
        "yaml-deep.yaml": (
            "".join("  " * i + f"k{i}:\n" for i in range(1200)).encode() + b"yamltok: 1\n",
            "index:yamltok",
        ),
    }


ODD_NAMES = [
    "with space.md",
    "ünïcødé 東京.md",
    "emoji 🦊.md",
    "new\nline.md",
    "tab\there.md",
    'quote\'s "double".md',
    "-leading-dash.md",
    "--help.md",
    "semi;colon $(echo x) `y`.md",
    "glob*?[x].md",
    "back\\slash.md",
    "percent %s %d.md",
    "x" * 240 + ".md",
]


def write_corpus(root: Path, cases: dict[str, Case]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name, (data, _) in cases.items():
        (root / name).write_bytes(data)


def check_report(mem: Memory, root: Path, cases: dict[str, Case], report: Any) -> dict[str, int]:
    """Each case is indexed and found, or skipped with a reason that names the problem."""
    skipped = dict(report.skipped)
    outcome = {"indexed": 0, "skipped": 0}
    for name, (_, expect) in cases.items():
        path = str(root / name)
        kind, _, detail = expect.partition(":")
        if kind == "skip":
            assert path in skipped, f"{name} should be skipped ({detail}); report: {report.summary()}"
            assert detail in skipped[path], f"{name}: reason {skipped[path]!r} lacks {detail!r}"
            outcome["skipped"] += 1
        else:
            assert path not in skipped, f"{name} was skipped: {skipped.get(path)}"
            # Chunk by chunk, by keyword: the chunk holding the marker (the fake embedder's
            # 32-dimension vectors say nothing a ranking could use).
            hits = mem.search(
                detail, k=5, log=False, config=PipelineConfig(retrievers=("bm25",), group=False)
            )
            assert any(h.source == path and detail in (h.text + h.heading) for h in hits), (name, hits.ids)
            outcome["indexed"] += 1
    return outcome


FILE_CATEGORIES: dict[str, Callable[[], dict[str, Case]]] = {
    "notebooks": notebook_cases,
    "binary": binary_cases,
    "nul": nul_cases,
    "utf8": utf8_cases,
    "nested": nested_cases,
}


@pytest.mark.parametrize("category", list(FILE_CATEGORIES))
def test_nasty_files_are_skipped_with_a_reason_or_indexed(mem: Memory, tmp_path: Path, category: str) -> None:
    cases = FILE_CATEGORIES[category]()
    root = tmp_path / category
    write_corpus(root, cases)
    before = snapshot(mem)
    report = mem.index(root)
    outcome = check_report(mem, root, cases, report)
    assert report.files_seen == len(cases)
    assert_kept(before, mem)
    # A second run changes nothing and reports the same skips.
    again = mem.index(root)
    assert sorted(again.skipped) == sorted(report.skipped)
    assert again.chunks_added == 0 and again.chunks_removed == 0
    assert_consistent(mem, degenerate_vectors=category == "nested")
    print(f"bad files [{category}]: {len(cases)} cases, {outcome}")


def test_a_fixed_file_is_indexed_on_the_next_run(mem: Memory, tmp_path: Path) -> None:
    root = tmp_path / "fix"
    root.mkdir()
    target = root / "notes.ipynb"
    target.write_bytes(json.dumps(NOTEBOOK).encode()[:50])
    assert str(target) in dict(mem.index(root).skipped)
    target.write_bytes(json.dumps(NOTEBOOK).encode())
    report = mem.index(root)
    assert report.skipped == [] and report.files_changed == 1
    assert any(h.source == str(target) for h in mem.search("nbgoodtok", k=3))


def test_a_100_mb_file_is_refused_above_the_size_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "big"
    root.mkdir()
    for name in ("huge.txt", "huge.md", "huge.ipynb"):
        with (root / name).open("wb") as fh:
            fh.truncate(100_000_000)  # sparse: nothing is written to disk
    (root / "small.md").write_text("# Small\n\nsmalltok fits\n")
    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=32)) as mem:
        report = mem.index(root)
        skipped = dict(report.skipped)
        for name in ("huge.txt", "huge.md", "huge.ipynb"):
            reason = skipped[str(root / name)]
            assert "100.0 MB" in reason and "10 MB limit" in reason and "NBMEMORY_MAX_FILE_MB" in reason
        assert mem.search("smalltok", k=1).hits[0].source == str(root / "small.md")
    # The cap is a setting: NBMEMORY_MAX_FILE_MB, or Settings(max_file_mb=...).
    monkeypatch.setenv("NBMEMORY_MAX_FILE_MB", "0.00001")
    with Memory(tmp_path / "m2.duckdb", embedder=FakeEmbedder(dim=32)) as mem:
        assert str(root / "small.md") in dict(mem.index(root / "small.md").skipped)
    monkeypatch.delenv("NBMEMORY_MAX_FILE_MB")
    settings = Settings(path=tmp_path / "m3.duckdb", max_file_mb=200)
    with Memory(settings=settings, embedder=FakeEmbedder(dim=32)) as mem:
        report = mem.index(root / "huge.txt")
        # Allowed in, 100 MB of NUL bytes is then refused as binary, not read as text.
        assert "binary file" in dict(report.skipped)[str(root / "huge.txt")]
    monkeypatch.setenv("NBMEMORY_MAX_FILE_MB", "lots")
    with pytest.raises(ConfigError, match="NBMEMORY_MAX_FILE_MB='lots' is not a number"):
        Settings()


def test_links_loops_devices_and_fifos_are_skipped_with_a_reason(mem: Memory, tmp_path: Path) -> None:
    root = tmp_path / "links"
    root.mkdir()
    (root / "real.md").write_text("# Real\n\nlinkrealtok here\n")
    (root / "alias.md").symlink_to(root / "real.md")
    (root / "loop1.md").symlink_to("loop2.md")
    (root / "loop2.md").symlink_to("loop1.md")
    (root / "self.md").symlink_to("self.md")
    (root / "dangling.md").symlink_to(tmp_path / "nowhere.md")
    (root / "sub").mkdir()
    (root / "sub" / "up").symlink_to("..")  # a folder loop: links to folders are not followed
    (root / "zero.txt").symlink_to("/dev/zero")  # would never end if read
    os.mkfifo(root / "pipe.md")  # would block forever if opened
    loop_root = tmp_path / "rootloop"
    loop_root.symlink_to(loop_root)
    before = snapshot(mem)
    report = mem.index(root, loop_root)
    skipped = dict(report.skipped)
    for name in ("loop1.md", "loop2.md", "self.md"):
        assert "Too many levels of symbolic links" in skipped[str(root / name)]
    assert "No such file" in skipped[str(root / "dangling.md")]
    assert skipped[str(root / "zero.txt")] == "not a regular file (a character device)"
    assert skipped[str(root / "pipe.md")] == "not a regular file (a FIFO)"
    assert skipped[str(loop_root)] == "broken symlink or symlink loop"
    # A link to a file is indexed under its own path (search may fold the two copies into one).
    sources = {r[0] for r in mem.db.fetchall("SELECT source FROM chunks WHERE text LIKE '%linkrealtok%'")}
    assert sources == {str(root / "real.md"), str(root / "alias.md")}
    assert {h.source for h in mem.search("linkrealtok", k=5) if "linkrealtok" in h.text} <= sources
    assert_kept(before, mem)


def test_unreadable_files_and_folders_are_named_in_the_report(
    mem: Memory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "perm"
    (root / "closed").mkdir(parents=True)
    (root / "closed" / "inside.md").write_text("# In\n\ninsidetok\n")
    (root / "locked.md").write_text("# Locked\n\nlockedtok\n")
    (root / "open.md").write_text("# Open\n\nopentok\n")
    report = mem.index(root)
    assert report.skipped == []
    before = snapshot(mem)
    if IS_ROOT:
        # chmod 000 does not stop root: make the same two calls fail as they would for a user.
        real_open, real_scandir = Path.open, os.scandir

        def deny_open(self: Path, *args: Any, **kwargs: Any) -> Any:
            if self.name == "locked.md":
                raise PermissionError(13, "Permission denied", str(self))
            return real_open(self, *args, **kwargs)

        def deny_scandir(path: Any = ".") -> Any:
            if str(path).endswith("closed"):
                raise PermissionError(13, "Permission denied", str(path))
            return real_scandir(path)

        monkeypatch.setattr(Path, "open", deny_open)
        monkeypatch.setattr(os, "scandir", deny_scandir)
    else:
        (root / "locked.md").chmod(0)
        (root / "closed").chmod(0)
    try:
        os.utime(root / "locked.md", (1, 1))  # changed on disk: it must be read again
        report = mem.index(root)
    finally:
        if not IS_ROOT:
            (root / "locked.md").chmod(0o644)
            (root / "closed").chmod(0o755)
    skipped = dict(report.skipped)
    assert skipped[str(root / "locked.md")] == "cannot read: Permission denied"
    assert skipped[str(root / "closed")] == "cannot list folder: Permission denied"
    # Neither the unreadable file's earlier chunks nor those of the unlisted folder are dropped.
    assert_kept(before, mem)
    found = {h.source for h in mem.search("insidetok", k=3) if "insidetok" in h.text}
    assert found == {str(root / "closed" / "inside.md")}


def test_files_named_one_by_one_with_one_name_not_utf8_index_the_others(mem: Memory, tmp_path: Path) -> None:
    """As a live batch names them: the file whose name is not UTF-8 is skipped with its reason,
    the others are indexed (its name cannot reach the store, not even as a query parameter)."""
    root = tmp_path / "named"
    root.mkdir()
    good = root / "good.md"
    good.write_text("# Good\n\ngoodnametok text\n")
    bad = os.fsencode(str(root)) + b"/bad-\xff.md"
    with open(bad, "wb") as fh:
        fh.write(b"# Bytes\n\nbadnametok\n")
    report = mem.index(good, os.fsdecode(bad))
    assert report.skipped == [
        (f"{root}/bad-\\xff.md", "file name is not valid UTF-8: rename the file to index it")
    ]
    assert report.files_changed == 1
    assert mem.search("goodnametok", k=1).hits[0].source == str(good)


def test_odd_path_names_are_indexed_found_and_forgotten(mem: Memory, tmp_path: Path) -> None:
    root = tmp_path / "odd names"
    root.mkdir()
    for i, name in enumerate(ODD_NAMES):
        (root / name).write_text(f"# Odd {i}\n\noddtok{i} text\n")
    bad_name = os.fsencode(str(root)) + b"/not-utf8-\xff\xfe.md"
    with open(bad_name, "wb") as fh:
        fh.write(b"# Bytes\n\nbadnametok\n")
    before = snapshot(mem)
    report = mem.index(root)
    assert report.skipped == [
        (f"{root}/not-utf8-\\xff\\xfe.md", "file name is not valid UTF-8: rename the file to index it")
    ]
    for i, name in enumerate(ODD_NAMES):
        hits = mem.search(f"oddtok{i}", k=3)
        assert hits.hits and hits.hits[0].source == str(root / name), name
    # Forget by a path holding quotes, dashes, newlines or glob characters: that file only.
    for name in ('quote\'s "double".md', "-leading-dash.md", "new\nline.md"):
        i = ODD_NAMES.index(name)
        assert len(mem.forget(path=str(root / name))) == 1
        assert all(h.source != str(root / name) for h in mem.search(f"oddtok{i}", k=5))
    assert_kept(before, mem)
    json.dumps(report.skipped)  # the report is printable and serialisable


# -- nasty queries --------------------------------------------------------------------------
QUERIES: dict[str, list[str]] = {
    "empty": [""],
    "whitespace": [" ", "\t\n\r ", "\u3000\u2003", "\n" * 50],
    "huge": ["a" * 10_000, "backups " * 1_300, "東" * 10_000, "ctl3 " + "x" * 9_995],
    "fts syntax": [
        '"quoted phrase"',
        "AND OR NOT",
        "ctl1*",
        "(ctl1 OR ctl2)",
        "text:ctl1",
        "^~-+!",
        "NEAR(a b)",
    ],
    "sql": [
        "'",
        "''",
        "'; DROP TABLE chunks; --",
        "ctl4'); DELETE FROM chunks; --",
        '" OR 1=1 --',
        "%",
        "_",
        "\\",
        "$1",
        "?",
        "UNION SELECT * FROM meta",
        "fts_main_chunks.match_bm25(id, 'x')",
    ],
    "scripts": [
        "東京の天気",
        "مرحبا بالعالم",
        "नमस्ते दुनिया",
        "Привет мир",
        "שלום עולם",
        "สวัสดี",
        "e\u0301te\u0301",
    ],
    "emoji": ["🦊🔥", "👩‍💻", "🇫🇷", "👍🏽 ctl5"],
    "control": [
        "\x00",
        "ctl6\x00drop",
        "\x01\x02\x1b[31mred\x1b[0m",
        "\x7f",
        "\u202eevil",
        "\ufeffctl7",
        "a\rb",
    ],
    "surrogates": ["\ud800", "ctl8\udcff", "\udfff\ud800"],
}


def check_query(mem: Memory, query: str) -> str:
    """Search once; returns "ok" or "error". Only a ConfigError that names the problem is allowed."""
    try:
        result = mem.search(query, k=5)
    except ConfigError as exc:
        message = str(exc)
        if not query.strip():
            assert "the query is empty" in message
        else:
            assert "not valid Unicode" in message and "lone surrogate" in message, message
        return "error"
    assert not (query.strip() == "" or any(0xD800 <= ord(c) <= 0xDFFF for c in query)), query
    texts = dict(mem.db.fetchall("SELECT id, text FROM chunks"))
    for hit in result.hits:
        assert hit.text == texts[hit.id]
    return "ok"


def test_nasty_queries_through_memory_search(mem: Memory) -> None:
    mem.remember("東京の天気 is sunny, كتاب عربي, नमस्ते, 🦊 fox emoji")
    before = snapshot(mem)
    tried: dict[str, dict[str, int]] = {}
    for category, queries in QUERIES.items():
        counts = {"ok": 0, "error": 0}
        for query in queries:
            counts[check_query(mem, query)] += 1
        tried[category] = counts
    assert tried["empty"] == {"ok": 0, "error": 1} and tried["whitespace"]["error"] == 4
    assert tried["surrogates"] == {"ok": 0, "error": 3}
    # A query that carries a real term still finds its item, whatever else it holds.
    for query, token in (
        ("ctl4'); DELETE FROM chunks; --", "ctl4"),
        ("ctl6\x00drop", "ctl6"),
        ("👍🏽 ctl5", "ctl5"),
        ("\ufeffctl7", "ctl7"),
        ("ctl3 " + "x" * 9_995, "ctl3"),
    ):
        assert any(token in h.text for h in mem.search(query, k=3).hits), query
    mem.flush()  # the buffered search log of all those queries is written without error
    assert mem.stats()["searches"] >= sum(c["ok"] for c in tried.values())
    assert_kept(before, mem)
    assert mem.doctor().ok
    print(f"nasty queries: {sum(len(q) for q in QUERIES.values())} tried, by category {tried}")


def test_other_arguments_reject_bad_text_with_clear_errors(mem: Memory) -> None:
    before = snapshot(mem)
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: mem.remember("bad \ud800 text"), "text is not valid Unicode"),
        (lambda: mem.remember("ok", tags=["\udcff"]), "tag is not valid Unicode"),
        (lambda: mem.remember("ok", namespace="n\udcff"), "namespace is not valid Unicode"),
        (lambda: mem.remember_many(["fine", "bad \udfff"]), "text 1 is not valid Unicode"),
        (lambda: mem.update(min(before), text="\ud800"), "text is not valid Unicode"),
        (lambda: mem.forget(query="\ud800"), "query is not valid Unicode"),
        (lambda: mem.forget(path="/x/\udcff.md"), "path is not valid Unicode"),
        (lambda: mem.forget(2**70), "no item with id"),
        (lambda: mem.get(2**70), "no item with id"),
        (lambda: mem.search("x", namespace="\udcff"), "namespace is not valid Unicode"),
        (lambda: mem.search("x", k=2**40), "k must be at most"),
        (lambda: mem.search("x", k=0), "k must be greater than 0"),
        (lambda: mem.remember("   \n\t"), "the text is empty"),
    ]
    for call, message in cases:
        with pytest.raises((ConfigError, __import__("nbmemory").NotFoundError), match=message):
            call()
    assert_kept(before, mem)
    # Text that is valid but odd is stored exactly (after redaction, which changes none of it).
    for text in ["nul \x00 inside", "ctrl \x01\x1b[31m red \x7f", "e\u0301", "🦊" * 1000, "x" * 200_000]:
        item = mem.remember(text)
        assert mem.get(item.id).text == text.strip()
    # Texts with no term the full-text tokenizer keeps (it keeps [a-z0-9] runs) and, for the fake
    # embedder, no word at all (a zero vector): doctor used to report both as damage.
    for text in ["東京の天気", "🦊🔥", "--- !!! ---", "the and of", "(((( ))))"]:
        mem.remember(text)
    assert mem.doctor().ok, mem.doctor().summary()


# -- the CLI --------------------------------------------------------------------------------
@pytest.fixture
def cli_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A memory file for in-process CLI runs, which use the fake embedder."""
    cli = importlib.import_module("nbmemory.cli.main")  # the module: the package exports its main()

    real = cli._memory
    monkeypatch.setattr(cli, "_memory", lambda args, **kw: real(args, embedder=FakeEmbedder(dim=32), **kw))
    path = tmp_path / "cli.duckdb"
    with Memory(path, embedder=FakeEmbedder(dim=32)) as memory:
        memory.remember_many(CONTROL_TEXTS)
    return path


def run_cli(*argv: str) -> tuple[int, str, str]:
    cli = importlib.import_module("nbmemory.cli.main")  # the module: the package exports its main()

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(argv))
        except SystemExit as exc:  # argparse usage errors
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.integration
def test_nasty_queries_through_the_cli(cli_db: Path) -> None:
    tried = 0
    for category, queries in QUERIES.items():
        for query in queries[:3]:  # each run opens the store: a few per category keep this fast
            tried += 1
            code, out, err = run_cli("-q", "--db", str(cli_db), "search", query, "--json")
            assert "Traceback" not in err, (query, err)
            # A query without a letter or digit has nothing to search for: refused like an empty one.
            if category in ("empty", "whitespace", "surrogates") or not has_words(query):
                assert code == 1 and err.startswith("error: ") and err.count("\n") == 1, (query, err)
            else:
                assert code == 0, (query, err)
                assert json.loads(out)["query"] == query[:4000]
    # Argument-looking queries: argparse wants `--` before them, and says so without a traceback.
    code, _, err = run_cli("-q", "--db", str(cli_db), "search", "--json", "--", "-ctl1 --help")
    assert code == 0, err
    code, _, err = run_cli("-q", "--db", str(cli_db), "search", "-k", "99999999999999999999", "x")
    assert code == 1 and "k must be at most" in err
    with Memory(cli_db, embedder=FakeEmbedder(dim=32)) as mem:
        assert sorted(t for (t,) in mem.db.fetchall("SELECT text FROM chunks")) == sorted(CONTROL_TEXTS)
    print(f"nasty CLI queries: {tried + 2} tried")


CLI_LAUNCHER = (
    "import importlib; cli = importlib.import_module('nbmemory.cli.main'); from nbmemory.embed import FakeEmbedder; real = cli._memory; "
    "cli._memory = lambda a, **k: real(a, embedder=FakeEmbedder(dim=32), **k); raise SystemExit(cli.main())"
)


@pytest.mark.integration
def test_cli_process_with_undecodable_and_odd_argv(cli_db: Path, tmp_path: Path) -> None:
    import subprocess

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), "NBMEMORY_HOME": str(tmp_path / "h")}

    def run(*args: str | bytes) -> subprocess.CompletedProcess[bytes]:
        argv: list[str | bytes] = [sys.executable, "-c", CLI_LAUNCHER, "-q", "--db", str(cli_db), *args]
        return subprocess.run(argv, capture_output=True, env=env, cwd=REPO, timeout=120)

    # Bytes that are not UTF-8 reach Python as lone surrogates: a one-line error, exit 1.
    out = run("search", b"caf\xe9 \xff")
    assert out.returncode == 1 and b"Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith(b"error: the query is not valid Unicode"), out.stderr
    out = run("remember", b"caf\xe9")
    assert out.returncode == 1 and b"text is not valid Unicode" in out.stderr, out.stderr
    out = run("search", "ctl2 'quoted' \"double\"\nnewline 東京 🦊", "--json")
    assert out.returncode == 0, out.stderr
    assert "ctl2" in json.loads(out.stdout)["hits"][0]["text"]
    notes = tmp_path / "-dash dir"
    notes.mkdir()
    (notes / "new\nline 'q'.md").write_text("# N\n\nclinametok\n")
    (notes / b"bad-\xff.md".decode(errors="surrogateescape")).write_text("x")
    out = run("index", str(notes))
    assert out.returncode == 0, out.stderr
    assert b"bad-\\xff.md: file name is not valid UTF-8" in out.stderr, out.stderr
    out = run("search", "clinametok", "--json")
    assert json.loads(out.stdout)["hits"][0]["source"] == str(notes / "new\nline 'q'.md")


# -- properties -----------------------------------------------------------------------------
# Text as people and programs produce it, surrogates excluded (they cannot be stored: see above).
TEXT = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=300)
# Hypothesis leaves lone surrogates out unless asked for them by category.
ANY_CHAR = st.characters() | st.characters(categories=["Cs"]) | st.sampled_from("\x00\x1b\u202e\ufeff")


def test_property_remember_then_search_round_trips(tmp_path: Path) -> None:
    counter = iter(range(10**6))
    with Memory(tmp_path / "prop.duckdb", embedder=FakeEmbedder(dim=32)) as mem:

        @settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck))
        @given(text=TEXT)
        def round_trip(text: str) -> None:
            token = f"proptok{next(counter)}"
            raw = f"{token}\n{text}"
            expected = redact(raw.strip()).text
            item = mem.remember(raw)
            assert item.text == expected
            assert mem.get(item.id).text == expected
            if token in expected:
                hits = {h.id: h for h in mem.search(token, k=3)}
                assert item.id in hits and hits[item.id].text == expected

        round_trip()
        assert mem.doctor().ok


def test_property_search_returns_or_raises_a_clear_config_error(tmp_path: Path) -> None:
    with Memory(tmp_path / "q.duckdb", embedder=FakeEmbedder(dim=32)) as mem:
        mem.remember_many(CONTROL_TEXTS)
        before = snapshot(mem)

        # Any code point, lone surrogates and control characters included.
        @settings(max_examples=examples(100), deadline=None, suppress_health_check=list(HealthCheck))
        @given(query=st.text(ANY_CHAR, max_size=60) | st.sampled_from(["", " ", "\t"]))
        def search_anything(query: str) -> None:
            check_query(mem, query)

        search_anything()
        mem.flush()
        assert_kept(before, mem)


def test_property_any_bytes_with_a_text_extension_are_indexed_or_skipped(tmp_path: Path) -> None:
    root = tmp_path / "fuzz"
    root.mkdir()
    counter = iter(range(10**6))
    with Memory(tmp_path / "fz.duckdb", embedder=FakeEmbedder(dim=32)) as mem:
        mem.remember_many(CONTROL_TEXTS)
        before = snapshot(mem)

        @settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck))
        @given(data=st.binary(max_size=3000), ext=st.sampled_from([".md", ".py", ".txt", ".ipynb", ".yaml"]))
        def index_bytes(data: bytes, ext: str) -> None:
            path = root / f"f{next(counter)}{ext}"
            path.write_bytes(data)
            report = mem.index(path)
            skipped = dict(report.skipped)
            if str(path) in skipped:
                assert skipped[str(path)].strip()
            else:
                assert report.files_changed + report.files_unchanged == 1

        index_bytes()
        assert_kept(before, mem)
        assert mem.doctor().ok, mem.doctor().summary()


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=30,
)
CELL = st.fixed_dictionaries(
    {},
    optional={
        "cell_type": st.sampled_from(["markdown", "code", "raw", "heading"]) | JSON,
        "source": st.text(max_size=80) | st.lists(st.text(max_size=20), max_size=3) | JSON,
        "outputs": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "output_type": st.sampled_from(
                        ["stream", "execute_result", "display_data", "error", "pyout"]
                    )
                    | JSON,
                    "text": st.text(max_size=40) | JSON,
                    "data": st.dictionaries(
                        st.sampled_from(["text/plain", "image/png", "text/html", "x"]), JSON, max_size=3
                    )
                    | JSON,
                    "traceback": st.lists(st.text(max_size=20), max_size=3) | JSON,
                },
            ),
            max_size=3,
        )
        | JSON,
        "id": st.text(max_size=8) | JSON,
    },
)


@settings(max_examples=examples(100), deadline=None)
@given(
    notebook=st.fixed_dictionaries(
        {"cells": st.lists(CELL, max_size=5) | JSON},
        optional={"nbformat": st.sampled_from([3, 4, 5]) | JSON, "worksheets": JSON},
    )
)
def test_property_notebook_shaped_json_is_chunked_or_rejected_clearly(notebook: dict[str, Any]) -> None:
    try:
        chunks = chunk_file("fuzz.ipynb", json.dumps(notebook).encode())
    except BadFileError as exc:
        assert exc.path == "fuzz.ipynb" and exc.reason
        return
    for chunk in chunks:
        assert chunk.text.strip() and len(chunk.text) <= MAX_CHARS
