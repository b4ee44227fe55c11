#!/usr/bin/env bash
# Debian's Chromium for the real-browser widget test (Playwright's own browser download does not
# work on these machines). A no-op when it is already there.
set -euo pipefail
if [ ! -x /usr/bin/chromium ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
