"""BM25 beyond ASCII: Unicode letters (accents folded), CJK bigrams, and English unchanged."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbmemory import Memory
from nbmemory.embed import FakeEmbedder
from nbmemory.ingest.chunking import chunk_file, kind_of
from nbmemory.search.config import PipelineConfig
from nbmemory.store import fts
from tests.fts_postings import delta_then_snapshot
from tests.quick import examples

BM25_ONLY = PipelineConfig(retrievers=("bm25",))
SAMPLE_CORPUS = Path(__file__).resolve().parents[1] / "nbmemory" / "sample_corpus"
# The first tokenizer (version 1): only [a-z0-9] runs, after lower-casing and accent stripping.
LEGACY_IGNORE = "[^a-z0-9]+"
LEGACY_SCHEMA = "fts_main_chunks"

NOTES = {
    "russian": "Совещание перенесли на четверг: отчёт о миграции базы данных готовит Ирина.",
    "german": "Die Straßenbahn fährt über die Brücke nach Köln; der Fahrplan ändert sich im März.",
    "chinese": "我们用机器学习预测下个月的销量，模型每周重新训练一次。",
    "japanese": "東京の天気は明日から雨になるので、屋外の作業は延期します。",
    "greek": "Η συνάντηση για τον προϋπολογισμό μεταφέρθηκε την Παρασκευή.",
    "english": "The quarterly report on database migration is due on Thursday.",
    "distractor": "机器人在仓库里搬运箱子。",
}


@pytest.fixture
def notes(fake_mem: Memory) -> dict[str, int]:
    ids = fake_mem.remember_many(list(NOTES.values()))
    return dict(zip(NOTES, ids, strict=True))


def bm25_top(mem: Memory, query: str) -> list[int]:
    hits = mem.search(query, k=5, config=BM25_ONLY).hits
    assert all("bm25" in h.ranks for h in hits)
    return [h.id for h in hits]


@pytest.mark.parametrize(
    ("query", "note"),
    [
        ("четверг", "russian"),  # an exact Cyrillic word
        ("Ирина", "russian"),
        ("отчет", "russian"),  # ё folded to е, like any accent
        ("Brücke", "german"),
        ("Brucke", "german"),  # the same word typed without the umlaut
        ("koln", "german"),
        ("MÄRZ", "german"),
        ("机器学习", "chinese"),  # a Chinese phrase: bigrams 机器 器学 学习
        ("预测销量", "chinese"),
        ("東京の天気", "japanese"),
        ("προϋπολογισμό", "greek"),
        ("προυπολογισμο", "greek"),
    ],
)
def test_non_ascii_words_are_found_by_bm25(
    fake_mem: Memory, notes: dict[str, int], query: str, note: str
) -> None:
    top = bm25_top(fake_mem, query)
    assert top and top[0] == notes[note], (query, top)


def test_a_cjk_phrase_ranks_the_note_holding_all_of_it_first(fake_mem: Memory, notes: dict[str, int]) -> None:
    # Both notes hold 机器; only the Chinese note holds 器学 and 学习 too.
    top = bm25_top(fake_mem, "机器学习")
    assert top[:2] == [notes["chinese"], notes["distractor"]]
    assert fts.query_terms(fake_mem.db, "机器学习") == sorted(["机器", "器学", "学习"])


def test_found_before_and_after_a_rebuild(fake_mem: Memory, notes: dict[str, int]) -> None:
    # remember_many's write ends with a rebuild; this write stays in the delta postings.
    late = fake_mem.remember("Новая заметка про четверг и 机器学习")
    assert fts.delta_size(fake_mem.db) >= 1
    assert late.id in bm25_top(fake_mem, "четверг")
    assert late.id in bm25_top(fake_mem, "机器学习")
    fts.rebuild(fake_mem.db)
    assert fts.delta_size(fake_mem.db) == 0
    assert late.id in bm25_top(fake_mem, "четверг")
    assert late.id in bm25_top(fake_mem, "机器学习")


def test_delta_postings_match_the_snapshot_for_every_script(fake_mem: Memory) -> None:
    texts = [*NOTES.values(), "한국어를 배우다", "カタカナー and ひらがな", "中", "x² ½ µm α-synuclein ﬁle"]
    ids = [fake_mem.remember(t, heading="Überschrift 标题").id for t in texts]
    delta, lens, snapshot, snapshot_lens = delta_then_snapshot(fake_mem, ids)
    assert delta == snapshot
    assert {i: lens[i] for i in ids} == {i: snapshot_lens[i] for i in ids}
    # The query side tokenizes the same way: every term of a text's own words is in its postings.
    for chunk_id, text in zip(ids, texts, strict=True):
        assert set(fts.query_terms(fake_mem.db, text)) <= {
            t for c, f, t, _ in delta if c == chunk_id and f == 0
        }


def test_postings_made_before_the_transaction_equal_those_made_inside_it(fake_mem: Memory) -> None:
    """The indexer tokenizes new chunks before its transaction (``fts.postings_of``): the rows it
    then inserts are those tokenizing the stored chunks gives, for every script."""
    texts = [*NOTES.values(), "한국어를 배우다", "カタカナー and ひらがな", "中", "!!! ...", "x² ½ µm ﬁle"]
    headings = ["Überschrift 标题", "", "Plain heading"]
    ids = [fake_mem.remember(t, heading=headings[n % 3]).id for n, t in enumerate(texts)]
    rows = fake_mem.db.fetchall(
        "SELECT id, heading, text FROM chunks WHERE id IN (SELECT unnest(?::BIGINT[])) ORDER BY id", [ids]
    )
    made = fts.postings_of(fake_mem.db, [(h, t) for _, h, t in rows])
    before = {(ids[i], f, term, tf) for i, f, term, tf in zip(*made.to_pydict().values(), strict=True)}
    inside = set(fake_mem.db.fetchall("SELECT * FROM fts_delta WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))", [ids]))
    assert before == inside and len(inside) > 40
    # Written from them, the delta (lengths too) is the same.
    with fake_mem.db.transaction():
        fake_mem.db.execute("DELETE FROM fts_delta WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))", [ids])
        lengths = fake_mem.db.fetchall("SELECT * FROM fts_delta_docs ORDER BY chunk_id")
        fake_mem.db.execute("DELETE FROM fts_delta_docs WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))", [ids])
        fts.add_delta(fake_mem.db, ids, made, fresh=True)
    assert set(fake_mem.db.fetchall("SELECT * FROM fts_delta WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))", [ids])) == inside
    assert fake_mem.db.fetchall("SELECT * FROM fts_delta_docs ORDER BY chunk_id") == lengths


def test_the_store_of_record_keeps_the_text_as_written(fake_mem: Memory, notes: dict[str, int]) -> None:
    assert fake_mem.get(notes["chinese"]).text == NOTES["chinese"]
    assert not fake_mem.db.table_exists(fts.FTS_INPUT)  # the tokenizer's input is not kept


def test_a_store_indexed_by_the_first_tokenizer_is_rebuilt_on_open(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    with Memory(path, embedder=FakeEmbedder(dim=32)) as mem:
        russian = mem.remember(NOTES["russian"]).id
        english = mem.remember(NOTES["english"]).id
        # Make the file look as version 1 left it: its snapshot, no tokenizer version.
        db = mem.db
        db.execute(f"DROP SCHEMA {fts.FTS_SCHEMA} CASCADE")
        db.execute(
            "PRAGMA create_fts_index('chunks', 'id', 'text', 'heading', stemmer = 'porter', "
            f"stopwords = 'english', ignore = '{LEGACY_IGNORE}', overwrite = 1)"
        )
        db.execute("DELETE FROM meta WHERE key = 'fts_tokenizer'")
        db.cache.clear()
    with Memory(path, embedder=FakeEmbedder(dim=32)) as mem:
        assert mem.db.get_meta("fts_tokenizer") == fts.TOKENIZER_VERSION
        assert not mem.db.scalar(
            "SELECT count(*) FROM duckdb_schemas() WHERE schema_name = ?", [LEGACY_SCHEMA]
        )
        assert bm25_top(mem, "четверг") == [russian]
        assert bm25_top(mem, "database migration")[0] == english


# -- English rankings are unchanged ----------------------------------------------------------
def ascii_chunks() -> tuple[list[str], list[str]]:
    """The sample corpus chunked as the indexer would, in ASCII (its few other characters dropped)."""
    texts: list[str] = []
    headings: list[str] = []
    for file in sorted(SAMPLE_CORPUS.rglob("*")):
        if not file.is_file() or kind_of(file.name) is None:
            continue
        for draft in chunk_file(str(file), file.read_bytes()):
            texts.append(draft.text.encode("ascii", "ignore").decode() or "-")
            headings.append(draft.heading.encode("ascii", "ignore").decode())
    return texts, headings


QUERIES = [
    "ERR_CONSUMER_REBALANCE_TIMEOUT",
    "INC-2307",
    "how did I handle token rotation",
    "kafka consumer lag",
    "duckdb checkpoint vacuum",
    "s3 export 403 forbidden",
    "overnight loader restarts",
    "deep work mornings slack",
    "forecast getting worse",
    "docker compose postgres",
    "python async retry backoff",
    "the of and",  # stopwords only
    "pandas groupby merge",
    "CamelCaseIdentifier snake_case_name 8080",
]


def legacy_scores(mem: Memory, query: str) -> dict[int, float]:
    """BM25F scores as the first tokenizer gave them, from an index built with its options."""
    db = mem.db
    s = LEGACY_SCHEMA
    terms = [
        r[0]
        for r in db.fetchall(
            f"SELECT DISTINCT stem(w, 'porter') FROM (SELECT unnest({s}.tokenize(?)) AS w) "
            f"WHERE w <> '' AND w NOT IN (SELECT sw FROM {s}.stopwords)",
            [query],
        )
    ]
    if not terms:
        return {}
    n, avgdl = db.fetchone(f"SELECT num_docs, avgdl FROM {s}.stats")  # type: ignore[misc]
    rows = db.fetchall(
        f"""
        SELECT d.name, dict.df, d.len,
               sum(CASE WHEN t.fieldid = 0 THEN 1.0 ELSE {fts.HEADING_WEIGHT} END)::DOUBLE AS tf
        FROM {s}.terms t JOIN {s}.docs d USING (docid) JOIN {s}.dict dict USING (termid)
        WHERE dict.term IN (SELECT unnest(?::VARCHAR[]))
        GROUP BY d.name, dict.term, dict.df, d.len
        """,
        [terms],
    )
    scores: dict[int, float] = {}
    for name, df, length, tf in rows:
        idf = math.log((n - df + 0.5) / (df + 0.5) + 1.0)
        norm = (fts.K1 + 1) / (tf + fts.K1 * (1 - fts.B + fts.B * length / avgdl))
        scores[int(name)] = scores.get(int(name), 0.0) + idf * tf * norm
    return scores


@pytest.mark.integration
def test_english_scores_and_rankings_are_identical_to_the_first_tokenizer(fake_mem: Memory) -> None:
    texts, headings = ascii_chunks()
    assert len(texts) >= 300
    fake_mem.remember_many(texts, headings=headings)
    db = fake_mem.db
    fts.rebuild(db)
    db.execute(
        "PRAGMA create_fts_index('chunks', 'id', 'text', 'heading', stemmer = 'porter', "
        f"stopwords = 'english', ignore = '{LEGACY_IGNORE}', overwrite = 1)"
    )
    # The same postings, term for term, and the same corpus statistics ...
    postings = (
        "SELECT d.name, dict.term, t.fieldid, count(*) AS tf, any_value(d.len) AS len FROM {s}.terms t "
        "JOIN {s}.docs d USING (docid) JOIN {s}.dict dict USING (termid) GROUP BY ALL ORDER BY ALL"
    )
    new = db.fetchall(postings.format(s=fts.FTS_SCHEMA))
    assert new == db.fetchall(postings.format(s=LEGACY_SCHEMA))
    assert len(new) > 10_000
    stats = "SELECT num_docs, avgdl FROM {s}.stats"
    assert db.fetchall(stats.format(s=fts.FTS_SCHEMA)) == db.fetchall(stats.format(s=LEGACY_SCHEMA))
    # ... so every query gets the same scores, in the same order.
    compared = 0
    for query in QUERIES:
        ours = fts.search(db, fts.query_terms(db, query), 1000)
        ref = sorted(legacy_scores(fake_mem, query).items(), key=lambda kv: (-kv[1], kv[0]))
        assert [i for i, _ in ours] == [i for i, _ in ref], query
        for (_, a), (_, b) in zip(ours, ref, strict=True):
            assert a == pytest.approx(b, rel=1e-12, abs=1e-12), query
        compared += len(ours)
    assert compared > 300


@pytest.mark.integration
def test_query_terms_made_in_python_equal_the_index_macros_on_every_word_of_the_corpora(
    fake_mem: Memory,
) -> None:
    # ASCII queries are tokenized and stemmed in Python (no SQL round trip); the terms must be
    # exactly those of the index's own tokenize and stem macros. Every word of the bundled
    # sample corpus and of the real-notes fixture, in queries of a few words each.
    root = Path(__file__).parent
    texts = [
        p.read_text(encoding="utf-8", errors="replace")
        for folder in (root.parent / "nbmemory" / "sample_corpus", root / "data" / "til")
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.suffix in {".md", ".py", ".txt", ".ipynb"}
    ]
    words = sorted({w for text in texts for w in text.split()})
    assert len(words) > 20_000 and sum(not w.isascii() for w in words) > 150
    fts.rebuild(fake_mem.db)
    for start in range(0, len(words), 12):
        query = " ".join(words[start : start + 12])
        assert fts.query_terms(fake_mem.db, query) == fts.sql_query_terms(fake_mem.db, query), query
    for odd in ("", "   ", "the and of", "C++ / C#", "INC-2307 v2.3.1", "it's O'Brien's", "__init__"):
        assert fts.query_terms(fake_mem.db, odd) == fts.sql_query_terms(fake_mem.db, odd), odd


#: Text beyond ASCII that query terms are made of in Python (or, for CJK, left to the index).
SCRIPTS = [
    *NOTES.values(),
    "Fine-tune a 🤗 Transformers model on café data ✨ (naïve Bayes, São Paulo, Zürich)",
    "ΟΔΟΣ ΣΟΦΟΣ Σίσυφος: a final sigma, and ΆΈΉ with tonos",
    "Straße STRASSE ẞ ß; İstanbul ıi; ǅemal ǈ ǋ; ﬁle ﬂow ﬀ; Ångström Å",
    "Ирина ёлка ЁЛКА Йошкар-Ола; Київ ґанок; العربية ١٢٣ ٤٥; עברית",
    "हिन्दी भाषा; தமிழ்; ภาษาไทย; ქართული; Հայերեն; አማርኛ",
    "x² ½ µm α-synuclein ℃ ™ ① Ⅻ ⅻ ０１２ ＡＢＣ; é ä ñ; ​zero‍width",
    "한국어 ひらがな カタカナー 中文 with English words",
    "Vietnamese: Tiếng Việt có dấu; Polish: Łódź żółć; Czech: Příliš žluťoučký kůň",
    "emoji only 🚀🔥👩‍💻 and symbols → ← ↔ ≤ ≥ ≠ ∞ § ¶ • … — –",
]


@pytest.mark.integration
def test_query_terms_beyond_ascii_equal_the_index_macros(fake_mem: Memory) -> None:
    # Accents folded by decomposition, lower case character by character (no final sigma), any
    # script's letters and decimal digits kept, symbols and emoji split on; CJK goes to the index.
    fts.rebuild(fake_mem.db)
    for text in SCRIPTS:
        for query in (text, *text.split()):
            assert fts.query_terms(fake_mem.db, query) == fts.sql_query_terms(fake_mem.db, query), query
    assert fts.python_tokens("ΟΔΟΣ Straße café İstanbul") == ["οδοσ", "straße", "cafe", "istanbul"]
    assert fts.query_terms(fake_mem.db, "the café on Straße") == ["cafe", "straße"]
    assert fts.python_tokens("中文 text") is None


@pytest.mark.integration
@settings(
    max_examples=examples(300),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.text(st.characters(exclude_categories=["Cs"]), max_size=40))
def test_query_terms_of_any_text_equal_the_index_macros(fake_mem: Memory, text: str) -> None:
    if not fts.index_exists(fake_mem.db):  # the memory is made once for all examples
        fts.rebuild(fake_mem.db)
    assert fts.query_terms(fake_mem.db, text) == fts.sql_query_terms(fake_mem.db, text), ascii(text)
