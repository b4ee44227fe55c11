#!/usr/bin/env bash
# Makes the prebuilt JupyterLab extension of this checkout (soba_notebook/labextension/, the live
# notebook channel) visible to the JupyterLab in .venv: a link at
# .venv/share/jupyter/labextensions/soba-notebook. A wheel install puts the files there itself;
# the editable install of the README's scripts does not, so quickstart.sh and test.sh call this.
# Idempotent and quiet; no node, no network.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=$(.venv/bin/python -c 'import sys; print(sys.prefix)')
mkdir -p "$PREFIX/share/jupyter/labextensions"
LINK="$PREFIX/share/jupyter/labextensions/soba-notebook"
if [ "$(readlink "$LINK" 2>/dev/null || true)" != "$PWD/soba_notebook/labextension" ]; then
  rm -rf "$LINK"
  ln -s "$PWD/soba_notebook/labextension" "$LINK"
fi
