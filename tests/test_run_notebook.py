"""scripts/run_notebook.py, the quickstart's headless runner: a real kernel, and a clean terminal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import REPO, repo_python_env

pytestmark = pytest.mark.kernel


def test_headless_run_prints_only_its_own_line_and_no_kernel_transport_warning(tmp_path: Path) -> None:
    source = tmp_path / "tiny.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import os\nprint(6 * 7, os.getcwd())")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, source)
    target = tmp_path / "build" / "tiny.executed.ipynb"

    done = subprocess.run([sys.executable, str(REPO / "scripts" / "run_notebook.py"), str(source), str(target)],
                          env=repo_python_env(), capture_output=True, text=True, timeout=300)

    assert done.returncode == 0, done.stderr
    # ipykernel warns "Kernel is running over TCP without encryption" at every start: the runner keeps
    # the kernel's log to errors, so the terminal shows the runner's own line and nothing else
    assert "TCP" not in done.stderr + done.stdout and "encryption" not in done.stderr
    assert done.stderr == ""
    assert done.stdout == f"executed {source} -> {target} (1 cells)\n"
    (output,) = nbformat.read(target, as_version=4).cells[0].outputs
    assert output["text"] == f"42 {target.parent}\n"  # ran, in the target's folder
