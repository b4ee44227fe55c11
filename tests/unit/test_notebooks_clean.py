"""Tracked notebooks are stored without outputs or metadata churn (scripts/strip_notebooks.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import strip_notebooks


def test_tracked_notebooks_are_stored_without_outputs_or_metadata_churn() -> None:
    paths = strip_notebooks.tracked_notebooks()
    assert {p.name for p in paths} >= {"quickstart.ipynb", "analysis.ipynb"}
    assert strip_notebooks.unclean(paths) == [], "run: python scripts/strip_notebooks.py"


def test_the_check_catches_a_notebook_saved_with_outputs(tmp_path: Path) -> None:
    source = REPO / "notebooks" / "quickstart.ipynb"
    nb = json.loads(source.read_text())
    code = next(c for c in nb["cells"] if c["cell_type"] == "code")
    code["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["hi\n"]}]
    code["execution_count"] = 3
    nb["metadata"]["language_info"] = {"name": "python", "version": "3.11.2"}
    saved = tmp_path / "quickstart.ipynb"
    saved.write_text(json.dumps(nb, indent=1))
    assert strip_notebooks.unclean([saved]) == [saved]
    saved.write_text(strip_notebooks.dumps(strip_notebooks.canonical(nb)))
    assert strip_notebooks.unclean([saved]) == []
