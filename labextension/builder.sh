#!/bin/sh
# jupyter-builder (what `jupyter labextension build` and `watch` call since JupyterLab 4.6) against
# the installed JupyterLab's core package, its staging/package.json: without --core-package-file
# it fetches @jupyterlab/core-meta from npm or GitHub, at the 4.5.x that our @jupyterlab/builder
# ^4.5.0 names rather than the installed 4.6. Usage: sh builder.sh build|watch [options] DIR
set -e
# The repository's virtual environment (`make` creates ../.venv) unless PYTHON names another.
if [ -z "$PYTHON" ]; then
    PYTHON="$(dirname "$0")/../.venv/bin/python"
    [ -x "$PYTHON" ] || PYTHON=python3
fi
CORE=$("$PYTHON" -c 'import jupyterlab, pathlib; print(pathlib.Path(jupyterlab.__file__).parent / "staging" / "package.json")')
COMMAND=$1
shift
exec "$PYTHON" -m jupyter_builder.main "$COMMAND" --core-package-file "$CORE" "$@"
