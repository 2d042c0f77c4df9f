"""Search on real notes (tests/data/til: 882 of one developer's notes) with the bundled model:
a paraphrase and a pasted identifier rank their note first, questions without an answer are
flagged while answerable ones are not, and results come one per file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import nbmemory
from nbmemory import Memory, PipelineConfig
from nbmemory.config import cache_folder
from nbmemory.embed.sentence import SentenceTransformerEmbedder
from nbmemory.eval.cache import CachedEmbedder

NOTES = Path(__file__).resolve().parents[1] / "data" / "til"

FIRST = {
    # paraphrase: none of the note's title words
    "send my prefix keystroke to a multiplexer running inside another one": {
        "tmux/set-up-forwarding-prefix-for-nested-session.md",
        "tmux/tmux-in-your-tmux.md",
    },
    # pasted identifiers
    "init.defaultBranch": {"git/set-default-branch-name-for-new-repos.md"},
    "git push origin +main": {"git/shorthand-to-force-push-a-branch.md"},
    # pasted symbols, which the full-text index drops (`g??` is searched as `g`)
    "g??": {"vim/rotate-everything-by-13-letters.md"},
    "git show :/": {"git/reference-a-commit-via-commit-message-pattern-matching.md"},
    # ordinary question
    "how do I tell git bisect to pass over a commit I can't test": {
        "git/skip-a-bad-commit-when-bisecting.md"
    },
}
ANSWERABLE_ELSEWHERE = [
    "stop version controlling a file but leave it sitting on my disk",
    "how can I find the very first commit of a repository",
    "who changed lines 20 through 40 of this file over the project's history",
    "find the middle value of a numeric column in sql so outliers don't skew things",
    "delete a line in vim without clobbering the text I yanked earlier",
    "pg_terminate_backend",
]
NO_ANSWER = [
    "configure a kubernetes horizontal pod autoscaler based on cpu",
    "set an expiration ttl on a redis key",
    "run several python coroutines concurrently with asyncio gather",
    "how do I lock terraform remote state in s3 with dynamodb",
]
# Without an answer, and with no rare word the memory lacks carrying the query: only the best
# cosine, below this memory's near-miss cosine, and the weak keyword match say so.
NEAR_MISS = [
    "use a multi-stage docker build to shrink my production image size",
    "check consumer group lag for a kafka topic",
    "lay out a page with css grid-template-areas",
]
JUDGED = Path(__file__).resolve().parents[2] / "bench" / "data" / "notes-queries.jsonl"


def remembered(embedder: SentenceTransformerEmbedder) -> CachedEmbedder:
    """The model, with the vectors it made for these notes kept between test runs.

    A first run embeds every chunk and sentence window (about seven minutes on one core); a later
    one only the texts not seen before. The cache is keyed by the model's fingerprint and by the
    code that turns a text into a vector (``nbmemory/embed``): a change to either embeds afresh.
    What these tests check, search on what the real model made of real notes, is the same either
    way; the model's own indexing runs in every other real-model test and in a first run.
    """
    code = hashlib.sha256()
    for file in sorted((Path(nbmemory.__file__).parent / "embed").glob("*.py")):
        code.update(file.read_bytes())
    return CachedEmbedder(embedder, f"tests-til-{code.hexdigest()[:12]}", root=cache_folder("tests"))


@pytest.fixture(scope="module")
def notes_memory(
    tmp_path_factory: pytest.TempPathFactory, real_embedder: SentenceTransformerEmbedder
) -> Memory:
    mem = Memory(tmp_path_factory.mktemp("til") / "m.duckdb", embedder=remembered(real_embedder))
    report = mem.index(NOTES)
    assert report.files_changed == 882 and not report.skipped
    return mem


def _file(source: str | None) -> str:
    assert source is not None
    return Path(source).relative_to(NOTES).as_posix()


@pytest.mark.parametrize("query", list(FIRST))
def test_paraphrase_identifier_and_question_rank_their_note_first(notes_memory: Memory, query: str) -> None:
    result = notes_memory.search(query, k=5, log=False)
    assert _file(result.hits[0].source) in FIRST[query], result.explain(5)


def test_pasted_symbols_need_the_symbol_terms(notes_memory: Memory) -> None:
    # What makes the symbol queries above pass: without symbols neither note comes first.
    words_only = PipelineConfig(symbols=False)
    for query in ("g??", "git show :/"):
        result = notes_memory.search(query, k=5, log=False, config=words_only)
        assert _file(result.hits[0].source) not in FIRST[query], query


def test_no_answer_questions_are_flagged_and_answerable_ones_are_not(notes_memory: Memory) -> None:
    for query in NO_ANSWER:
        result = notes_memory.search(query, k=5, log=False)
        assert result.rejected and result.reason.startswith("no confident match"), query
        assert result.hits, "a flagged search still shows its best guesses"
    for query in [*FIRST, *ANSWERABLE_ELSEWHERE]:
        result = notes_memory.search(query, k=5, log=False)
        assert not result.rejected, (query, result.trace.stage("reject"))


def test_questions_far_from_every_note_are_flagged_against_this_memorys_own_near_miss_cosine(
    notes_memory: Memory,
) -> None:
    # Indexing measured it, so no search pays for it.
    assert notes_memory.db.get_meta(f"near_miss:{notes_memory.embedder.fingerprint}") is not None
    for query in NEAR_MISS:
        result = notes_memory.search(query, k=5, log=False)
        assert result.rejected, (query, result.trace.stage("reject"))
        assert "as close to the question as this memory's notes" in result.reason, result.reason
        stage = result.trace.stage("reject")
        assert stage is not None and "near-miss cosine" in stage.notes["why"]


def test_no_judged_question_with_an_answer_here_is_flagged(notes_memory: Memory) -> None:
    # Every judged question of the notes benchmark whose note is in this memory (dev and test).
    answerable = [
        q["query"]
        for q in map(json.loads, JUDGED.read_text(encoding="utf-8").splitlines())
        if any((NOTES / t).exists() for t in q["targets"])
    ]
    assert len(answerable) >= 50
    flagged = [q for q in answerable if notes_memory.search(q, k=5, log=False).rejected]
    assert flagged == []


def test_results_come_one_per_file_with_the_other_chunks_counted(notes_memory: Memory) -> None:
    query = "list all authors who contributed to a git repository"
    grouped = notes_memory.search(query, k=10, log=False)
    files = [_file(h.source) for h in grouped.hits]
    assert len(files) == len(set(files)) == 10
    flat = notes_memory.search(query, k=60, log=False, config=PipelineConfig(group=False))
    assert len({_file(h.source) for h in flat.hits}) < len(flat.hits)  # several chunks of one file
    by_file: dict[str, list[int]] = {}
    for hit in flat.hits:
        by_file.setdefault(_file(hit.source), []).append(hit.id)
    multi = [h for h in grouped.hits if h.more]
    assert multi, "a note of several chunks is among the results"
    for hit in multi:
        chunks = by_file[_file(hit.source)]
        assert [hit.id, *hit.more] == chunks[: 1 + len(hit.more)]
        assert all(_file(notes_memory.get(i, touch=False).source) == _file(hit.source) for i in hit.more)


def test_each_hits_parts_sum_to_its_score_and_the_chart_follows_the_ranking(notes_memory: Memory) -> None:
    from nbmemory.jupyter.plots import contribution

    judged = [json.loads(line) for line in JUDGED.read_text(encoding="utf-8").splitlines() if line.strip()]
    queries = [q["query"] for q in judged if q["split"] == "dev"][:20]
    assert len(queries) == 20
    seen: set[str] = set()
    for query in queries:
        result = notes_memory.search(query, k=10, log=False)
        parts = result.parts()
        for hit in result.hits:
            assert abs(sum(parts[hit.id].values()) - hit.score) <= 1e-6, (query, hit.id, parts[hit.id])
            seen |= {name for name, value in parts[hit.id].items() if value}
        # The chart draws those parts: each bar ends at its hit's score, so the bars keep rank order.
        drawn = next(iter(contribution(result).to_dict()["datasets"].values()))
        ends: dict[int, float] = {}
        for segment in drawn:
            ends[segment["id"]] = segment["end"]  # an item's last segment ends its bar
        assert list(ends) == result.ids, query
        assert list(ends.values()) == pytest.approx([h.score for h in result.hits], abs=1e-6), query
        assert list(ends.values()) == sorted(ends.values(), reverse=True), query
    # The queries exercise what the old chart left out: passages and the identifier lean.
    assert {"bm25", "cosine", "passage", "identifier"} <= seen, seen


def test_the_int8_screen_ranks_real_notes_as_the_float32_scan(
    notes_memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The screen serves from 20,000 chunks; here it is made to serve these 882 notes' chunks,
    # whose vectors (the model's, of real prose and code) cluster as a user's do.
    from nbmemory.search import hot
    from nbmemory.search import screen as screen_mod

    questions = [json.loads(line)["query"] for line in JUDGED.open()]

    def searched(on: bool) -> list[list[tuple[int, float]]]:
        monkeypatch.setattr(screen_mod, "MIN_ROWS", 0 if on else 10**9)
        hot.reset(notes_memory.db)
        index = hot.ensure(notes_memory.db)
        assert index is not None and (index.screen is not None) == on
        out = []
        for query in questions:
            result = notes_memory.search(query, k=10, log=False)
            vector = result.trace.stage("vector")
            assert vector is not None
            out.append([(h.id, h.score) for h in result.hits] + [(i, vector.scores[i]) for i in vector.output])
        return out

    assert len(questions) >= 150
    assert searched(True) == searched(False)
    hot.reset(notes_memory.db)
