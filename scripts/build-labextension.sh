#!/usr/bin/env bash
# Rebuilds the prebuilt JupyterLab extension soba_notebook/labextension/ (shipped in the wheel and
# committed) from its sources in labextension/ (src/index.js, style/index.css, package.json,
# package-lock.json), then records the sources' hash in soba_notebook/labextension/SOURCES.sha256;
# tests/unit/test_labextension.py fails when the committed build is older than its sources.
#
# Needs node >= 18 and npm, JupyterLab in the Python (for its core package versions), and the npm registry once (npm ci: @jupyterlab/builder only, about
# 190 packages, 64 MB in labextension/node_modules, under a minute). Nothing is downloaded when
# JupyterLab runs: it loads the committed build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
(cd labextension && npm ci --no-audit --no-fund --loglevel=error)
rm -rf soba_notebook/labextension
# the builder itself, on the installed JupyterLab's core (its shared package versions); JupyterLab
# 4.6's `jupyter labextension build` would fetch @jupyterlab/core-meta from the network instead
CORE=$("$PY" -c 'import jupyterlab, pathlib; print(pathlib.Path(jupyterlab.__file__).parent / "staging")')
(cd labextension && node node_modules/@jupyterlab/builder/lib/build-labextension.js --core-path "$CORE" . >/dev/null)
"$PY" - <<'PYEOF'
from pathlib import Path
import sys
sys.path.insert(0, ".")
from soba_notebook.notebook.labextension import SOURCES_HASH_FILE, sources_hash
Path(SOURCES_HASH_FILE).write_text(sources_hash() + "\n")
print("labextension: built soba_notebook/labextension/ from labextension/ (sources", sources_hash()[:12] + ")")
PYEOF
