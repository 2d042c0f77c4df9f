"""PDF, DOCX and HTML: chunked like notes, located (page, heading path, lines), bad files reported."""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from pathlib import Path

import docx
import pytest
from pypdf import PdfWriter

from nbmemory import Memory
from nbmemory.embed import FakeEmbedder
from nbmemory.errors import BadFileError
from nbmemory.ingest.chunking import chunk_file, kind_of
from nbmemory.ingest.indexer import IndexReport
from nbmemory.items import Hit
from nbmemory.search.config import PipelineConfig
from nbmemory.store.db import Database
from nbmemory.store.migrations import SCHEMA_VERSION

BM25_ONLY = PipelineConfig(retrievers=("bm25",))
GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


# -- documents the tests write --------------------------------------------------------------
def pdf_bytes(pages: Sequence[Sequence[str]], outline: Sequence[tuple[str, int, int]] = ()) -> bytes:
    """A PDF with one text line per string (Helvetica); a page with no lines is a grey box only.

    ``outline`` holds (title, 0-based page, depth) bookmarks; depth 1 nests under the last depth 0.
    """
    objects: list[bytes] = [b"", b"", b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    kids: list[int] = []
    for lines in pages:
        ops = [b"0.5 g 72 72 400 600 re f"] if not lines else []
        for n, line in enumerate(lines):
            escaped = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)").encode("latin-1")
            ops.append(b"BT /F1 11 Tf 72 %d Td (%s) Tj ET" % (750 - 16 * n, escaped))
        content = b"\n".join(ops)
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content))
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % len(objects)
        )
        kids.append(len(objects))
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R >>"
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % k for k in kids),
        len(kids),
    )
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n%s\nendobj\n" % (number, body))
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    out.write(b"".join(b"%010d 00000 n \n" % o for o in offsets))
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    data = out.getvalue()
    if not outline:
        return data
    writer = PdfWriter(clone_from=io.BytesIO(data))
    parent = None
    for title, page, depth in outline:
        item = writer.add_outline_item(title=title, page_number=page, parent=parent if depth else None)
        if depth == 0:
            parent = item
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def encrypted(data: bytes, user_password: str) -> bytes:
    writer = PdfWriter(clone_from=io.BytesIO(data))
    writer.encrypt(user_password=user_password, owner_password="owner", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


RUNBOOK_PAGES = [
    ["Operations runbook for the billing service.", "Owners: the payments team."],
    ["Rollback: run deploy undo, then watch the error budget.", f"Deploy token {GITHUB_TOKEN}"],
    ["Appendix: glossary of terms used by the billing service."],
]
RUNBOOK_OUTLINE = [("Operations", 0, 0), ("Rollback", 1, 1), ("Appendix", 2, 0)]


def docx_bytes() -> bytes:
    document = docx.Document()
    document.add_heading("Database handbook", level=0)
    document.add_paragraph("How we look after the orders database.")
    document.add_heading("Maintenance", level=1)
    document.add_paragraph("Vacuum the orders table every Sunday night.")
    document.add_paragraph("check bloat first", style="List Bullet")
    document.add_paragraph("then run vacuum", style="List Bullet")
    document.add_heading("Replicas", level=2)
    document.add_paragraph("Failover promotes the standby replica in the second zone.")
    table = document.add_table(rows=2, cols=2)
    for (row, col), text in {(0, 0): "host", (0, 1): "port", (1, 0): "replica-eu", (1, 1): "5433"}.items():
        table.cell(row, col).text = text
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


HTML_PAGE = """<!doctype html>
<html>
<head><title>Kafka notes - wiki</title><style>.x { color: red }</style></head>
<body>
<nav><ul><li>Home</li><li>Sitemapword</li></ul></nav>
<main>
<h1>Kafka consumers</h1>
<p>Consumers in a group share the partitions of a topic.</p>
<h2>Lag</h2>
<p>Consumer lag grows when the rebalance
timeout is too short for slow batches.</p>
<pre>kafka-consumer-groups --describe --group billing</pre>
</main>
<footer>Footerword copyright</footer>
<script>var scriptword = 1;</script>
</body>
</html>
"""


@pytest.fixture
def memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Memory]:
    # A 100 kB size cap: every document below fits, big.pdf does not.
    monkeypatch.setenv("NBMEMORY_MAX_FILE_MB", "0.1")
    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=32)) as mem:
        yield mem


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "runbook.pdf").write_bytes(pdf_bytes(RUNBOOK_PAGES, RUNBOOK_OUTLINE))
    (root / "handbook.docx").write_bytes(docx_bytes())
    (root / "kafka.html").write_text(HTML_PAGE, encoding="utf-8")
    (root / "note.md").write_text("# Note\n\nA plain markdown note about espresso machines.\n")
    return root


def top(mem: Memory, query: str) -> Hit:
    hits = mem.search(query, k=3, config=BM25_ONLY).hits
    assert hits, query
    assert "bm25" in hits[0].ranks
    return hits[0]


# -- each format indexes, and search finds the right chunk where it is --------------------
def test_pdf_chunks_keep_their_page_and_outline_heading(memory: Memory, folder: Path) -> None:
    report = memory.index(folder)
    assert not report.skipped, report.skipped
    hit = top(memory, "rollback error budget")
    pdf = str(folder / "runbook.pdf")
    assert (hit.kind, hit.page, hit.heading) == ("pdf", 2, "Operations > Rollback")
    assert hit.location == f"{pdf}#page=2"
    assert memory.get(hit.id).location == f"{pdf}#page=2"
    appendix = top(memory, "glossary")
    assert (appendix.page, appendix.heading) == (3, "Appendix")
    # Redacted like every other source, before storage.
    assert GITHUB_TOKEN not in hit.text and "[REDACTED:github-token]" in hit.text
    assert report.redactions.get("github-token") == 1


def test_docx_chunks_keep_the_heading_path(memory: Memory, folder: Path) -> None:
    memory.index(folder)
    hit = top(memory, "failover standby replica")
    assert (hit.kind, hit.heading) == ("docx", "Database handbook > Maintenance > Replicas")
    assert "replica-eu | 5433" in hit.text
    assert hit.location == str(folder / "handbook.docx")
    vacuum = top(memory, "vacuum sunday")
    assert vacuum.heading == "Database handbook > Maintenance"
    assert "- check bloat first\n- then run vacuum" in vacuum.text


def test_html_keeps_main_text_headings_and_source_lines(memory: Memory, folder: Path) -> None:
    memory.index(folder)
    hit = top(memory, "rebalance timeout slow batches")
    assert (hit.kind, hit.heading) == ("html", "Kafka consumers > Lag")
    lines = HTML_PAGE.split("\n")
    first = next(n for n, line in enumerate(lines, 1) if "Consumer lag" in line)
    last = next(n for n, line in enumerate(lines, 1) if "<pre>" in line)
    assert hit.location == f"{folder / 'kafka.html'}:{first}-{last}"
    assert "Consumer lag grows when the rebalance timeout" in hit.text
    assert "```\nkafka-consumer-groups --describe --group billing\n```" in hit.text
    # Navigation, footer, script and style are not the page's text.
    for word in ("sitemapword", "footerword", "scriptword", "color"):
        assert not memory.search(word, config=BM25_ONLY).hits, word


def test_generated_html_folders_are_not_indexed(memory: Memory, folder: Path) -> None:
    for generated in ("htmlcov", "_build"):
        (folder / generated).mkdir()
        (folder / generated / "index.html").write_text("<p>Generatedword coverage report.</p>")
    report = memory.index(folder)
    assert report.files_seen == 4
    assert not memory.search("generatedword", config=BM25_ONLY).hits


def test_a_pdf_page_that_moves_keeps_its_chunk_with_the_new_page(memory: Memory, folder: Path) -> None:
    pdf = folder / "runbook.pdf"
    memory.index(folder)
    before = top(memory, "rollback error budget")
    shifted = [(title, page + 1, depth) for title, page, depth in RUNBOOK_OUTLINE]
    pdf.write_bytes(pdf_bytes([["A new cover page."], *RUNBOOK_PAGES], shifted))
    report = memory.index(folder)
    after = top(memory, "rollback error budget")
    assert after.id == before.id and after.page == 3
    assert report.chunks_kept >= 1


# -- bad input: a clear message naming the file, and the rest of the run indexed ----------
def test_bad_documents_are_skipped_with_a_clear_message_and_the_rest_is_indexed(
    memory: Memory, folder: Path
) -> None:
    good = pdf_bytes([["Secret plans for the launch party."]])
    bad = {
        "locked.pdf": encrypted(good, user_password="s3cret"),
        "scan.pdf": pdf_bytes([[], []]),
        "broken.pdf": good[:200],
        "empty.pdf": b"",
        "broken.docx": b"PK\x03\x04 this is no zip",
        "protected.docx": b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 512,
        "big.pdf": pdf_bytes([[f"line {i} of a very long report" for i in range(40)]] * 120),
    }
    for name, data in bad.items():
        (folder / name).write_bytes(data)
    report = memory.index(folder)
    reasons = {Path(path).name: reason for path, reason in report.skipped}
    assert set(reasons) == set(bad)
    assert "encrypted PDF: it needs a password" in reasons["locked.pdf"]
    assert reasons["scan.pdf"].startswith("scanned: no text to index")
    assert reasons["broken.pdf"].startswith("corrupt PDF")
    assert reasons["empty.pdf"].startswith("corrupt PDF")
    assert reasons["broken.docx"].startswith("corrupt DOCX")
    assert reasons["protected.docx"].startswith("password-protected DOCX")
    assert "MB limit (raise NBMEMORY_MAX_FILE_MB to index it)" in reasons["big.pdf"]
    # Nothing else is lost: the four good files are in, and searchable.
    assert report.files_changed == 4
    for query, name in [
        ("rollback error budget", "runbook.pdf"),
        ("failover standby", "handbook.docx"),
        ("rebalance timeout", "kafka.html"),
        ("espresso machines", "note.md"),
    ]:
        assert Path(top(memory, query).source or "").name == name


def test_a_pdf_encrypted_without_a_user_password_is_read(tmp_path: Path) -> None:
    data = encrypted(pdf_bytes([["Quarterly numbers for the board."]]), user_password="")
    [chunk] = chunk_file(str(tmp_path / "owner-only.pdf"), data)
    assert chunk.text == "Quarterly numbers for the board." and chunk.page == 1


def test_an_aes_pdf_without_the_crypto_package_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from pypdf import PdfReader
    from pypdf.errors import DependencyError

    def needs_crypto(self: PdfReader, password: str) -> None:
        raise DependencyError("cryptography>=3.1 is required for AES algorithm")

    monkeypatch.setattr(PdfReader, "decrypt", needs_crypto)
    data = encrypted(pdf_bytes([["x"]]), user_password="")
    with pytest.raises(BadFileError, match=r"pip install cryptography") as info:
        chunk_file("aes.pdf", data)
    assert info.value.path == "aes.pdf"


def test_a_docx_that_unpacks_too_far_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from nbmemory.ingest import docx as docx_reader

    monkeypatch.setattr(docx_reader, "MAX_EXPANDED_BYTES", 1000)
    with pytest.raises(BadFileError, match=r"unpacks to .* over the"):
        chunk_file("bomb.docx", docx_bytes())


# -- chunking details ---------------------------------------------------------------------
def test_kinds_by_extension() -> None:
    assert [kind_of(n) for n in ("a.PDF", "b.docx", "c.html", "d.htm", "e.doc")] == [
        "pdf",
        "docx",
        "html",
        "html",
        None,
    ]


def test_a_long_pdf_page_is_cut_within_the_page() -> None:
    lines = [f"Sentence number {i} of a long page about capacity planning." for i in range(60)]
    chunks = chunk_file("long.pdf", pdf_bytes([lines, ["Short second page."]]), max_chars=400)
    assert len(chunks) > 3
    assert {c.page for c in chunks[:-1]} == {1} and chunks[-1].page == 2
    assert all(len(c.text) <= 400 for c in chunks)
    assert "\n".join(c.text for c in chunks[:-1]) == "\n".join(lines)


def test_html_text_that_looks_like_markdown_stays_text() -> None:
    page = "<h1>T</h1><p># not a heading</p><p>para</p><p>===</p><pre>```\ncode\n```</pre>"
    [chunk] = chunk_file("x.html", page.encode())
    assert chunk.heading == "T"
    assert chunk.text == "\\# not a heading\n\npara\n\n\\===\n\n````\n```\ncode\n```\n````"


def test_html_in_a_declared_legacy_charset_is_decoded() -> None:
    page = '<html><head><meta charset="windows-1252"></head><body><p>Caf\xe9 cr\xe8me</p></body></html>'
    [chunk] = chunk_file("legacy.html", page.encode("cp1252"))
    assert chunk.text == "Café crème"
    with pytest.raises(BadFileError, match="not valid UTF-8"):
        chunk_file("undeclared.html", "<p>Caf\xe9</p>".encode("cp1252"))


def test_html_without_main_uses_articles_then_the_body() -> None:
    page = "<title>Site</title><div>menu junk</div><article><h2>Post</h2><p>Body text.</p></article>"
    [chunk] = chunk_file("a.html", page.encode())
    assert (chunk.heading, chunk.text) == ("Site > Post", "Body text.")
    [chunk] = chunk_file("b.html", b"<p>Only a paragraph.</p>")
    assert (chunk.heading, chunk.text, chunk.line_start) == ("", "Only a paragraph.", 1)


# -- the store ------------------------------------------------------------------------------
def test_a_store_made_before_pages_gets_the_column_on_open(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    db = Database(path)
    # As a store of schema 3 was: no page column, and none of the tables added after it.
    db.execute("ALTER TABLE chunks DROP COLUMN page")
    db.execute("DROP TABLE passages")
    db.execute("DELETE FROM migrations WHERE version >= 4")
    db.close()
    db = Database(path)
    try:
        assert db.schema_version() == SCHEMA_VERSION  # every later migration applied too
        assert db.scalar(
            "SELECT count(*) FROM duckdb_columns() WHERE table_name = 'chunks' AND column_name = 'page'"
        )
    finally:
        db.close()


def test_report_lists_skips_by_path(memory: Memory, folder: Path) -> None:
    (folder / "scan.pdf").write_bytes(pdf_bytes([[]]))
    report: IndexReport = memory.index(folder / "scan.pdf")
    assert report.skipped == [(str(folder / "scan.pdf"), report.skipped[0][1])]
    assert "scanned: no text to index" in report.skipped[0][1]
