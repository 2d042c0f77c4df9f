"""Paired bootstrap intervals of the side-by-side's margins (:mod:`nbmemory.eval.margins`)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nbmemory.eval.margins import main, margins, wilson


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


def _run(default: list[float], other: list[float] | None, kinds: list[str] | None = None) -> dict:
    run = {
        "queries": "unused.jsonl",
        "nbmemory": {"configs": {"default": {"per_query": _rows(default, kinds)}}},
    }
    run["peers"] = {"peer": {"per_query": _rows(other, kinds)}} if other is not None else {}
    return run


def _splits(n: int, both: bool = True) -> dict[str, str]:
    return {f"q{i:02d}": ("dev" if both and i % 2 == 0 else "test") for i in range(n)}


def _entry(entries: list[dict], split: str) -> dict:
    return next(e for e in entries if e["split"] == split)


def _peer(entries: list[dict], split: str) -> dict:
    return next(c for c in _entry(entries, split)["compared"] if c["system"] == "peer")


def test_the_same_ranking_has_no_margin_and_never_reaches_the_goal():
    values = [1.0, 0.5, 0.0, 1.0, 0.25, 1.0, 0.333, 0.0]
    row = _peer(margins(_run(values, values), _splits(8), resamples=500), "all")
    assert row["margin"] == 0.0
    assert row["ci95"] == [0.0, 0.0]
    assert row["share_reaching_goal"] == 0.0


def test_the_draws_are_paired_so_a_constant_lead_has_no_spread():
    # Every question: the default is exactly .1 ahead, on scores that vary a lot between questions.
    other = [0.0, 0.9, 0.2, 0.5, 0.1, 0.8, 0.3, 0.6, 0.0, 0.4]
    row = _peer(margins(_run([v + 0.1 for v in other], other), _splits(10), resamples=500), "all")
    assert row["margin"] == pytest.approx(0.1)
    assert row["ci95"] == pytest.approx([0.1, 0.1])
    assert row["share_reaching_goal"] == 1.0


def test_the_interval_is_the_2_5_and_97_5_percentiles_of_the_resampled_mean_differences():
    default = [1.0] * 20
    other = [1.0] * 16 + [0.5] * 4
    entries = margins(_run(default, other), _splits(20, both=False), resamples=2000, seed=3)
    assert [e["split"] for e in entries] == ["test"]  # one split: no "all" repeating it
    row = _peer(entries, "test")
    diff = np.array(default) - np.array(other)
    rng = np.random.default_rng(3)
    means = diff[rng.integers(0, 20, size=(2000, 20))].mean(axis=1)
    assert row["margin"] == pytest.approx(0.1)
    assert row["ci95"] == pytest.approx(np.round(np.percentile(means, [2.5, 97.5]), 3).tolist())
    assert row["ci95"][0] < 0.1 < row["ci95"][1]
    # The share of resampled means at or above the goal, strictly between 0 and 1 here.
    assert row["share_reaching_goal"] == pytest.approx(round(float((means >= 0.03).mean()), 3))
    assert 0.0 < row["share_reaching_goal"] < 1.0
    assert margins(_run(default, other), _splits(20, both=False), resamples=2000, seed=3) == entries


def test_splits_are_kept_apart_and_all_of_them_come_last():
    default = [1.0] * 20
    other = [1.0] * 16 + [0.5] * 4  # q16-q19: two dev, two test
    entries = margins(_run(default, other), _splits(20), resamples=500)
    assert [e["split"] for e in entries] == ["dev", "test", "all"]
    assert _entry(entries, "dev")["answerable"] == 10
    assert _peer(entries, "test")["margin"] == pytest.approx(0.1)


def test_hit_at_1_and_the_flag_rate_count_their_own_questions_with_wilson_intervals():
    kinds = ["question"] * 6 + ["miss"] * 4
    default = [1.0] * 5 + [0.5] + [0.0] * 4
    entry = _entry(margins(_run(default, None, kinds), _splits(10, both=False), resamples=500), "test")
    assert entry["compared"] == []  # only the default: its own figures still come
    assert entry["answerable"] == 6
    assert entry["hit@1"][0] == pytest.approx(5 / 6, abs=1e-3)  # the misses are not counted
    assert entry["hit@1"][1:] == pytest.approx([round(x, 3) for x in wilson(5, 6)])
    assert entry["miss_flag"][0] == 0.5  # q06 and q08 of the four misses are flagged
    assert entry["miss_flag"][3] == 4


def test_wilson_interval_matches_its_textbook_values():
    low, high = wilson(2, 23)
    assert (round(low, 3), round(high, 3)) == (0.024, 0.268)
    low, high = wilson(94, 96)
    assert (round(low, 3), round(high, 3)) == (0.927, 0.994)
    assert wilson(0, 10)[0] == 0.0
    assert wilson(10, 10)[1] == pytest.approx(1.0)
    assert wilson(0, 0) == (0.0, 1.0)  # no question: the whole range (the margins never ask)


def test_bad_runs_are_refused_by_name():
    run = _run([1.0, 1.0, 1.0], [1.0, 1.0, 1.0])
    run["peers"]["peer"]["per_query"].pop()
    with pytest.raises(ValueError, match=r"peer has no result for 1 questions, e\.g\. q02"):
        margins(run, _splits(3), resamples=500)
    with pytest.raises(ValueError, match="no nbmemory default"):
        margins({"nbmemory": {"configs": {}}}, {}, resamples=500)
    with pytest.raises(ValueError, match="resamples"):
        margins(_run([1.0], [1.0]), _splits(1), resamples=10)
    with pytest.raises(ValueError, match=r"not in the queries file, e\.g\. q00"):
        margins(_run([1.0], [1.0]), {}, resamples=500)


def test_the_command_prints_the_table_and_writes_json(tmp_path, capsys):
    queries = tmp_path / "queries.jsonl"
    queries.write_text(
        "".join(
            json.dumps(
                {
                    "qid": f"q{i:02d}",
                    "query": f"question {i}",
                    "kind": "question",
                    "targets": ["a.md"],
                    "split": "dev" if i % 2 == 0 else "test",
                }
            )
            + "\n"
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
    assert [e["split"] for e in report["runs"][str(path)]["splits"]] == ["dev", "test", "all"]
    with pytest.raises(SystemExit):
        main([str(path), "--resamples", "10", "--out", str(out)])
    assert "--resamples must be at least 100" in capsys.readouterr().err
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"queries": str(queries)}), encoding="utf-8")
    with pytest.raises(SystemExit):
        main([str(broken), "--out", str(out)])
    assert "lacks the field 'nbmemory'" in capsys.readouterr().err
