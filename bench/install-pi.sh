#!/usr/bin/env bash
# Install pi's own coding agent (@mariozechner/pi-coding-agent, a pinned version, from npm) for the
# optional comparison bench/bench_pi.py. The npm registry is contacted here, at install time only;
# the bench itself never downloads anything and skips, saying why, when this has not been run.
#
# It lands in build/pi-bench/ (gitignored). Running it again is a no-op once that version is there.
#
# Usage: bash bench/install-pi.sh            (needs node >= 20 and npm on PATH)
set -euo pipefail

PI_VERSION=0.73.1
PACKAGE=@mariozechner/pi-coding-agent
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX="${SOBA_PI_BENCH_DIR:-$ROOT/build/pi-bench}"
MANIFEST="$PREFIX/node_modules/$PACKAGE/package.json"

for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "install-pi: $tool is not on PATH; install Node.js >= 20 (e.g. apt-get install nodejs npm)" >&2
    exit 1
  fi
done

installed=""
if [ -f "$MANIFEST" ]; then
  installed="$(node -e 'process.stdout.write(require(process.argv[1]).version)' "$MANIFEST")"
fi
if [ "$installed" = "$PI_VERSION" ]; then
  echo "install-pi: $PACKAGE@$PI_VERSION already installed in $PREFIX"
  exit 0
fi

mkdir -p "$PREFIX"
echo "install-pi: installing $PACKAGE@$PI_VERSION into $PREFIX"
npm install --prefix "$PREFIX" --no-audit --no-fund --save-exact "$PACKAGE@$PI_VERSION"
echo "install-pi: done ($(du -sh "$PREFIX/node_modules" | cut -f1) in $PREFIX/node_modules)"
