"""The command line on a real file: ``nbmemory.cli.main`` run in this process, as the console
script runs it. Real processes (exit codes, the warm owner, kills) are tested in
``test_warm_owner.py``."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from nbmemory.cli import build_parser, main

REPO = Path(__file__).resolve().parents[1]
Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    """``nbmemory -q ARGS`` with ``home`` as ``NBMEMORY_HOME``: its exit status and output.

    With no background owner (``NBMEMORY_IDLE_SECONDS=0``) each run opens the memory itself, as
    a run does when nothing serves the file.
    """
    monkeypatch.setenv("NBMEMORY_IDLE_SECONDS", "0")

    def nbmemory(*args: str, home: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        argv = ["-q", *args]
        with monkeypatch.context() as mp:
            mp.setenv("NBMEMORY_HOME", str(home))
            mp.setattr(sys, "stdin", io.StringIO(stdin or ""))
            capsys.readouterr()
            code = main(argv)
            out, err = capsys.readouterr()
        return subprocess.CompletedProcess(argv, code, out, err)

    return nbmemory


def subcommands() -> dict[str, object]:
    parser = build_parser()
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return dict(action.choices)  # type: ignore[attr-defined]


def test_every_command_has_help_and_is_in_the_guide() -> None:
    guide = (REPO / "docs" / "guide" / "cli.md").read_text(encoding="utf-8")
    for name, sub in subcommands().items():
        assert sub.description, f"{name} has no help text"  # type: ignore[attr-defined]
        for action in sub._actions:  # type: ignore[attr-defined]
            if action.option_strings and action.dest != "help":
                assert action.help, f"{name} {action.option_strings} has no help"
        assert f"nbmemory {name}" in guide, f"docs/guide/cli.md does not document `nbmemory {name}`"


def test_every_help_page_renders(capsys: pytest.CaptureFixture[str]) -> None:
    # argparse %-formats help strings: a stray "%" breaks `--help` of the whole command.
    def pages(parser: object, path: list[str]) -> list[list[str]]:
        found = [path]
        for action in parser._actions:  # type: ignore[attr-defined]
            if action.__class__.__name__ == "_SubParsersAction":
                for name, sub in action.choices.items():
                    found += pages(sub, [*path, name])
        return found

    from nbmemory.cli import main

    every = pages(build_parser(), [])
    assert ["eval", "scenario"] in every
    for path in every:
        with pytest.raises(SystemExit) as done:
            main([*path, "--help"])
        assert done.value.code == 0, path
        assert "usage:" in capsys.readouterr().out


@pytest.mark.model
@pytest.mark.usefixtures("shared_default_model")
def test_cli_round_trip(tmp_path: Path, run: Run) -> None:
    home = tmp_path / "home"
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "deploy.md").write_text("# Deploy\n\n## Staging\n\nDeploys need the VPN on.\n")
    (notes / "bad.ipynb").write_text("{not json")
    out = run("index", str(notes), home=home)
    assert out.returncode == 0, out.stderr
    assert "bad.ipynb" in out.stderr and "1 skipped" in out.stdout

    out = run("remember", "Staging uses the 10.2 subnet", "--tag", "ops", "--importance", "0.8", home=home)
    assert out.returncode == 0 and "remembered #" in out.stdout
    item_id = int(out.stdout.split("#")[1].split()[0])

    out = run("search", "staging subnet", "-k", "3", "--json", home=home)
    payload = json.loads(out.stdout)
    top = payload["hits"][0]
    assert top["id"] == item_id and top["tags"] == ["ops"]
    assert {"id", "score", "source", "heading", "cell_id", "text", "ranks"} <= set(top)
    assert set(top["ranks"]) == {"bm25", "vector"}

    out = run("search", "vpn deploys", "--explain", home=home)
    assert "[bm25]" in out.stdout and "[vector]" in out.stdout and "[convex]" in out.stdout

    out = run("forget", str(item_id), home=home)
    assert out.returncode == 0 and f"undo: nbmemory forget --undo {item_id}" in out.stdout
    out = run("search", "staging subnet", "--json", home=home)
    assert item_id not in [h["id"] for h in json.loads(out.stdout)["hits"]]
    assert run("forget", "--undo", str(item_id), home=home).stdout == f"restored 1 item(s): {item_id}\n"
    out = run("search", "staging subnet", "--json", home=home)
    assert item_id == json.loads(out.stdout)["hits"][0]["id"]
    assert run("forget", str(item_id), home=home).returncode == 0

    out = run("stats", "--json", home=home)
    stats = json.loads(out.stdout)
    assert stats["items"] >= 1 and stats["forgotten"] == 1
    out = run("doctor", home=home)
    assert out.returncode == 0, out.stdout + out.stderr
    assert run("export", str(tmp_path / "x.parquet"), home=home).returncode == 0
    assert (tmp_path / "x.parquet").exists()


def test_cli_errors_are_one_line_messages(tmp_path: Path, run: Run) -> None:
    out = run("forget", home=tmp_path / "h")
    assert out.returncode == 1
    assert out.stderr.startswith("error: forget needs") and "Traceback" not in out.stderr
    out = run("get", "12345", home=tmp_path / "h")
    assert out.returncode == 1 and "no item with id 12345" in out.stderr


def test_cli_remembers_searches_and_shows_conversation_turns(
    tmp_path: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nbmemory.embed import FakeEmbedder

    cli = sys.modules["nbmemory.cli.main"]
    real = cli._memory  # type: ignore[attr-defined]
    monkeypatch.setattr(cli, "_memory", lambda args, **kw: real(args, embedder=FakeEmbedder(dim=32), **kw))
    home = tmp_path / "home"
    turn = ["--at", "2023-05-08T13:56", "--speaker", "Caroline", "--conversation", "session_1"]
    out = run("remember", "I went to a support group yesterday", *turn, home=home)
    assert out.returncode == 0, out.stderr
    assert "(Caroline · 2023-05-08 13:56)" in out.stdout
    first = int(out.stdout.split("#")[1].split()[0])
    turn = ["--at", "2023-06-01T09:00:00+02:00", "--speaker", "Melanie", "--conversation", "session_2"]
    second = int(run("remember", "The support group sounds good", *turn, home=home).stdout.split("#")[1].split()[0])

    def hits(*args: str) -> list[dict[str, object]]:
        out = run("search", "support group", "--json", *args, home=home)
        assert out.returncode == 0, out.stderr
        return list(json.loads(out.stdout)["hits"])

    [hit] = hits("--speaker", "Caroline")
    assert (hit["id"], hit["event_at"], hit["speaker"], hit["conversation"]) == (
        first,
        "2023-05-08T13:56:00",
        "Caroline",
        "session_1",
    )
    [hit] = hits("--conversation", "session_2")
    assert (hit["id"], hit["event_at"], hit["speaker"]) == (second, "2023-06-01T07:00:00", "Melanie")
    assert [h["id"] for h in hits("--since", "2023-05-01", "--until", "2023-05-31")] == [first]
    assert hits("--speaker", "caroline") == []
    shown = run("search", "support group", "--speaker", "Caroline", home=home).stdout
    assert "     Caroline · 2023-05-08 13:56\n" in shown

    got = json.loads(run("get", str(first), "--json", home=home).stdout)
    assert (got["event_at"], got["speaker"], got["conversation"]) == ("2023-05-08T13:56:00", "Caroline", "session_1")
    assert "Caroline · 2023-05-08 13:56 · conversation session_1" in run("get", str(first), home=home).stdout

    assert run("update", str(first), "--speaker", "", "--conversation", "session_3", home=home).returncode == 0
    got = json.loads(run("get", str(first), "--json", home=home).stdout)
    assert (got["speaker"], got["conversation"], got["event_at"]) == (None, "session_3", "2023-05-08T13:56:00")

    out = run("remember", "what happened", "--at", "yesterday-ish", home=home)
    assert out.returncode == 1 and "at 'yesterday-ish' is not an ISO 8601 time" in out.stderr


def test_cli_forgets_by_kind_and_time_after_a_preview(
    tmp_path: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nbmemory.embed import FakeEmbedder

    cli = sys.modules["nbmemory.cli.main"]
    real = cli._memory  # type: ignore[attr-defined]
    monkeypatch.setattr(cli, "_memory", lambda args, **kw: real(args, embedder=FakeEmbedder(dim=32), **kw))
    home = tmp_path / "home"

    def remember(text: str, at: str) -> int:
        out = run("remember", text, "--at", at, home=home)
        assert out.returncode == 0, out.stderr
        return int(out.stdout.split("#")[1].split()[0])

    january = remember("the January deploy checklist", "2026-01-05T10:00")
    march = remember("the March deploy checklist", "2026-03-02T10:00")

    def found() -> set[int]:
        out = run("search", "deploy checklist", "--json", home=home)
        return {int(h["id"]) for h in json.loads(out.stdout)["hits"]}

    preview = run("forget", "--since", "2026-02-01", home=home)
    assert preview.returncode == 0, preview.stderr
    assert "would forget 1 item(s)" in preview.stdout and f"#{march} " in preview.stdout
    assert found() == {january, march}

    done = run("forget", "--since", "2026-02-01", "--yes", home=home)
    assert done.returncode == 0 and f"forgot 1 item(s): {march}" in done.stdout
    assert found() == {january}
    # --kind narrows like a filter: no item is of kind execution.
    assert "forgot 0 item(s)" in run("forget", "--kind", "execution", "--yes", home=home).stdout
    assert found() == {january}
    both = run("forget", "--kind", "memory", "--until", "2026-01-31", "--yes", home=home)
    assert f"forgot 1 item(s): {january}" in both.stdout
    assert found() == set()

    refused = run("forget", "1", "--since", "2026-02-01", home=home)
    assert refused.returncode == 1 and "exactly one" in refused.stderr
