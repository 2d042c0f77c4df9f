"""Check the shipped artefacts as a user installs them. Usage:
python -m tools.check_wheel [--workdir DIR] [--steps build,install,...]

build    python -m build: the sdist, then the wheel built from that sdist
install  a fresh venv (its pip upgraded first, as the Makefile does) holding only that wheel with
         its [notebooks] extra: JupyterLab, a kernel, nbclient, pandas (versions from
         requirements.lock, so pip reads local files instead of resolving afresh), plus Playwright
         for the browser step
server   `jupyter server extension list`: nbmemory enabled and OK
lab      `jupyter labextension list`: nbmemory enabled and OK (the prebuilt extension in the wheel)
browser  jupyterlab.browser_check on Debian's Chromium (tools/browser_check.py)
magics   `%load_ext nbmemory` in IPython registers the %mem* magics
demo     `nbmemory demo` on the bundled model and sample corpus (``--vector-cache DIR``: its
         document vectors read from DIR where there, as NBMEMORY_VECTOR_CACHE; the test suite
         passes the folder its other processes filled with the sample corpus)
notebooks `nbmemory notebooks` copies the built-in notebooks, which run top to bottom unedited
         (tools/run_notebooks.py, nbclient): the diagnostics one on the sample memory the demo
         step made, the BEIR one on a small cut of the BEIR collections of this project's
         machines (tests/notebooks/beir_subset.py; the sample corpus's judged queries without
         them); every chart cell must draw offline; nothing is downloaded
rebuild  `npm ci` (started first, beside the other steps) and a production build of labextension/
         (npm registry); fails when the result differs from the extension the wheel installed,
         that is when the committed one is stale, or when the TypeScript's lint (`npm run
         lint:check`: prettier and eslint) finds an error

Everything runs outside the checkout, with PYTHONPATH unset and Jupyter's and nbmemory's folders
inside the work folder, so nothing from the repository or the user's setup can stand in for what
the wheel installed. Exits 1 at the first failed step.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: The BEIR collections of this project's machines: the notebooks step cuts a small subset of them.
SHARED_BEIR = REPO.parent / "shared" / "datasets" / "beir"
STEPS = ["build", "install", "server", "lab", "browser", "magics", "demo", "notebooks", "rebuild"]
MAGICS = """
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "nbmemory")
names = sorted(n for n in shell.magics_manager.magics["line"] if n.startswith("mem"))
assert {"memsearch", "memindex", "memexplore"} <= set(names), names
import nbmemory
print("loaded", nbmemory.__file__, "magics:", " ".join("%" + n for n in names))
"""


class CheckFailed(Exception):
    pass


def run(cmd: list[str], env: dict[str, str], cwd: Path, timeout: int = 1800) -> str:
    print("$", " ".join(cmd), flush=True)
    result = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    # Without colour codes (jupyter's lists colour "enabled" and "OK"), and without pip's notes on
    # the extra indexes' missing pages.
    out = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout + result.stderr)
    shown = "\n".join(line for line in out.splitlines() if "is neither a file nor a directory" not in line)
    print(shown.rstrip()[-4000:], flush=True)
    if "Browser test complete" in out:
        print("Browser test complete: JupyterLab started with no errors", flush=True)
    if result.returncode != 0:
        raise CheckFailed(f"{cmd[0]} exited with {result.returncode}")
    return out


def expect(pattern: str, text: str, what: str) -> None:
    if not re.search(pattern, text):
        raise CheckFailed(f"{what}: no match for {pattern!r}")


def check(work: Path, steps: list[str], vectors: Path | None = None) -> None:
    venv, dist, src = work / "venv", work / "dist", work / "src"
    bin_ = venv / "bin"
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env.update(
        NBMEMORY_VECTOR_CACHE=str(vectors or ""),
        PATH=f"{bin_}{os.pathsep}{env.get('PATH', '')}",
        PYTHONNOUSERSITE="1",
        HF_HUB_OFFLINE="1",
        NBMEMORY_HOME=str(work / "home"),
        NBMEMORY_CACHE=str(work / "cache"),
        JUPYTER_CONFIG_DIR=str(work / "jupyter" / "config"),
        JUPYTER_DATA_DIR=str(work / "jupyter" / "data"),
        JUPYTER_RUNTIME_DIR=str(work / "jupyter" / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(work / "jupyter" / "lab-settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(work / "jupyter" / "lab-workspaces"),
    )
    # npm ci reads only labextension/: it runs beside the build, the install and the other steps
    # (mostly waiting on files), and the rebuild step waits for it.
    npm = start_npm_ci(src, env, work) if "rebuild" in steps else None
    try:
        for step in steps:
            run_step(step, work, env, venv, dist, src, bin_, npm)
    finally:
        if npm is not None and npm[0].poll() is None:
            npm[0].kill()
            npm[0].wait()


def start_npm_ci(src: Path, env: dict[str, str], work: Path) -> tuple[subprocess.Popen[bytes], float]:
    """``npm ci`` in a copy of labextension/ (its log in ``npm-ci.log``), started now, and when."""
    shutil.rmtree(src, ignore_errors=True)
    skip = shutil.ignore_patterns("node_modules", "lib", "tsconfig.tsbuildinfo")
    shutil.copytree(REPO / "labextension", src / "labextension", ignore=skip)
    cmd = ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"]
    print("$ (started beside the other steps)", " ".join(cmd), flush=True)
    with (work / "npm-ci.log").open("w") as log:  # the child keeps its own copy of the handle
        proc = subprocess.Popen(cmd, env=env, cwd=src / "labextension", stdout=log, stderr=subprocess.STDOUT)
    return proc, time.monotonic()


def run_step(
    step: str,
    work: Path,
    env: dict[str, str],
    venv: Path,
    dist: Path,
    src: Path,
    bin_: Path,
    npm: tuple[subprocess.Popen[bytes], float] | None,
) -> None:
    """One step of :data:`STEPS`; raises :class:`CheckFailed` when it fails."""
    print(f"\n== {step}", flush=True)
    t0 = time.monotonic()
    if step == "build":
        shutil.rmtree(dist, ignore_errors=True)
        run([sys.executable, "-m", "build", "--outdir", str(dist), str(REPO)], env, work)
        print("built:", ", ".join(sorted(p.name for p in dist.iterdir())))
    elif step == "install":
        shutil.rmtree(venv, ignore_errors=True)
        (wheel,) = dist.glob("nbmemory-*.whl")
        run([sys.executable, "-m", "venv", str(venv)], env, work)
        # As the Makefile does: a venv's own pip is Python's bundled one (23.2 on 3.11.7), which
        # took 52 s to resolve this install (it weighs every file on every index page) against
        # 18 s for the current pip.
        run([str(bin_ / "python"), "-m", "pip", "install", "-q", "--upgrade", "pip"], env, work)
        lock = str(REPO / "requirements.lock")
        pip = [str(bin_ / "pip"), "install", "-q", "--no-compile", "-c", lock]
        run([*pip, f"{wheel}[notebooks]", "playwright"], env, work)
    elif step == "server":
        out = run([str(bin_ / "jupyter"), "server", "extension", "list"], env, work)
        expect(r"nbmemory\s+enabled", out, "server extension not enabled")
        expect(r"nbmemory\s+\S+\s+OK", out, "server extension not OK")
    elif step == "lab":
        out = run([str(bin_ / "jupyter"), "labextension", "list"], env, work)
        expect(r"nbmemory\s+v\S+\s+enabled\s+OK", out, "lab extension not enabled and OK")
    elif step == "browser":
        # Root in a container (CI): jupyter_server refuses to run as root unless told.
        root = ["--allow-root"] if os.geteuid() == 0 else []
        browser = [str(bin_ / "python"), str(REPO / "tools" / "browser_check.py"), *root]
        out = run(browser, env, work, timeout=600)
        expect(r"Browser test complete", out, "the browser check did not finish")
    elif step == "magics":
        out = run([str(bin_ / "python"), "-c", MAGICS], env, work)
        expect(rf"loaded {re.escape(str(venv))}/lib/", out, "nbmemory was not imported from the venv")
    elif step == "demo":
        run([str(bin_ / "nbmemory"), "-q", "demo"], env, work)
    elif step == "notebooks":
        copies = work / "notebooks"
        shutil.rmtree(copies, ignore_errors=True)
        copies.mkdir()
        out = run([str(bin_ / "nbmemory"), "notebooks", str(copies)], env, work)
        expect(r"Memory diagnostics: .* copied", out, "the diagnostics notebook was not copied")
        beir = work / "beir"
        shutil.rmtree(beir, ignore_errors=True)
        if SHARED_BEIR.is_dir():
            cut = [sys.executable, "-m", "tests.notebooks.beir_subset", str(SHARED_BEIR), str(beir)]
            run(cut, {**env, "PYTHONPATH": str(REPO)}, REPO)
        settings = {"NBMEMORY_BEIR_DIR": str(beir), "NBMEMORY_BEIR_FETCH": "0", "NBMEMORY_IDLE_SECONDS": "0"}
        runner = [str(bin_ / "python"), str(REPO / "tools" / "run_notebooks.py"), str(copies)]
        out = run(runner, {**env, **settings}, work)
        expect(r"memory_diagnostics.ipynb: ran top to bottom", out, "the diagnostics notebook did not run")
        expect(r"beir_evaluation.ipynb: ran top to bottom", out, "the BEIR notebook did not run")
    elif step == "rebuild":
        assert npm is not None  # started by check() whenever this step is asked for
        code = npm[0].wait(timeout=1800)
        print((work / "npm-ci.log").read_text(errors="replace").rstrip()[-4000:], flush=True)
        print(f"npm ci: exit {code}, {time.monotonic() - npm[1]:.0f} s since it started", flush=True)
        if code != 0:
            raise CheckFailed(f"npm ci exited with {code}")
        # check-built.sh compares with ../nbmemory/labextension: here, what the wheel installed.
        shutil.rmtree(src / "nbmemory", ignore_errors=True)
        shutil.copytree(
            venv / "share" / "jupyter" / "labextensions" / "nbmemory", src / "nbmemory" / "labextension"
        )
        run(["sh", "check-built.sh"], {**env, "PYTHON": str(bin_ / "python")}, src / "labextension")
        # The TypeScript's lint (prettier and eslint, check only), with the node_modules just made.
        run(["npm", "run", "--silent", "lint:check"], env, src / "labextension")
    print(f"ok: {step} ({time.monotonic() - t0:.0f} s)", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.check_wheel", description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", help="work folder, kept afterwards (default: a temporary one)")
    parser.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated, of {','.join(STEPS)}")
    parser.add_argument("--vector-cache", type=Path, help="document vectors read from this folder, where there")
    args = parser.parse_args(argv)
    steps = args.steps.split(",")
    if unknown := [s for s in steps if s not in STEPS]:
        parser.error(f"unknown steps {unknown}: choose from {STEPS}")
    with tempfile.TemporaryDirectory(prefix="nbmemory-wheel-") as tmp:
        work = Path(args.workdir).resolve() if args.workdir else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        try:
            check(work, steps, args.vector_cache)
        except (CheckFailed, subprocess.TimeoutExpired) as error:
            print(f"FAILED: {error}", flush=True)
            return 1
    print("\nthe wheel installs alone and passes: " + ", ".join(steps))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
