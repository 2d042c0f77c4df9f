"""Paired bootstrap intervals of the side-by-side's margins (``bench/margins.py``)."""

from __future__ import annotations

import json

import pytest

from bench.margins import main, margins


def _rows(values: list[float], kinds: list[str] | None = None) -> list[dict]:
    kinds = kinds or ["question"] * len(values)
    return [
        {
            "qid": f"q{i:02d}",
            "kind": kind,
            "mrr@10": v,
            "hit@1": float(v == 1.0),
            "flagged": kind == "miss" and i % 2 == 0,
        }
        for i, (v, kind) in enumerate(zip(values, kinds, strict=True))
    ]


def _run(default: list[float], other: list[float], kinds: list[str] | None = None) -> dict:
    return {
        "queries": "unused.jsonl",
        "nbmemory": {"configs": {"default": {"per_query": _rows(default, kinds)}}},
        "peers": {"peer": {"per_query": _rows(other, kinds)}},
    }


def _splits(n: int) -> dict[str, str]:
    return {f"q{i:02d}": ("dev" if i % 2 == 0 else "test") for i in range(n)}


def _row(rows: list[dict], split: str) -> dict:
    return next(r for r in rows if r["split"] == split and r["system"] == "peer")


def test_the_same_ranking_has_no_margin_and_never_reaches_the_goal():
    values = [1.0, 0.5, 0.0, 1.0, 0.25, 1.0, 0.333, 0.0]
    row = _row(margins(_run(values, values), _splits(8), resamples=500), "all")
    assert row["margin"] == 0.0
    assert row["ci95"] == [0.0, 0.0]
    assert row["p_reaches_goal"] == 0.0


def test_the_draws_are_paired_so_a_constant_lead_has_no_spread():
    # Every question: the default is exactly .1 ahead, on scores that vary a lot between questions.
    other = [0.0, 0.9, 0.2, 0.5, 0.1, 0.8, 0.3, 0.6, 0.0, 0.4]
    row = _row(margins(_run([v + 0.1 for v in other], other), _splits(10), resamples=500), "all")
    assert row["margin"] == pytest.approx(0.1)
    assert row["ci95"] == pytest.approx([0.1, 0.1])
    assert row["p_reaches_goal"] == 1.0


def test_a_lead_on_a_few_questions_gets_an_interval_around_it_and_splits_are_kept_apart():
    default = [1.0] * 20
    other = [1.0] * 16 + [0.5] * 4  # q16-q19: two dev, two test
    rows = margins(_run(default, other), _splits(20), resamples=2000, seed=3)
    whole = _row(rows, "all")
    assert whole["margin"] == pytest.approx(0.1)
    assert whole["ci95"][0] < 0.1 < whole["ci95"][1]
    assert whole["ci95"][0] >= 0.0
    assert _row(rows, "dev")["answerable"] == 10
    assert _row(rows, "test")["margin"] == pytest.approx(0.1)
    assert margins(_run(default, other), _splits(20), resamples=2000, seed=3) == rows


def test_no_answer_questions_are_counted_apart_from_the_margin():
    kinds = ["question"] * 6 + ["miss"] * 4
    values = [1.0] * 6 + [0.0] * 4
    row = _row(margins(_run(values, values, kinds), _splits(10), resamples=500), "all")
    assert row["answerable"] == 6
    assert row["miss_flag"][0] == 0.5  # q06 and q08 of the four misses are flagged
    assert row["miss_flag"][3] == 4


def test_a_system_without_every_answer_is_refused_by_name():
    run = _run([1.0, 1.0, 1.0], [1.0, 1.0, 1.0])
    run["peers"]["peer"]["per_query"].pop()
    with pytest.raises(ValueError, match=r"peer has no result for 1 questions, e\.g\. q02"):
        margins(run, _splits(3), resamples=500)


def test_the_command_prints_the_table_and_writes_json(tmp_path, capsys):
    queries = tmp_path / "queries.jsonl"
    queries.write_text(
        "".join(
            json.dumps({"qid": f"q{i:02d}", "split": "dev" if i % 2 == 0 else "test"}) + "\n"
            for i in range(4)
        ),
        encoding="utf-8",
    )
    run = _run([1.0, 1.0, 0.5, 1.0], [0.5, 1.0, 0.5, 1.0])
    run["queries"] = str(queries)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run), encoding="utf-8")
    out = tmp_path / "margins.json"
    assert main([str(path), "--resamples", "200", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| all | 4 |" in printed and "peer" in printed
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["runs"][str(path)]["rows"][0]["split"] == "dev"
    with pytest.raises(SystemExit):
        main([str(path), "--resamples", "10", "--out", str(out)])
