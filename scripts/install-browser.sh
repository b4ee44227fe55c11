#!/usr/bin/env bash
# Install what the browser tests (pytest -m browser) need, from this machine's registries only:
#   * Debian's Chromium at /usr/bin/chromium (apt-get, only when it is missing);
#   * Playwright's Python API and JupyterLab (pip, into the active Python environment).
# It never runs `playwright install`: that downloads Playwright's own browser builds, which this
# network refuses. The tests launch /usr/bin/chromium through Playwright's executable_path.
#
# Usage: scripts/install-browser.sh   (as root, or a user with sudo, for the apt-get step)
set -euo pipefail

CHROMIUM=/usr/bin/chromium

if [ ! -x "$CHROMIUM" ]; then
  if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
  elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "install-browser: $CHROMIUM is missing and this user cannot run apt-get (not root, no sudo)" >&2
    exit 1
  fi
  echo "install-browser: installing Debian's chromium with apt-get"
  "${SUDO[@]}" apt-get update
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium
else
  echo "install-browser: $CHROMIUM already installed"
fi

# The Python environment to install into: $SOBA_BROWSER_PYTHON, else the active virtualenv, else
# the repository's .venv (what scripts/test.sh creates), else python3 on PATH. ($PYTHON is left
# alone: scripts/test.sh uses it for the interpreter that creates .venv.)
repo="$(cd "$(dirname "$0")/.." && pwd)"
if [ -n "${SOBA_BROWSER_PYTHON:-}" ]; then
  py="$SOBA_BROWSER_PYTHON"
elif [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
  py="$VIRTUAL_ENV/bin/python"
elif [ -x "$repo/.venv/bin/python" ]; then
  py="$repo/.venv/bin/python"
else
  py=python3
fi

echo "install-browser: pip install playwright jupyterlab into $("$py" -c 'import sys; print(sys.prefix)')"
"$py" -m pip install --quiet playwright jupyterlab

# Check, without downloading anything: the browser starts and the Python side imports.
"$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync --version 2>/dev/null
"$py" - <<'PY'
import importlib.metadata as md

import jupyterlab  # noqa: F401
import playwright.sync_api  # noqa: F401

print("install-browser: playwright", md.version("playwright"), "| jupyterlab", md.version("jupyterlab"))
PY
