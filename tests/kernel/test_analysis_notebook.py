"""notebooks/analysis.ipynb runs headless in a real kernel and draws real images."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from ci_support import unavailable
from conftest import PI_SESSION, REPO

NOTEBOOK = REPO / "notebooks" / "analysis.ipynb"



@pytest.fixture(autouse=True)
def _kernel_imports_this_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernels inherit this environment: they import this checkout's package, not an installed copy."""
    import os

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))


def _run(notebook: Path, cwd: Path, timeout: int = 600):
    try:
        import nbclient
        import nbformat
    except ImportError as exc:
        unavailable(f"{exc.name} is not installed; pip install -e '.[test]' (the README's test command does)")
    nb = nbformat.read(notebook, as_version=4)
    # a cell's output is awaited as long as the cell (nbclient's default is 4 s after its reply)
    client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3", iopub_timeout=timeout,
                                     raise_on_iopub_timeout=True, resources={"metadata": {"path": str(cwd)}})
    client.execute()
    return nb


def _outputs(nb) -> list[dict]:
    return [out for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])]


def _text(nb) -> str:
    parts = []
    for out in _outputs(nb):
        if out.get("output_type") == "stream":
            parts.append(out["text"])
        elif "text/plain" in out.get("data", {}):
            parts.append(out["data"]["text/plain"])
    return "\n".join(parts)


def _check(nb, min_images: int) -> None:
    errors = [out for out in _outputs(nb) if out.get("output_type") == "error"]
    assert not errors, [f"{e['ename']}: {e['evalue']}" for e in errors]
    images = [out for out in _outputs(nb) if "image/png" in out.get("data", {})]
    assert len(images) >= min_images, f"expected at least {min_images} PNG plots, got {len(images)}"


def test_analysis_notebook_on_the_pi_transcript(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SOBA_TRANSCRIPT", str(PI_SESSION))  # the kernel inherits this environment
    copy = tmp_path / "analysis.ipynb"
    shutil.copy(NOTEBOOK, copy)  # run beside a copy: whatever the kernel writes stays out of the checkout
    nb = _run(copy, tmp_path)
    _check(nb, min_images=3)  # budget, two simulations, estimator histogram
    text = _text(nb)
    assert f"analysing {PI_SESSION}" in text
    assert "65k window, keep 8k" in text and "usable as ground truth" in text
    # another agent's transcript is drawn against the limits of the config simulated beside it
    assert "limits drawn: the simulated config “65k window, keep 20k” (hard 48,808, soft 39,046)" in text


def test_analysis_notebook_without_a_transcript(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A user with only the repository: no transcript, no session yet -> a demo session."""
    monkeypatch.delenv("SOBA_TRANSCRIPT", raising=False)
    copy = tmp_path / "analysis.ipynb"
    shutil.copy(NOTEBOOK, copy)
    nb = _run(copy, tmp_path)
    _check(nb, min_images=2)
    assert "demo session" in _text(nb)
    assert "no SOBA session was found in" in _text(nb)  # the fallback says so


def test_analysis_notebook_next_to_the_quickstart_analyses_the_quickstart_session(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The user's first hour: run the quickstart, then open analysis.ipynb next to it."""
    import os
    import subprocess
    import sys

    monkeypatch.delenv("SOBA_TRANSCRIPT", raising=False)
    env = dict(os.environ, HOME=str(tmp_path / "home"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    (tmp_path / "home").mkdir()
    subprocess.run([sys.executable, str(REPO / "scripts" / "run_notebook.py"),
                    str(REPO / "notebooks" / "quickstart.ipynb"), str(tmp_path / "quickstart.executed.ipynb")],
                   env=env, check=True, capture_output=True)
    (session,) = (tmp_path / "soba-quickstart").glob("*/.soba/sessions/*.jsonl")
    copy = tmp_path / "analysis.ipynb"
    shutil.copy(NOTEBOOK, copy)
    nb = _run(copy, tmp_path)
    _check(nb, min_images=2)
    text = _text(nb)
    assert f"analysing {session}" in text and "demo session" not in text
    assert "recorded with the offline scripted model" in text
    assert "zero by construction" in text  # the estimator section explains itself
    assert "degraded equals compactions by" in text  # the comparison table's caption
