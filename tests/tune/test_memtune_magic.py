"""``%memtune`` through a real IPython shell: mistakes are UsageErrors, a run shows a widget, a
background run leaves the kernel free and reports how it ended."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from traitlets.config import Config

from nbmemory import Memory
from nbmemory.embed import SentenceTransformerEmbedder
from nbmemory.errors import NbMemoryError
from nbmemory.jobs import TuneJob
from nbmemory.jupyter.magics import MemoryMagics


@pytest.fixture(scope="module")
def shell(tmp_path_factory: pytest.TempPathFactory) -> InteractiveShell:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IPYTHONDIR", str(tmp_path_factory.mktemp("ipython")))
        config = Config()
        config.HistoryManager.hist_file = ":memory:"
        shell = InteractiveShell.instance(config=config)
    shell.run_line_magic("load_ext", "nbmemory")
    return shell


def magics_of(shell: InteractiveShell) -> MemoryMagics:
    return shell.magics_manager.registry["MemoryMagics"]  # type: ignore[no-any-return]


@contextmanager
def attached(shell: InteractiveShell, mem: Memory, progress: str) -> Iterator[MemoryMagics]:
    """The kernel's magics on ``mem`` with ``progress``, back to their defaults afterwards."""
    magics = magics_of(shell)
    magics.memory = mem
    magics.progress = progress
    try:
        yield magics
    finally:
        magics.memory = None
        magics.progress = "auto"


def test_memtune_mistakes_are_usage_errors(
    shell: InteractiveShell, tmp_path: Path, real_embedder: SentenceTransformerEmbedder
) -> None:
    with Memory(tmp_path / "m.duckdb", embedder=real_embedder) as mem:
        mem.remember("Deploys need the VPN on. Staging uses the 10.2 subnet.", heading="Deploy to staging")
        with attached(shell, mem, "none"):
            with pytest.raises(UsageError, match="epochs must be greater than 0"):
                shell.run_line_magic("memtune", "--epochs 0")
            with pytest.raises(UsageError, match="query source"):
                shell.run_line_magic("memtune", "--query-source headings")
            with pytest.raises(UsageError, match="too small to tune"):
                shell.run_line_magic("memtune", "")
            with pytest.raises(UsageError):
                shell.run_line_magic("memtune", "--epochs one")


def test_memtune_runs_with_a_progress_widget(
    shell: InteractiveShell, notes_copy: Path, real_embedder: SentenceTransformerEmbedder
) -> None:
    with Memory(notes_copy, embedder=real_embedder) as mem:
        with attached(shell, mem, "widget"), capture_output() as out:
            report = shell.run_line_magic(
                "memtune",
                "--max-steps 1 --max-triples 32 --min-gain 1 --query-source title,first_sentence",
            )
        assert not report.adopted and report.training.steps == 1
        assert "keep the current model" in out.stdout
        assert any("application/vnd.jupyter.widget-view+json" in o.data for o in out.outputs)
        assert mem.db.get_meta("model_fingerprint") == real_embedder.fingerprint


def test_memtune_in_the_background_leaves_the_kernel_free(
    shell: InteractiveShell, notes_copy: Path, real_embedder: SentenceTransformerEmbedder
) -> None:
    line = "--background --max-steps 2 --max-triples 16 --batch-size 8 --min-gain 1 --query-source title,first_sentence"
    with Memory(notes_copy, embedder=real_embedder) as mem:
        with attached(shell, mem, "widget"):
            with capture_output() as out:
                job = shell.run_line_magic("memtune", line)
            assert isinstance(job, TuneJob)
            assert any("application/vnd.jupyter.widget-view+json" in o.data for o in out.outputs)
            # The kernel is free: searches and writes run while the job tunes.
            for again in (line, line.replace("--background ", "")):
                with pytest.raises(UsageError, match="already going on"):
                    shell.run_line_magic("memtune", again)
            hits = shell.run_line_magic("memsearch", "rotate the github token")
            assert len(hits) > 0
            mem.remember("The tuning run went on while this was written.", heading="background")
            report = job.result(timeout=600)
        assert job.done and job.state == "done"
        assert not report.adopted and report.training.steps == 2
        assert job.status().startswith("finished") and "keep the current model" in job.status()
        assert mem.db.get_meta("model_fingerprint") == real_embedder.fingerprint


def test_a_failed_background_run_says_why(
    shell: InteractiveShell, tmp_path: Path, real_embedder: SentenceTransformerEmbedder
) -> None:
    with Memory(tmp_path / "m.duckdb", embedder=real_embedder) as mem:
        mem.remember("Deploys need the VPN on.", heading="Deploy")
        with attached(shell, mem, "none"):
            job = shell.run_line_magic("memtune", "--background")
            assert job.wait(120)
    assert job.state == "failed" and "too small to tune" in job.status()
    with pytest.raises(NbMemoryError, match="too small to tune"):
        job.result()
