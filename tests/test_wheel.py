"""The built wheel, installed alone in a fresh venv with its [notebooks] extra, works as a user gets
it: tools/check_wheel.py (build, install, server and lab extensions, browser check, magics, demo,
the built-in notebooks copied by `nbmemory notebooks` and run unedited, and a rebuild of the lab
extension that must match the one shipped). Several minutes: most of it is pip installing the
locked versions from local files, and npm ci."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SHARED_VECTORS

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.integration
@pytest.mark.skipif(
    not Path("/usr/bin/chromium").exists(), reason="/usr/bin/chromium is missing: `make test` installs it"
)
@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not on PATH")
def test_the_wheel_installs_alone_and_works(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tools.check_wheel", "--workdir", str(tmp_path), "--vector-cache", str(SHARED_VECTORS)],
        cwd=REPO, env=os.environ.copy(), capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    out = result.stdout + result.stderr
    print(out)  # the steps' log, shown with -s
    assert result.returncode == 0, out[-8000:]
    for step in ("build", "install", "server", "lab", "browser", "magics", "demo", "notebooks", "rebuild"):
        assert f"ok: {step} (" in out
    assert "nbmemory/labextension matches a fresh build of labextension/" in out
    assert "All matched files use Prettier code style" in out  # the TypeScript's lint ran
    # Both built-in notebooks, copied by `nbmemory notebooks`, ran unedited with every chart drawn.
    assert "memory_diagnostics.ipynb: ran top to bottom" in out
    assert "beir_evaluation.ipynb: ran top to bottom" in out
