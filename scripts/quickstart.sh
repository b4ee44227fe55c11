#!/usr/bin/env bash
# Installs soba_notebook (with JupyterLab) into .venv, then runs the quickstart.
#
#   scripts/quickstart.sh         run notebooks/quickstart.ipynb end to end, headless; the executed
#                                 copy, with outputs and widget state, lands in build/quickstart.executed.ipynb
#   scripts/quickstart.sh --lab   open the quickstart in JupyterLab instead, to run it yourself
#
# Both run on the offline scripted model unless a provider is configured (see the README).
# The notebooks are opened as working copies in build/lab/, so the tracked ones stay unmodified,
# and analysis.ipynb next to the quickstart finds the session the quickstart recorded.
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=headless
while [ $# -gt 0 ]; do
  case "$1" in
    --lab) MODE=lab ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "quickstart: unknown option $1 (options: --lab)" >&2; exit 2 ;;
  esac
  shift
done

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[notebook]'

case "$MODE" in
  headless)
    .venv/bin/python scripts/run_notebook.py notebooks/quickstart.ipynb build/quickstart.executed.ipynb
    ;;
  lab)
    mkdir -p build/lab
    for nb in quickstart analysis; do
      [ -f "build/lab/$nb.ipynb" ] || cp "notebooks/$nb.ipynb" "build/lab/$nb.ipynb"
    done
    exec .venv/bin/python -m jupyterlab --ServerApp.root_dir="$PWD/build/lab" build/lab/quickstart.ipynb
    ;;
esac
