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
