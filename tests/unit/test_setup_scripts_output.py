"""The README's set-up scripts print what matters: setuptools' "Editable installation" box, which
pip >= 25 forwards from the build backend on every editable install, is silenced, and only it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

SCRIPTS = [REPO / "scripts" / "quickstart.sh", REPO / "scripts" / "test.sh"]

# setuptools' own text (setuptools/command/editable_wheel.py, emitted through its warnings class)
EDITABLE_BOX = ("Editable installation.\n!!\n\n        " + "*" * 80 + "\n        Please be careful with folders in "
                "your working directory with the same\n        name as your package as they may take precedence "
                "during imports.\n        " + "*" * 80 + "\n\n!!")


def _quiet_filter(script: str) -> str:
    found = re.search(r'^QUIET_EDITABLE="([^"]+)"$', script, re.MULTILINE)
    assert found, "the script defines QUIET_EDITABLE"
    return found.group(1)


def _warn(filters: str, *messages: str) -> str:
    code = "import warnings\n" + "".join(f"warnings.warn({m!r}, UserWarning)\n" for m in messages)
    done = subprocess.run([sys.executable, "-c", code], env={"PYTHONWARNINGS": filters}, capture_output=True,
                          text=True, timeout=60, check=True)
    return done.stderr


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_editable_install_silences_the_setuptools_box_and_nothing_else(path: Path) -> None:
    script = path.read_text()
    quiet = _quiet_filter(script)
    # the editable install runs with the filter added to (never replacing) the user's own
    assert re.search(r'^PYTHONWARNINGS="\$\{PYTHONWARNINGS:\+\$PYTHONWARNINGS,\}\$QUIET_EDITABLE" '
                     r"\.venv/bin/python -m pip install --quiet -e ", script, re.MULTILINE)
    assert _warn("default", EDITABLE_BOX).count("Editable installation") == 1  # what users saw
    assert _warn(quiet, EDITABLE_BOX) == ""
    other = _warn(quiet, EDITABLE_BOX, "setuptools: a real problem with your pyproject.toml")
    assert "a real problem" in other and "Editable" not in other and "*****" not in other
    assert "Editable" not in _warn(f"default,{quiet}", EDITABLE_BOX)  # after the user's filters, it still wins


def test_local_model_quickstart_installs_only_llama_cpp_python(tmp_path: Path) -> None:
    """``quickstart.sh --local-model`` serves with llama-cpp-python: it never waits for, or starts, a
    llama-server build (run on a copy of the script, with llama-cpp-python and the model present)."""
    quickstart = (REPO / "scripts" / "quickstart.sh").read_text()
    call = re.search(r"^\s*bash scripts/install-local-model\.sh([^#\n]*)", quickstart, re.MULTILINE)
    assert call, "quickstart.sh --local-model runs install-local-model.sh"
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "install-local-model.sh"
    script.write_text((REPO / "scripts" / "install-local-model.sh").read_text())
    (tmp_path / "build" / "models").mkdir(parents=True)
    (tmp_path / "build" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"gguf")
    python = tmp_path / "python"  # a Python on which `import llama_cpp.server` succeeds
    python.write_text("#!/bin/sh\nexit 0\n")
    python.chmod(0o755)
    done = subprocess.run(["bash", str(script), *call.group(1).split(), str(python)], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                          "XDG_CACHE_HOME": str(tmp_path / "cache")}, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "llama-server skipped" in done.stdout and "building llama-server" not in done.stdout
    assert not (tmp_path / "cache").exists() and not (tmp_path / "build" / "bin").exists()
