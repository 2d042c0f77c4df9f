"""The prebuilt JupyterLab extension in nbmemory/labextension: only what JupyterLab loads, and
what a fresh build of labextension/ gives."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "labextension"
BUILT = REPO / "nbmemory" / "labextension"


def test_prebuilt_extension_holds_only_what_jupyterlab_loads() -> None:
    files = sorted(path.relative_to(BUILT).as_posix() for path in BUILT.rglob("*") if path.is_file())
    # The builder writes schemas/<name>/package.json.orig on purpose: jupyterlab_server reads the
    # settings' version from it. A development build would add build_log.json and source maps.
    static = (
        r"static/(remoteEntry\.[0-9a-f]{20}|\d+\.[0-9a-f]{20}|style)\.js|static/third-party-licenses\.json"
    )
    expected = rf"package\.json|schemas/nbmemory/(plugin\.json|package\.json\.orig)|{static}"
    assert [name for name in files if not re.fullmatch(expected, name)] == []
    load = json.loads((BUILT / "package.json").read_text(encoding="utf-8"))["jupyterlab"]["_build"]["load"]
    assert (BUILT / load).is_file()
    assert len([name for name in files if name.startswith("static/remoteEntry.")]) == 1


@pytest.mark.skipif(
    not (SOURCE / "node_modules").is_dir(),
    reason="labextension/node_modules is missing: run `npm ci` in labextension/ to check the prebuilt extension",
)
@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not on PATH")
@pytest.mark.integration  # a real build (20 s): in `make test`, not in the fast `make check`
def test_prebuilt_extension_matches_a_fresh_build() -> None:
    env = {**os.environ, "PYTHON": sys.executable}
    result = subprocess.run(
        ["sh", str(SOURCE / "check-built.sh")], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
