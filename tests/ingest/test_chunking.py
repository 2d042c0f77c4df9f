"""Chunkers: markdown, notebooks, code, plain text; decoding and dispatch."""

from __future__ import annotations

import json
import re
import textwrap
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbmemory.errors import BadFileError, ConfigError
from nbmemory.ingest.chunking import MAX_CHARS, chunk_file, chunk_text, decode, kind_of
from nbmemory.ingest.code import chunk_code
from nbmemory.ingest.markdown import chunk_markdown
from nbmemory.ingest.notebook import chunk_notebook
from nbmemory.ingest.text import chunk_plain
from nbmemory.ingest.types import ChunkDraft
from tests.quick import examples

ANSI = re.compile(r"\x1b\[")


def check_invariants(chunks: Sequence[ChunkDraft], max_chars: int, nlines: int | None = None) -> None:
    """Rules every chunker keeps: size cap, no empty text, no trailing whitespace, ordered lines."""
    prev_end = 0
    for c in chunks:
        assert c.text.strip() and c.text == c.text.rstrip() and not c.text.startswith("\n"), c
        assert len(c.text) <= max_chars, (len(c.text), c)
        assert all(line == line.rstrip() for line in c.text.split("\n")), c
        if nlines is not None:
            assert c.line_start is not None and c.line_end is not None
            assert 1 <= c.line_start <= c.line_end <= nlines, (c.line_start, c.line_end, nlines)
            assert c.line_start >= prev_end, (c.line_start, prev_end)
            prev_end = c.line_end


def covered_lines(chunks: Sequence[ChunkDraft]) -> Counter[int]:
    counts: Counter[int] = Counter()
    for c in chunks:
        assert c.line_start is not None and c.line_end is not None
        counts.update(range(c.line_start, c.line_end + 1))
    return counts


def assert_each_nonblank_line_once(source: str, chunks: Sequence[ChunkDraft]) -> None:
    lines = source.split("\n")
    counts = covered_lines(chunks)
    for number, line in enumerate(lines, start=1):
        if line.strip():
            assert counts[number] == 1, (number, line, counts[number])
    assert all(n <= len(lines) for n in counts)


def assert_text_matches_lines(source: str, chunks: Sequence[ChunkDraft]) -> None:
    """A chunk's text is exactly the source lines of its range (trailing spaces aside)."""
    lines = [line.rstrip() for line in source.split("\n")]
    for c in chunks:
        assert c.line_start is not None and c.line_end is not None
        assert c.text == "\n".join(lines[c.line_start - 1 : c.line_end]), c


# -- kinds, decoding, dispatch -----------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("notes/README.md", "markdown"),
        ("a.MARKDOWN", "markdown"),
        ("page.mdx", "markdown"),
        ("work/analysis.ipynb", "notebook"),
        ("pkg/mod.py", "code"),
        ("stubs/mod.pyi", "code"),
        ("web/app.tsx", "code"),
        ("main.go", "code"),
        ("lib.rs", "code"),
        ("script.R", "code"),
        ("conf/settings.yaml", "code"),
        ("pyproject.toml", "code"),
        ("query.sql", "code"),
        ("run.sh", "code"),
        ("notes.txt", "text"),
        ("doc.rst", "text"),
        ("paper.tex", "text"),
        ("server.log", "text"),
        ("data.json", None),
        ("table.csv", None),
        ("image.png", None),
        ("Makefile", None),
        ("archive.tar.gz", None),
    ],
)
def test_kind_of(path: str, kind: str | None) -> None:
    assert kind_of(path) == kind


def test_decode_strips_bom_and_crlf() -> None:
    assert decode("a.md", b"\xef\xbb\xbf# T\r\n\r\nbody\r\n") == "# T\n\nbody\n"


def test_decode_nul_byte_names_offset() -> None:
    with pytest.raises(BadFileError, match=r"binary file \(NUL byte at offset 3\)") as info:
        decode("x.txt", b"abc\x00def")
    assert info.value.path == "x.txt"


def test_decode_nul_only_scanned_in_first_8192_bytes_except_notebooks() -> None:
    data = b"a" * 9000 + b"\x00"
    assert decode("late.txt", data).startswith("aaa")
    with pytest.raises(BadFileError, match="NUL byte at offset 9000"):
        decode("late.ipynb", data)


def test_decode_invalid_utf8_names_byte_and_offset() -> None:
    with pytest.raises(BadFileError, match=r"not valid UTF-8 \(byte 0xff at offset 2\)"):
        decode("bad.md", b"ok\xffrest")
    # Offsets count from the start of the file, BOM included.
    with pytest.raises(BadFileError, match=r"byte 0xe9 at offset 5"):
        decode("latin1.txt", b"\xef\xbb\xbfca\xe9t\xe9")


def test_decode_utf16_is_rejected_with_a_hint() -> None:
    with pytest.raises(BadFileError, match="UTF-16"):
        decode("win.txt", "hello".encode("utf-16"))


def test_decode_never_returns_replacement_chars() -> None:
    for data in (b"\x80", b"abc\xc3", b"\xed\xa0\x80"):  # stray continuation, truncated, surrogate
        with pytest.raises(BadFileError, match="not valid UTF-8"):
            decode("x.md", data)


def test_chunk_file_unsupported_extension() -> None:
    with pytest.raises(BadFileError, match=r"unsupported file type \.csv") as info:
        chunk_file("data/table.csv", b"a,b\n1,2\n")
    assert info.value.path == "data/table.csv"
    with pytest.raises(BadFileError, match="no extension"):
        chunk_file("Makefile", b"all:\n")


def test_chunk_text_rejects_unknown_kind_and_bad_cap() -> None:
    with pytest.raises(ConfigError, match="unknown chunk kind 'csv'"):
        chunk_text("a.csv", "x", "csv")
    with pytest.raises(ConfigError, match="pdf files are read from their bytes: use chunk_file"):
        chunk_text("a.pdf", "x", "pdf")
    with pytest.raises(ConfigError, match="max_chars"):
        chunk_text("a.md", "x", "markdown", max_chars=0)


def test_chunk_file_handles_crlf_and_bom_line_numbers() -> None:
    data = b"\xef\xbb\xbf# Title\r\n\r\n## Part\r\n\r\nline one\r\nline two  \r\n"
    (chunk,) = chunk_file("n.md", data)
    assert chunk.text == "line one\nline two"
    assert chunk.heading == "Title > Part"
    assert (chunk.line_start, chunk.line_end) == (5, 6)


def test_empty_inputs_give_no_chunks() -> None:
    assert chunk_file("e.md", b"") == []
    assert chunk_file("e.txt", b"\n\n   \n") == []
    assert chunk_file("e.py", b"") == []
    assert chunk_file("e.go", b"\n\n") == []
    assert chunk_file("e.md", b"# Only a title\n\n## Only a heading\n") == []


# -- markdown ----------------------------------------------------------------------------

MARKDOWN = textwrap.dedent(
    """\
    # Project Notes

    Intro paragraph.

    ## Setup

    Install the tools.

    ```bash
    # this is a shell comment, not a heading
    ## neither is this
    pip install nbmemory
    ```

    ### Docker

    Run the container.

    ## Empty Section

    ## Usage
    Call the API.

    Configuration
    -------------

    Setext body.
    """
)


def test_markdown_heading_paths_and_fences() -> None:
    chunks = chunk_markdown(MARKDOWN, MAX_CHARS)
    check_invariants(chunks, MAX_CHARS, MARKDOWN.count("\n") + 1)
    assert [c.heading for c in chunks] == [
        "Project Notes",
        "Project Notes > Setup",
        "Project Notes > Usage",
        "Project Notes > Configuration",
    ]
    intro, setup, usage, config = chunks
    assert intro.text == "Intro paragraph."
    assert (intro.line_start, intro.line_end) == (3, 3)
    # '#' lines inside the fence are code, and the small H2 keeps its H3 inside the text.
    assert "# this is a shell comment, not a heading\n## neither is this" in setup.text
    assert "### Docker\n\nRun the container." in setup.text
    assert setup.text.startswith("Install the tools.")
    assert (setup.line_start, setup.line_end) == (7, 17)
    # Heading lines are in `heading`, not repeated in the text; empty sections vanish.
    assert "## Usage" not in usage.text and usage.text == "Call the API."
    assert config.text == "Setext body."
    assert all(c.kind == "markdown" for c in chunks)
    assert all(c.cell_id is None and c.cell_index is None for c in chunks)


def test_markdown_front_matter_tags_and_title() -> None:
    doc = textwrap.dedent(
        """\
        ---
        title: "Field Guide"
        tags: [ml, 'data cleaning']
        ---
        # Ignored H1

        Body text.
        """
    )
    chunks = chunk_markdown(doc, MAX_CHARS)
    assert [c.heading for c in chunks] == ["Field Guide > Ignored H1"]
    assert chunks[0].text == "Body text."
    assert chunks[0].meta == {"tags": "ml,data cleaning"}
    assert not any("title:" in c.text for c in chunks)

    block = "---\ntags:\n  - alpha\n  - beta\n---\nText only.\n"
    (chunk,) = chunk_markdown(block, MAX_CHARS)
    assert chunk.meta == {"tags": "alpha,beta"}
    assert chunk.heading == ""
    assert (chunk.text, chunk.line_start) == ("Text only.", 6)


def test_markdown_title_equal_to_h1_is_not_repeated() -> None:
    doc = "---\ntitle: Guide\n---\n# Guide\n\n## Part\n\nText.\n"
    (chunk,) = chunk_markdown(doc, MAX_CHARS)
    assert chunk.heading == "Guide > Part"


def test_a_note_without_a_title_of_its_own_is_titled_by_its_file_name() -> None:
    # Obsidian and similar tools name a note by its file and never write the name into it.
    body = "Some text.\n\n## Part\n\nMore.\n"
    chunks = chunk_text("vault/Weekly review.md", body, "markdown")
    assert [c.heading for c in chunks] == ["Weekly review", "Weekly review > Part"]
    (chunk,) = chunk_text("til/git/skip-a-bad-commit_when-bisecting.md", "Use `git bisect skip`.", "markdown")
    assert chunk.heading == "skip a bad commit when bisecting"
    (chunk,) = chunk_text("daily/2024-05-01.md", "Standup notes.", "markdown")
    assert chunk.heading == "2024-05-01"
    # A title of its own wins: an H1 anywhere, or the front matter's.
    chunks = chunk_text("notes/draft-1.md", "Lead-in.\n\n# Real title\n\nText.\n", "markdown")
    assert [c.heading for c in chunks] == ["", "Real title"]
    (chunk,) = chunk_text("notes/draft-2.md", "---\ntitle: Guide\n---\nText.\n", "markdown")
    assert chunk.heading == "Guide"


def test_markdown_leading_rule_without_yaml_is_not_front_matter() -> None:
    doc = "---\nThis is prose, not YAML.\n\n---\n\nMore prose.\n"
    text = " ".join(c.text for c in chunk_markdown(doc, MAX_CHARS))
    assert "This is prose" in text and "More prose." in text
    # Directly under a paragraph line, "---" makes a setext heading instead.
    chunks = chunk_markdown("Intro\n\nTopic\n---\nBody.\n", MAX_CHARS)
    assert [(c.heading, c.text) for c in chunks] == [("", "Intro"), ("Topic", "Body.")]


def test_markdown_big_h2_splits_at_h3() -> None:
    para = "Sentence about the topic goes here. " * 6
    doc = (
        "# Guide\n\n## Big\n\nLead-in text.\n\n"
        f"### First\n\n{para}\n\n### Second\n\n{para}\n\n#### Deep\n\nDeep text.\n\n"
        "## Small\n\nTiny.\n"
    )
    chunks = chunk_markdown(doc, 300)
    check_invariants(chunks, 300, doc.count("\n") + 1)
    headings = [c.heading for c in chunks]
    assert headings == [
        "Guide > Big",
        "Guide > Big > First",
        "Guide > Big > Second",
        "Guide > Small",
    ]
    assert chunks[0].text == "Lead-in text."
    # H4 is not split on: it stays in the text of its H3 part.
    assert "#### Deep\n\nDeep text." in chunks[2].text
    assert not any("### First" in c.text or "### Second" in c.text for c in chunks)


def test_markdown_big_section_packs_paragraphs_and_keeps_fences_whole() -> None:
    fence = "```python\n" + "\n".join(f"value_{i} = compute({i})" for i in range(8)) + "\n```"
    paras = [f"Paragraph {i} " + "word " * 20 for i in range(6)]
    doc = "## Part\n\n" + "\n\n".join(paras[:3]) + "\n\n" + fence + "\n\n" + "\n\n".join(paras[3:]) + "\n"
    max_chars = 260
    assert len(fence) <= max_chars
    chunks = chunk_markdown(doc, max_chars)
    check_invariants(chunks, max_chars, doc.count("\n") + 1)
    assert len(chunks) > 2
    assert sum(fence in c.text for c in chunks) == 1
    # Paragraphs are never cut: each one is inside a single chunk.
    for p in paras:
        assert sum(p.strip() in c.text for c in chunks) == 1, p


def test_markdown_giant_fence_is_split_by_lines_with_language() -> None:
    body = [f"print('line {i}')" for i in range(120)]
    doc = "## Code\n\n```python\n" + "\n".join(body) + "\n```\n"
    chunks = chunk_markdown(doc, 300)
    check_invariants(chunks, 300, doc.count("\n") + 1)
    assert len(chunks) > 3
    for c in chunks:
        assert c.text.startswith("```python\n") and c.text.endswith("\n```"), c.text
    joined = "\n".join(c.text for c in chunks)
    assert all(line in joined for line in body)
    assert chunks[0].line_start == 3 and chunks[-1].line_end == 124


def test_markdown_unclosed_fence_hides_headings_to_the_end() -> None:
    doc = "# T\n\n## A\n\n```\n# not a heading\n## still code\n"
    (chunk,) = chunk_markdown(doc, MAX_CHARS)
    assert chunk.heading == "T > A"
    assert "## still code" in chunk.text


def test_markdown_giant_paragraph_wraps_at_sentences() -> None:
    sentence = "The quick brown fox jumps over the lazy dog."
    doc = "## Prose\n\n" + " ".join([sentence] * 40) + "\n"
    chunks = chunk_markdown(doc, 200)
    check_invariants(chunks, 200, doc.count("\n") + 1)
    assert len(chunks) >= 9
    for c in chunks:
        assert c.text.startswith("The quick") and c.text.endswith("dog."), c.text
        assert c.line_start == c.line_end == 3


def test_markdown_unbreakable_token_is_hard_split() -> None:
    token = "x" * 250
    chunks = chunk_markdown(f"before\n\n{token}\n\nafter\n", 100)
    check_invariants(chunks, 100)
    assert [c.text for c in chunks] == ["before", "x" * 100, "x" * 100, "x" * 50 + "\n\nafter"]


def test_markdown_tilde_fence_and_indented_hash() -> None:
    doc = "## A\n\n~~~\n# inside tilde fence\n~~~\n\n    # indented code\n\n## B\n\nb\n"
    chunks = chunk_markdown(doc, MAX_CHARS)
    assert [c.heading for c in chunks] == ["A", "B"]
    assert "# inside tilde fence" in chunks[0].text and "# indented code" in chunks[0].text


# -- notebooks ---------------------------------------------------------------------------

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


def notebook(cells: list[dict[str, Any]], **extra: Any) -> bytes:
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells, **extra}).encode()


def md_cell(source: Any, cell_id: str | None = None) -> dict[str, Any]:
    cell: dict[str, Any] = {"cell_type": "markdown", "metadata": {}, "source": source}
    if cell_id:
        cell["id"] = cell_id
    return cell


def code_cell(
    source: Any, outputs: list[dict[str, Any]] | None = None, cell_id: str | None = None
) -> dict[str, Any]:
    cell: dict[str, Any] = {
        "cell_type": "code",
        "metadata": {},
        "execution_count": 1,
        "source": source,
        "outputs": outputs or [],
    }
    if cell_id:
        cell["id"] = cell_id
    return cell


NOTEBOOK_CELLS = [
    md_cell(["# Sales Analysis\n", "\n", "Quarterly numbers."], "intro"),
    code_cell(
        "import pandas as pd\nprint('loaded')",
        [
            {"output_type": "stream", "name": "stdout", "text": ["loaded\n", "\x1b[32mgreen ok\x1b[0m\n"]},
            {
                "output_type": "execute_result",
                "execution_count": 1,
                "metadata": {},
                "data": {"text/plain": ["42"]},
            },
            {
                "output_type": "display_data",
                "metadata": {},
                "data": {"image/png": PNG, "text/plain": ["<Figure size 640x480 with 1 Axes>"]},
            },
            {
                "output_type": "display_data",
                "metadata": {},
                "data": {"text/html": ["<table><tr><td>secret-html</td></tr></table>"]},
            },
        ],
        "load",
    ),
    md_cell("## Cleaning\nDrop the nulls.", "clean-md"),
    {"cell_type": "raw", "metadata": {}, "source": "raw cell text", "id": "raw"},
    code_cell([], cell_id="empty"),
    code_cell(
        "df = df.dropna()\nraise ValueError('bad value')",
        [
            {
                "output_type": "error",
                "ename": "ValueError",
                "evalue": "bad value",
                "traceback": [
                    "\x1b[0;31m-------------------------------------------\x1b[0m",
                    "\x1b[0;31mValueError\x1b[0m  Traceback (most recent call last)",
                    "Cell \x1b[0;32mIn[3], line 2\x1b[0m",
                    "\x1b[1;32m      1\x1b[0m df \x1b[38;5;241m=\x1b[39m df\x1b[38;5;241m.\x1b[39mdropna()",
                    "\x1b[0;32m----> 2\x1b[0m \x1b[38;5;28;01mraise\x1b[39;00m \x1b[38;5;167;01mValueError\x1b[39;00m",
                    "frame line 6",
                    "frame line 7",
                    "\x1b[0;31mValueError\x1b[0m: bad value",
                ],
            }
        ],
        "drop",
    ),
]


def test_notebook_cells_outputs_and_headings() -> None:
    chunks = chunk_file("work/sales.ipynb", notebook(NOTEBOOK_CELLS))
    check_invariants(chunks, MAX_CHARS)
    assert [(c.kind, c.cell_id, c.cell_index) for c in chunks] == [
        ("notebook-markdown", "intro", 0),
        ("notebook-code", "load", 1),
        ("notebook-markdown", "clean-md", 2),
        ("notebook-code", "drop", 5),
    ]
    intro, load, clean, drop = chunks
    assert intro.heading == "Sales Analysis"
    assert intro.text == "# Sales Analysis\n\nQuarterly numbers."
    assert load.heading == "Sales Analysis"
    assert load.text == "import pandas as pd\nprint('loaded')\n# Output:\nloaded\ngreen ok\n42"
    assert clean.heading == "Sales Analysis > Cleaning"
    assert drop.heading == "Sales Analysis > Cleaning"
    assert drop.text.startswith(
        "df = df.dropna()\nraise ValueError('bad value')\n# Output:\nValueError: bad value"
    )
    tail = drop.text.split("ValueError: bad value", 1)[1].strip("\n").split("\n")
    assert len(tail) <= 5 and tail[-1] == "frame line 7"
    everything = "\n".join(c.text + c.heading for c in chunks)
    assert PNG[:20] not in everything and "<Figure" not in everything
    assert "secret-html" not in everything and "raw cell text" not in everything
    assert not ANSI.search(everything) and "\x1b" not in everything
    assert all(c.line_start is None and c.line_end is None for c in chunks)


def test_notebook_title_falls_back_to_file_stem() -> None:
    cells = [code_cell("x = 1"), md_cell("### Step two"), code_cell("y = 2")]
    chunks = chunk_file("dir/my_experiment.ipynb", notebook(cells))
    assert [c.heading for c in chunks] == [
        "my_experiment",
        "my_experiment > Step two",
        "my_experiment > Step two",
    ]
    assert [c.cell_id for c in chunks] == [None, None, None]
    assert [c.cell_index for c in chunks] == [0, 1, 2]


def test_notebook_long_outputs_go_to_separate_chunks_and_are_truncated() -> None:
    code = "for i in range(10_000):\n    print(i)"
    stream = "".join(f"{i}\n" for i in range(3000))
    cells = [code_cell(code, [{"output_type": "stream", "name": "stdout", "text": stream}], "loop")]
    chunks = chunk_file("big.ipynb", notebook(cells), max_chars=400)
    check_invariants(chunks, 400)
    assert chunks[0].kind == "notebook-code" and chunks[0].text == code
    outputs = [c for c in chunks if c.kind == "notebook-output"]
    assert outputs and all(c.cell_id == "loop" and c.cell_index == 0 for c in outputs)
    joined = "\n".join(c.text for c in outputs)
    assert "... [truncated" in joined
    assert len(joined) < 2200


def test_notebook_long_cells_are_split_keeping_cell_identity() -> None:
    source = "\n\n".join(f"Paragraph {i}. " + "words " * 30 for i in range(10))
    chunks = chunk_file("long.ipynb", notebook([md_cell(source, "long-md")]), max_chars=300)
    check_invariants(chunks, 300)
    assert len(chunks) > 3
    assert {(c.kind, c.cell_id, c.cell_index) for c in chunks} == {("notebook-markdown", "long-md", 0)}


def test_notebook_markdown_output_and_string_sources() -> None:
    out = {
        "output_type": "display_data",
        "metadata": {},
        "data": {"text/markdown": "**bold result**", "text/plain": "<IPython.core.display.Markdown object>"},
    }
    (chunk,) = chunk_file("m.ipynb", notebook([code_cell("show()", [out])]))
    assert chunk.text == "show()\n# Output:\n**bold result**"


def test_notebook_widget_output_is_skipped() -> None:
    widget = {
        "output_type": "display_data",
        "metadata": {},
        "data": {
            "application/vnd.jupyter.widget-view+json": {"model_id": "abc"},
            "text/plain": "IntProgress(value=0)",
        },
    }
    (chunk,) = chunk_file("w.ipynb", notebook([code_cell("bar()", [widget])]))
    assert chunk.text == "bar()"


def test_notebook_truncated_json_is_bad_file() -> None:
    data = notebook(NOTEBOOK_CELLS)
    with pytest.raises(BadFileError, match=r"not valid notebook JSON: .*line 1 column \d+") as info:
        chunk_file("work/sales.ipynb", data[: len(data) // 2])
    assert info.value.path == "work/sales.ipynb"
    assert "work/sales.ipynb" in str(info.value)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"nbformat": 4, "cells": {"0": {}}}, r'"cells" is a dict, expected a list'),
        ({"nbformat": 4, "metadata": {}}, r'no "cells" list'),
        ([1, 2], "top level is a list"),
        ({"nbformat": 4, "cells": ["x"]}, "cell 0 is a str"),
        ({"nbformat": 4, "cells": [{"source": "x"}]}, 'cell 0 has no "cell_type"'),
        ({"nbformat": 4, "cells": [{"cell_type": "code", "source": 5}]}, r'cell 0 "source" is a int'),
        (
            {"nbformat": 4, "cells": [{"cell_type": "code", "source": "x", "outputs": "no"}]},
            '"outputs" is a str',
        ),
        ({"nbformat": 2, "cells": []}, "unsupported nbformat 2"),
    ],
)
def test_notebook_wrong_shapes_are_bad_files(payload: Any, message: str) -> None:
    with pytest.raises(BadFileError, match=message):
        chunk_file("n.ipynb", json.dumps(payload).encode())


def test_notebook_nbformat3_worksheets() -> None:
    nb3 = {
        "nbformat": 3,
        "worksheets": [
            {
                "cells": [
                    {"cell_type": "heading", "level": 1, "source": ["Old Notebook"]},
                    {
                        "cell_type": "code",
                        "input": ["a = 1\n", "a"],
                        "outputs": [
                            {"output_type": "pyout", "text": ["1"], "prompt_number": 1},
                            {
                                "output_type": "display_data",
                                "png": PNG,
                                "text": ["<matplotlib.figure.Figure at 0x10>"],
                            },
                        ],
                    },
                ]
            }
        ],
    }
    chunks = chunk_notebook("old.ipynb", json.dumps(nb3), MAX_CHARS)
    assert [(c.kind, c.cell_index, c.heading) for c in chunks] == [
        ("notebook-markdown", 0, "Old Notebook"),
        ("notebook-code", 1, "Old Notebook"),
    ]
    assert chunks[1].text == "a = 1\na\n# Output:\n1"


def test_notebook_nul_anywhere_is_binary() -> None:
    data = notebook([md_cell("x" * 10_000)])
    data = data[:-2] + b"\x00" + data[-2:]
    with pytest.raises(BadFileError, match="binary file"):
        chunk_file("n.ipynb", data)


# -- code --------------------------------------------------------------------------------

PYTHON = textwrap.dedent(
    '''\
    """Module docstring."""

    import os
    import sys

    # Tunable constant.
    LIMIT = 10


    # Adds two numbers.
    @decorator
    @other(arg=1)
    def add(a, b):
        """Return a + b."""
        return a + b
        # a trailing comment inside the function


    class Store:
        """A store."""

        kind = "memory"

        def get(self, key):
            return self.data[key]

        @property
        def size(self):
            # counts items
            return len(self.data)

        async def load(self):
            first = 1

            second = 2
            return first + second


    async def main():
        await Store().load()

    if __name__ == "__main__":
        main()
    '''
)


def test_python_top_level_definitions() -> None:
    chunks = chunk_code("pkg/mod.py", PYTHON, MAX_CHARS)
    check_invariants(chunks, MAX_CHARS, PYTHON.count("\n") + 1)
    assert_each_nonblank_line_once(PYTHON, chunks)
    assert_text_matches_lines(PYTHON, chunks)
    assert [c.heading for c in chunks] == [
        "mod.py",
        "mod.py > add",
        "mod.py > Store",
        "mod.py > main",
        "mod.py",
    ]
    module, add, store, main, tail = chunks
    assert module.text.startswith('"""Module docstring."""') and module.text.endswith("LIMIT = 10")
    assert add.text.startswith("# Adds two numbers.\n@decorator\n@other(arg=1)\ndef add(a, b):")
    assert add.text.endswith("# a trailing comment inside the function")
    assert store.text.startswith("class Store:") and "async def load" in store.text
    assert main.text == "async def main():\n    await Store().load()"
    assert tail.text.startswith('if __name__ == "__main__":')
    assert all(c.kind == "code" for c in chunks)


def test_python_big_class_splits_at_methods() -> None:
    chunks = chunk_code("pkg/mod.py", PYTHON, 120)
    check_invariants(chunks, 120, PYTHON.count("\n") + 1)
    assert_each_nonblank_line_once(PYTHON, chunks)
    assert_text_matches_lines(PYTHON, chunks)
    headings = [h for k, h in enumerate(c.heading for c in chunks) if k == 0 or h != chunks[k - 1].heading]
    assert headings == [
        "mod.py",
        "mod.py > add",
        "mod.py > Store",
        "mod.py > Store.get",
        "mod.py > Store.size",
        "mod.py > Store.load",
        "mod.py > main",
        "mod.py",
    ]
    by_heading = {c.heading: c for c in chunks}
    assert by_heading["mod.py > Store"].text == 'class Store:\n    """A store."""\n\n    kind = "memory"'
    assert by_heading["mod.py > Store.size"].text.startswith("    @property\n    def size(self):")


def test_python_big_function_splits_at_blank_lines_keeping_heading() -> None:
    body = "\n\n".join(f"    step_{i} = run({i})\n    check(step_{i})" for i in range(30))
    source = f"def pipeline():\n{body}\n"
    chunks = chunk_code("etl.py", source, 200)
    check_invariants(chunks, 200, source.count("\n") + 1)
    assert_each_nonblank_line_once(source, chunks)
    assert len(chunks) > 3
    assert {c.heading for c in chunks} == {"etl.py > pipeline"}
    for c in chunks[1:]:
        assert c.text.startswith("    step_"), c.text


def test_python_syntax_error_falls_back_to_regex_chunker() -> None:
    broken = PYTHON.replace("async def main():", "async def main(:")
    chunks = chunk_code("pkg/mod.py", broken, MAX_CHARS)
    check_invariants(chunks, MAX_CHARS, broken.count("\n") + 1)
    assert_each_nonblank_line_once(broken, chunks)
    assert_text_matches_lines(broken, chunks)
    assert any(c.heading.startswith("mod.py > ") and "add" in c.heading for c in chunks)
    assert any("Store" in c.heading for c in chunks)


def test_generic_chunker_for_typescript() -> None:
    source = textwrap.dedent(
        """\
        import { x } from "y";

        /** Adds numbers. */
        export function add(a: number, b: number): number {
          const total = a + b;
          return total;
        }

        export const mul = (a: number, b: number) => a * b;

        export class Calculator {
          run(): number {
            return add(1, mul(2, 3));
          }
        }

        interface Shape {
          area(): number;
        }
        """
    )
    chunks = chunk_code("src/calc.ts", source, 150)
    check_invariants(chunks, 150, source.count("\n") + 1)
    assert_each_nonblank_line_once(source, chunks)
    assert_text_matches_lines(source, chunks)
    by_heading = {c.heading: c.text for c in chunks}
    assert "calc.ts > add" in by_heading
    assert by_heading["calc.ts > add"].startswith("/** Adds numbers. */\nexport function add")
    assert "calc.ts > Calculator" in by_heading
    assert any("Shape" in h for h in by_heading)


def test_generic_chunker_go_and_rust_names() -> None:
    go = (
        "package main\n\n// Serve runs.\nfunc (s *Server) Serve(addr string) error {\n"
        + "\treturn nil\n" * 40
        + "}\n"
    )
    chunks = chunk_code("srv.go", go, 300)
    assert {c.heading for c in chunks} >= {"srv.go > Serve"}
    rust = (
        "pub fn parse(input: &str) -> u32 {\n"
        + "    0\n" * 80
        + "}\n\nimpl Display for Token {\n"
        + "    x\n" * 80
        + "}\n"
    )
    headings = {c.heading for c in chunk_code("lib.rs", rust, 300)}
    assert "lib.rs > parse" in headings and "lib.rs > Display for Token" in headings


def test_generic_chunker_packs_small_yaml_keys() -> None:
    source = "".join(f"key_{i}: value {i}\n" for i in range(100))
    chunks = chunk_code("conf.yaml", source, 400)
    check_invariants(chunks, 400, source.count("\n") + 1)
    assert_each_nonblank_line_once(source, chunks)
    assert 4 <= len(chunks) <= 15
    assert chunks[0].heading.startswith("conf.yaml > key_0, key_1, key_2")


# -- plain text --------------------------------------------------------------------------


def test_plain_text_paragraphs_packed() -> None:
    paras = [f"Paragraph number {i} has a few words." for i in range(20)]
    source = "\n\n".join(paras) + "\n"
    chunks = chunk_text("notes/log.txt", source, "text", max_chars=200)
    check_invariants(chunks, 200, source.count("\n") + 1)
    assert {c.heading for c in chunks} == {"log.txt"} and {c.kind for c in chunks} == {"text"}
    assert all(sum(p in c.text for c in chunks) == 1 for p in paras)
    assert all(len(c.text) > 100 for c in chunks[:-1])  # packed, not one per paragraph
    assert chunks[0].line_start == 1 and chunks[-1].line_end == 39


def test_plain_text_giant_paragraph() -> None:
    source = "word " * 1000
    chunks = chunk_plain(source, 120)
    check_invariants(chunks, 120, 1)
    assert Counter(" ".join(c.text for c in chunks).split()) == Counter(source.split())


def test_chunking_is_deterministic() -> None:
    for path, data in [
        ("a.md", MARKDOWN.encode()),
        ("m.py", PYTHON.encode()),
        ("n.ipynb", notebook(NOTEBOOK_CELLS)),
    ]:
        assert chunk_file(path, data, 150) == chunk_file(path, data, 150)


def large_files() -> list[tuple[str, bytes]]:
    """5 MB of markdown, Python and log lines (``bench.ingest.large_inputs`` times them)."""
    section = "## Section\n\nSome prose about a topic. " * 3 + "\n\n```python\n# code\nx = 1\n```\n\n"
    markdown = (section * (5_000_000 // len(section) + 1)).encode()
    python = (PYTHON * (5_000_000 // len(PYTHON) + 1)).encode()
    lines = ("a short log line\n" * (5_000_000 // 17 + 1)).encode()
    return [("big.md", markdown), ("big.py", python), ("big.txt", lines)]


def test_five_megabyte_files_chunk_into_bounded_chunks_that_keep_every_word() -> None:
    for path, data in large_files():
        chunks = chunk_file(path, data)
        assert chunks, path
        # Every line of text is in exactly one chunk (a markdown heading goes to its chunks' heading).
        body = [line for line in data.decode().splitlines() if not (path == "big.md" and line.startswith("## "))]
        assert Counter(" ".join(c.text for c in chunks).split()) == Counter(" ".join(body).split()), path


# -- properties ----------------------------------------------------------------------------

WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789.,!?", min_size=1, max_size=12)
LINE = st.lists(WORD, min_size=1, max_size=25).map(" ".join)


@st.composite
def markdown_docs(draw: st.DrawFn) -> tuple[str, set[int]]:
    """A markdown document and the 0-based indices of its heading lines."""
    lines: list[str] = []
    headings: set[int] = set()
    for _ in range(draw(st.integers(0, 25))):
        block = draw(st.sampled_from(["heading", "para", "fence", "blank", "list"]))
        if block == "heading":
            headings.add(len(lines))
            lines.append("#" * draw(st.integers(1, 6)) + " " + draw(LINE))
        elif block == "para":
            lines.extend(draw(st.lists(LINE, min_size=1, max_size=6)))
        elif block == "fence":
            lines.append("```" + draw(st.sampled_from(["", "python", "sh"])))
            lines.extend(
                draw(st.lists(st.one_of(LINE, LINE.map(lambda s: "# " + s), st.just("")), max_size=12))
            )
            lines.append("```")
        elif block == "list":
            lines.extend("- " + item for item in draw(st.lists(LINE, min_size=1, max_size=5)))
        else:
            lines.append(draw(st.sampled_from(["", "   ", "\t"])))
        if draw(st.booleans()):
            lines.append("")
    return "\n".join(lines), headings


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=markdown_docs(), max_chars=st.integers(40, 400))
def test_property_markdown(doc: tuple[str, set[int]], max_chars: int) -> None:
    text, heading_lines = doc
    chunks = chunk_markdown(text, max_chars)
    lines = text.split("\n")
    check_invariants(chunks, max_chars, len(lines))
    expected = Counter(w for i, line in enumerate(lines) if i not in heading_lines for w in line.split())
    found = Counter(w for c in chunks for w in c.text.split())
    assert not expected - found


@settings(max_examples=examples(150), deadline=None)
@given(
    paragraphs=st.lists(st.lists(LINE, min_size=1, max_size=8).map("\n".join), max_size=20),
    seps=st.sampled_from(["\n\n", "\n\n\n", "\n \n"]),
    max_chars=st.integers(30, 500),
)
def test_property_plain_text(paragraphs: list[str], seps: str, max_chars: int) -> None:
    text = seps.join(paragraphs)
    chunks = chunk_plain(text, max_chars)
    lines = text.split("\n")
    check_invariants(chunks, max_chars, len(lines))
    assert Counter(w for c in chunks for w in c.text.split()) == Counter(text.split())
    for c in chunks:
        assert c.line_start is not None and c.line_end is not None
        parts = c.text.split("\n")
        assert parts[0] in lines[c.line_start - 1] and parts[-1] in lines[c.line_end - 1]


IDENT = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True).filter(
    lambda s: (
        s
        not in {
            "if",
            "in",
            "is",
            "or",
            "as",
            "def",
            "del",
            "for",
            "and",
            "not",
            "try",
            "else",
            "elif",
            "from",
            "with",
            "pass",
            "class",
            "while",
            "async",
            "await",
            "break",
            "raise",
            "yield",
            "return",
            "import",
            "global",
            "lambda",
            "assert",
            "except",
            "finally",
            "continue",
            "nonlocal",
        }
    )
)


@st.composite
def python_modules(draw: st.DrawFn) -> str:
    """Valid Python: functions, decorated functions, classes with methods, statements, comments."""
    out: list[str] = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["def", "class", "stmt", "comment", "blank"]))
        name = draw(IDENT)
        if kind == "def":
            if draw(st.booleans()):
                out.append(f"@deco_{name}")
            out.append(f"def {name}(a, b):")
            for k in range(draw(st.integers(1, 8))):
                out.append(f"    v{k} = a + {k}" if draw(st.booleans()) else "")
            out.append("    return a")
        elif kind == "class":
            out.append(f"class {name.capitalize()}:")
            out.append("    attr = 1")
            for k in range(draw(st.integers(0, 4))):
                out.append("")
                out.append(f"    def m{k}(self):")
                out.extend(f"        x{j} = {j}" for j in range(draw(st.integers(1, 5))))
        elif kind == "stmt":
            out.append(f"{name} = {draw(st.integers(0, 999))}")
        elif kind == "comment":
            out.append(f"# note {name}")
        else:
            out.append("")
    return "\n".join(out) + "\n"


@settings(max_examples=examples(150), deadline=None)
@given(source=python_modules(), max_chars=st.integers(40, 400))
def test_property_python_lines_covered_exactly_once(source: str, max_chars: int) -> None:
    chunks = chunk_code("gen.py", source, max_chars)
    check_invariants(chunks, max_chars, source.count("\n") + 1)
    assert_each_nonblank_line_once(source, chunks)
    assert_text_matches_lines(source, chunks)
    generic = chunk_code("gen.js", source, max_chars)
    check_invariants(generic, max_chars, source.count("\n") + 1)
    assert_each_nonblank_line_once(source, generic)
    assert_text_matches_lines(source, generic)
