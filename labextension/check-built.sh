#!/bin/sh
# Rebuild the extension from source (npm run build:prod) in a temporary copy and compare the
# output with the committed prebuilt one in ../nbmemory/labextension: exit 1 when they differ,
# that is when the committed JavaScript is stale. Needs node_modules (npm ci) and a Python with
# JupyterLab (the build uses its core package; see builder.sh).
set -e
HERE=$(cd "$(dirname "$0")" && pwd)
if [ -z "$PYTHON" ]; then
    PYTHON="$HERE/../.venv/bin/python"
    [ -x "$PYTHON" ] || PYTHON=python3
fi
export PYTHON
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir "$TMP/labextension"
cd "$HERE"
# Everything the build reads, that is all but what it writes and node_modules.
for entry in *; do
    case $entry in
        node_modules | lib | tsconfig.tsbuildinfo) ;;
        *) cp -R "$entry" "$TMP/labextension/" ;;
    esac
done
# A copy, not a link: webpack names bundled modules by their path from the package's folder.
# Hard links where the temporary folder shares the file system, else a plain copy (~7 s).
cp -al node_modules "$TMP/labextension/" 2>/dev/null || cp -R node_modules "$TMP/labextension/"
cd "$TMP/labextension"
npm run --silent build:prod >"$TMP/build.log" 2>&1 || { cat "$TMP/build.log"; exit 1; }
if diff -r "$HERE/../nbmemory/labextension" "$TMP/nbmemory/labextension" >"$TMP/diff.txt"; then
    echo "nbmemory/labextension matches a fresh build of labextension/"
else
    # Minified bundles are one long line: show the start of each line of the difference.
    cut -c 1-300 "$TMP/diff.txt" | head -n 40
    JUPYTERLAB=$("$PYTHON" -c 'import jupyterlab; print(jupyterlab.__version__)')
    echo "nbmemory/labextension is stale (rebuilt against JupyterLab $JUPYTERLAB):" \
        "run \`npm run build:prod\` in labextension/ and commit nbmemory/labextension" >&2
    exit 1
fi
