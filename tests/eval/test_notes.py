"""The notes evaluation indexes a real folder with Memory.index and scores files, not chunks."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from nbmemory.embed import FakeEmbedder
from nbmemory.errors import ConfigError
from nbmemory.eval import cache
from nbmemory.eval.cli import add_eval_parser
from nbmemory.eval.notes import NotesQuery, evaluate_notes, load_queries, score_run
from nbmemory.memory import Memory

# Eight short notes in three folders; git/rebase.md has two sections, so two chunks.
NOTES = {
    "git/rebase.md": (
        "# Rebase onto main\n\n## Interactive rebase\n\n"
        "Use git rebase --interactive to squash fixup commits before merging.\n\n"
        "## Rebase conflicts\n\n"
        "When a rebase stops on a conflict, fix the files, git add them, then git rebase --continue.\n"
    ),
    "git/stash.md": "# Stash changes\n\nSave uncommitted work with git stash push and restore it with git stash pop.\n",
    "git/bisect.md": "# Bisect a regression\n\nFind the commit that broke the build with git bisect good and bad.\n",
    "postgres/vacuum.md": (
        "# Vacuum\n\nRun VACUUM ANALYZE after a bulk delete so the planner statistics are fresh.\n"
    ),
    "postgres/explain.md": "# Explain\n\nEXPLAIN ANALYZE prints the query plan with actual row counts and timings.\n",
    "postgres/jsonb.md": "# JSONB operators\n\nThe ->> operator extracts a jsonb field as text.\n",
    "vim/macros.md": "# Record a macro\n\nPress qa to record a macro into register a, q to stop, @a to replay it.\n",
    "vim/splits.md": "# Window splits\n\nCtrl-w v splits the window vertically; Ctrl-w s splits it horizontally.\n",
}
QUERIES = [
    {
        "qid": "p1",
        "query": "rebase conflict continue",
        "kind": "paraphrase",
        "targets": ["git/rebase.md"],
        "split": "dev",
    },
    {
        "qid": "k1",
        "query": "VACUUM ANALYZE",
        "kind": "keyword",
        "targets": ["postgres/vacuum.md"],
        "split": "dev",
    },
    {
        "qid": "q1",
        "query": "how do I record a macro in vim",
        "kind": "question",
        "targets": ["vim/macros.md"],
        "split": "dev",
    },
    {"qid": "m1", "query": "kubernetes helm chart values", "kind": "miss", "targets": [], "split": "dev"},
    {"qid": "t1", "query": "git stash pop", "kind": "keyword", "targets": ["git/stash.md"], "split": "test"},
]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "notes"
    for rel, text in NOTES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


@pytest.fixture
def queries_file(tmp_path: Path) -> Path:
    path = tmp_path / "queries.jsonl"
    path.write_text("".join(json.dumps(q) + "\n" for q in QUERIES), encoding="utf-8")
    return path


def test_score_run_hand_checked() -> None:
    queries = [
        NotesQuery("a", "first", "paraphrase", ("x.md",)),
        NotesQuery("b", "second", "paraphrase", ("y.md", "z.md")),
        NotesQuery("c", "third", "keyword", ("w.md",)),
        NotesQuery("d", "fourth", "question", ("v.md",)),
        NotesQuery("m", "no answer", "miss"),
        NotesQuery("n", "no answer either", "miss"),
    ]
    ranked = {
        "a": ["x.md", "q.md"],  # rank 1
        "b": ["q.md", "q.md", "r.md", "z.md"],  # the repeated q.md counts once: z.md is rank 3
        "c": [f"o{i}.md" for i in range(10)] + ["w.md"],  # rank 11: outside the top 10
        "d": [],  # returned nothing
        "m": ["x.md"],
    }
    flagged = {"d": True, "m": True}
    run = score_run("sys", queries, ranked, flagged, {q.qid: float(i) for i, q in enumerate(queries)})
    s = run.summary
    assert run.ranked["b"] == ["q.md", "r.md", "z.md"]
    assert s["hit@1"] == pytest.approx(1 / 4)
    assert s["hit@5"] == pytest.approx(2 / 4)
    assert s["hit@10"] == pytest.approx(2 / 4)
    assert s["mrr@10"] == pytest.approx((1 + 1 / 3 + 0 + 0) / 4)
    assert s["paraphrase_hit@1"] == pytest.approx(1 / 2)
    assert s["paraphrase_mrr@10"] == pytest.approx((1 + 1 / 3) / 2)
    assert s["keyword_hit@1"] == 0.0 and s["question_hit@1"] == 0.0
    # One of two miss queries flagged, one left empty; one answerable query flagged and empty.
    assert s["miss_flag"] == 0.5 and s["miss_empty"] == 0.5
    assert s["false_flags"] == 1 and s["false_empty"] == 1
    assert (s["answerable"], s["misses"], s["queries"]) == (4, 2, 6)
    assert s["p50_ms"] == pytest.approx(2.5)
    assert run.per_query["b"]["mrr@10"] == pytest.approx(1 / 3)


def test_score_run_without_misses_or_latency() -> None:
    run = score_run("sys", [NotesQuery("a", "q", "keyword", ("x.md",))], {"a": ["x.md"]})
    assert run.summary["hit@1"] == 1.0
    assert math.isnan(run.summary["miss_flag"]) and math.isnan(run.summary["p50_ms"])
    assert "paraphrase_hit@1" not in run.summary


def test_load_queries_splits_and_checks(corpus: Path, queries_file: Path, tmp_path: Path) -> None:
    assert [q.qid for q in load_queries(queries_file, "dev", corpus)] == ["p1", "k1", "q1", "m1"]
    assert [q.qid for q in load_queries(queries_file, "test")] == ["t1"]
    assert len(load_queries(queries_file, "all")) == 5
    bad = tmp_path / "bad.jsonl"
    for line, message in [
        ({"qid": "x", "query": "q", "kind": "rumour", "targets": []}, "kind 'rumour'"),
        ({"qid": "x", "query": "q", "kind": "keyword", "targets": []}, "needs at least one target"),
        (
            {"qid": "x", "query": "q", "kind": "miss", "targets": ["git/stash.md"]},
            "miss query has no targets",
        ),
        (
            {"qid": "x", "query": "q", "kind": "keyword", "targets": ["git/nope.md"]},
            "'git/nope.md' is not a file",
        ),
        ({"qid": "x", "kind": "keyword"}, "needs qid, query, kind"),
    ]:
        bad.write_text(json.dumps(line) + "\n", encoding="utf-8")
        with pytest.raises(ConfigError, match=message):
            load_queries(bad, "all", corpus)
    with pytest.raises(ConfigError, match="split must be"):
        load_queries(queries_file, "train")


def test_evaluate_notes_through_memory_index(
    corpus: Path, queries_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    indexed: list[tuple[str, ...]] = []
    original = Memory.index

    def spy(self: Memory, *paths: Any, **kwargs: Any) -> Any:
        indexed.append(tuple(str(p) for p in paths))
        return original(self, *paths, **kwargs)

    monkeypatch.setattr(Memory, "index", spy)
    result = evaluate_notes(corpus, queries_file, "bm25,default", embedder=FakeEmbedder(dim=32), log=None)

    assert indexed == [(str(corpus),)]
    assert result.store.documents == 8 and result.store.items == 9  # rebase.md is two chunks
    assert [q.qid for q in result.queries] == ["p1", "k1", "q1", "m1"]
    bm25 = result.runs["bm25"]
    # Both rebase.md chunks match "rebase ... continue"; the file is ranked once, first.
    assert bm25.chunks is not None and bm25.chunks["p1"][:2] == ["git/rebase.md", "git/rebase.md"]
    assert bm25.ranked["p1"][0] == "git/rebase.md"
    assert bm25.ranked["p1"].count("git/rebase.md") == 1
    assert bm25.ranked["k1"][0] == "postgres/vacuum.md"
    assert bm25.ranked["q1"][0] == "vim/macros.md"
    assert bm25.summary["hit@1"] == 1.0 and bm25.summary["mrr@10"] == 1.0
    # No word of the miss query is in the notes: BM25 returns nothing, nothing is flagged
    # (the plain configurations have no rejection stage).
    assert bm25.ranked["m1"] == [] and bm25.empty["m1"]
    assert bm25.summary["miss_empty"] == 1.0 and bm25.summary["miss_flag"] == 0.0
    assert bm25.summary["false_flags"] == 0
    table = result.table()
    assert table["config"].to_list() == ["bm25", "default"]
    assert {
        "hit@1",
        "hit@5",
        "hit@10",
        "mrr@10",
        "keyword_hit@1",
        "miss_flag",
        "false_flags",
        "p50_ms",
    } <= set(table.columns)
    payload = result.to_dict()
    rows = payload["configs"]["bm25"]["per_query"]
    assert [r["qid"] for r in rows] == ["p1", "k1", "q1", "m1"]
    assert rows[0]["files"][0] == "git/rebase.md" and rows[0]["hit@1"] == 1.0
    assert payload["configs"]["default"]["pipeline"]["reject"] is True
    json.dumps(payload)


def test_miss_flags_come_from_search_result_rejected(
    corpus: Path, queries_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = Memory.search

    def flag_some(self: Memory, query: str, *args: Any, **kwargs: Any) -> Any:
        result = original(self, query, *args, **kwargs)
        # A flag with the hits kept, on the miss query and on one answerable query.
        result.rejected = query in ("kubernetes helm chart values", "VACUUM ANALYZE")
        return result

    monkeypatch.setattr(Memory, "search", flag_some)
    result = evaluate_notes(corpus, queries_file, "default", embedder=FakeEmbedder(dim=32), log=None)
    run = result.runs["default"]
    assert run.flagged == {"p1": False, "k1": True, "q1": False, "m1": True}
    assert run.summary["miss_flag"] == 1.0
    assert run.summary["false_flags"] == 1
    # A flagged query keeps its ranking: the keyword query still scores.
    assert run.per_query["k1"]["hit@1"] == 1.0


def test_rerun_reuses_the_cached_store(
    corpus: Path, queries_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pinned: an edit of the ingest code while the suite runs must not look like a cache miss.
    monkeypatch.setattr(cache, "code_version", lambda: "pinned")
    first_embedder = FakeEmbedder(dim=32)
    first = evaluate_notes(corpus, queries_file, "bm25", embedder=first_embedder, log=None)
    assert not first.store.reused and first_embedder.texts_embedded > 0

    again = FakeEmbedder(dim=32)
    second = evaluate_notes(corpus, queries_file, "bm25", embedder=again, log=None)
    assert second.store.reused and second.store.path == first.store.path
    assert again.texts_embedded == 0
    assert second.runs["bm25"].summary["mrr@10"] == first.runs["bm25"].summary["mrr@10"]

    # An edited note re-indexes into a new store (the old one is dropped); only its text is embedded.
    (corpus / "vim" / "splits.md").write_text(
        "# Window splits\n\nCtrl-w o closes the others.\n", encoding="utf-8"
    )
    third = FakeEmbedder(dim=32)
    changed = evaluate_notes(corpus, queries_file, "bm25", embedder=third, log=None)
    assert not changed.store.reused and not first.store.path.exists()
    assert third.texts_embedded == 1


def test_limits_index_the_targets_first(corpus: Path, queries_file: Path) -> None:
    result = evaluate_notes(
        corpus, queries_file, "bm25", embedder=FakeEmbedder(dim=32), limit_queries=2, limit_files=3, log=None
    )
    assert [q.qid for q in result.queries] == ["p1", "k1"]
    assert result.store.documents == 3
    assert result.runs["bm25"].summary["hit@1"] == 1.0


def test_cli_prints_the_table_and_writes_json(
    corpus: Path, queries_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--model")
    parser.add_argument("-q", "--quiet", action="store_true")
    add_eval_parser(parser.add_subparsers(dest="command"))
    out = tmp_path / "out" / "notes.json"
    argv = ["-q", "eval", "notes", "--corpus", str(corpus), "--queries", str(queries_file)]
    argv += ["--configs", "bm25,vector", "--model", "fake", "--split", "test", "--json", str(out)]
    args = parser.parse_args(argv)
    assert args.fn(args) == 0
    printed = capsys.readouterr().out
    assert "| config | hit@1 |" in printed and "| bm25 |" in printed and "| vector |" in printed
    payload = json.loads(out.read_text(encoding="utf-8"))
    assert payload["split"] == "test"
    assert payload["configs"]["bm25"]["summary"]["hit@1"] == 1.0
    assert [r["qid"] for r in payload["configs"]["bm25"]["per_query"]] == ["t1"]
