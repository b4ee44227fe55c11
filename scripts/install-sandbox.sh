#!/usr/bin/env bash
# Install what the sandbox tests (tests/unit/test_sandbox.py, tools.sandbox = "bwrap") need, from this
# machine's registries only: Debian's bubblewrap, /usr/bin/bwrap (apt-get, only when bwrap is missing).
# Idempotent: with bwrap on PATH it installs nothing.
#
# Usage: scripts/install-sandbox.sh   (as root, or a user with sudo, for the apt-get step)
set -euo pipefail

if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
  elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "install-sandbox: bwrap is missing and this user cannot run apt-get (not root, no sudo)" >&2
    exit 1
  fi
  echo "install-sandbox: installing Debian's bubblewrap with apt-get"
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
fi

# Check, without touching anything: bwrap starts and can build the sandbox the shell tool uses
# (user namespaces may be switched off for unprivileged users on some systems).
bwrap --ro-bind / / --dev /dev --proc /proc --unshare-net --unshare-pid --cap-drop ALL -- true
echo "install-sandbox: $(bwrap --version) at $(command -v bwrap)"
