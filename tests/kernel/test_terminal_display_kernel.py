"""detect_frontend in a real Jupyter kernel (an nbclient run) says "widget"; the terminal side is in
``tests/unit/test_terminal_display.py``."""

from __future__ import annotations

import pytest
from unit.test_terminal_display import _env


def test_detect_frontend_in_a_jupyter_kernel_is_widget(monkeypatch: pytest.MonkeyPatch) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell(
        "from soba_notebook.notebook.display import detect_frontend\nprint(detect_frontend())"))
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3", iopub_timeout=120,
                            raise_on_iopub_timeout=True).execute()
    assert nb.cells[0].outputs[0]["text"].strip() == "widget"
