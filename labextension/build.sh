#!/bin/sh
# Build the prebuilt extension into ../nbmemory/labextension (committed: the wheel ships it).
# Calls @jupyterlab/builder directly with the installed JupyterLab's core packages:
# `jupyter labextension build` in JupyterLab 4.6 delegates to jupyter_builder, which fetches
# @jupyterlab/core-meta from the network.
set -e
cd "$(dirname "$0")"
PYTHON="${PYTHON:-../.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
CORE=$("$PYTHON" -c 'import jupyterlab, os; print(os.path.join(os.path.dirname(jupyterlab.__file__), "staging"))')
[ -d node_modules ] || npm ci --no-audit --no-fund
npx tsc
node node_modules/@jupyterlab/builder/lib/build-labextension.js --core-path "$CORE" .
