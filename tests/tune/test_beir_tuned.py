"""The ``tuned`` configurations of the BEIR harness, and ``nbmemory eval tune-beir`` on a tiny set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nbmemory.cli import main
from nbmemory.embed import FakeEmbedder
from nbmemory.errors import ConfigError
from nbmemory.eval.harness import evaluate_beir, split_tuned
from tests.eval.conftest import write_tiny_beir

SUBJECTS = ["vitamin D", "statins", "aspirin", "deep sleep", "coffee", "aerobic exercise", "dietary salt"]
OUTCOMES = ["bone density", "muscle pain", "heart attacks", "memory", "liver disease", "depression"]


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NBMEMORY_CACHE", str(tmp_path / "cache"))
    return write_tiny_beir(tmp_path / "tiny")


@pytest.fixture
def small(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """42 documents (more than a top 10, so the two runs can disagree), the tiny set's queries."""
    monkeypatch.setenv("NBMEMORY_CACHE", str(tmp_path / "cache"))
    folder = write_tiny_beir(tmp_path / "small")
    with (folder / "corpus.jsonl").open("a", encoding="utf-8") as fh:
        for i, (subject, outcome) in enumerate((s, o) for s in SUBJECTS for o in OUTCOMES):
            text = (
                f"We followed {200 + 37 * i} adults who took {subject} for two years. "
                f"Those taking {subject} showed changes in {outcome} compared with placebo."
            )
            fh.write(
                json.dumps({"_id": f"s{i}", "title": f"Effect of {subject} on {outcome}", "text": text})
                + "\n"
            )
    return folder


def test_split_tuned() -> None:
    assert split_tuned("default,tuned") == (["default"], ["tuned"])
    assert split_tuned(["tuned", "tuned-vector"]) == ([], ["tuned", "tuned-vector"])
    assert split_tuned(None) == (None, [])


def test_tuned_configs_run_on_a_store_of_the_tuned_model(tiny: Path) -> None:
    base, tuned = FakeEmbedder(dim=32, tag="base"), FakeEmbedder(dim=32, tag="tuned")
    result = evaluate_beir(
        tiny, "default,vector,tuned,tuned-vector", embedder=base, tuned_embedder=tuned, log=None
    )
    assert set(result.runs) == {"default", "vector", "tuned", "tuned-vector"}
    assert result.tuned_fingerprint == "fake:tuned:32" and result.fingerprint == "fake:base:32"
    # Same pipeline, other vectors: the vector rankings differ between the two models.
    assert result.runs["vector"].ranked != result.runs["tuned-vector"].ranked
    assert result.runs["tuned"].config == result.runs["default"].config
    only = evaluate_beir(tiny, "tuned", embedder=base, tuned_embedder=tuned, log=None)
    assert set(only.runs) == {"tuned"}
    assert only.runs["tuned"].ranked == result.runs["tuned"].ranked
    with pytest.raises(ConfigError, match="needs a tuned model"):
        evaluate_beir(tiny, "default,tuned", embedder=base, log=None)


@pytest.mark.model
def test_tune_beir_command_mines_the_corpus_only(
    small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results.json"
    code = main(
        [
            "-q",
            "eval",
            "tune-beir",
            "--data",
            str(small),
            "--sources",
            "title,first_sentence",
            "--batch-size",
            "4",
            "--max-triples",
            "8",
            "--max-seq-length",
            "32",
            "--device",
            "cpu",
            "--torch-threads",
            "1",
            "--output",
            str(tmp_path / "model"),
            "--json",
            str(out),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "| small" in printed and "default" in printed and "gate:" in printed
    payload = json.loads(out.read_text())["results"][0]
    assert {r["pipeline"] for r in payload["rows"]} == {"default", "vector"}
    assert payload["mining"]["queries"] > 0 and payload["training"]["steps"] == 2
    assert set(payload["ndcg@10"]) == {"default", "vector", "tuned", "tuned-vector"}
    # Queries are made from the documents: none is a test query of the dataset.
    assert (tmp_path / "model" / "config.json").exists()


def test_eval_beir_command_takes_a_tuned_model(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["-q", "eval", "beir", "--data", str(tiny), "--configs", "default,tuned", "--model", "fake"]
    assert main([*args, "--tuned-model", "fake"]) == 0
    printed = capsys.readouterr().out
    assert "| tiny | default |" in printed and "| tiny | tuned |" in printed
    assert "tuned configurations: model fake-eval" in printed
    assert main(args) == 1
    assert "needs a tuned model" in capsys.readouterr().err
