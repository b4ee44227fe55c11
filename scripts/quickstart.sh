#!/usr/bin/env bash
# Installs soba_notebook into .venv and runs the main job: the quickstart notebook executed end to
# end, headless, on the offline scripted model (or on a provider configured in the environment).
# The executed copy, with outputs and widget state, lands in build/quickstart.executed.ipynb.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[notebook]'
.venv/bin/python scripts/run_notebook.py notebooks/quickstart.ipynb build/quickstart.executed.ipynb
