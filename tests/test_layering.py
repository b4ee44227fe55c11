"""Imports point downwards: the core never imports notebook or dataframe libraries."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "soba_notebook"
UI_LIBRARIES = {"IPython", "ipywidgets", "anywidget", "pandas", "matplotlib", "traitlets", "ipykernel"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_core_modules_import_no_ui_or_dataframe_library() -> None:
    offenders = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "notebook" or rel.name == "views.py" or rel.parts[0] == "analysis":
            continue
        bad = _imports(path) & UI_LIBRARIES
        if bad:
            offenders[str(rel)] = sorted(bad)
    assert offenders == {}, f"UI-free core imports UI libraries: {offenders}"


def test_importing_the_package_does_not_load_ui_libraries() -> None:
    import subprocess
    import sys

    code = ("import sys, soba_notebook, soba_notebook.session, soba_notebook.budget; "
            "print(sorted(m for m in ('IPython','ipywidgets','anywidget','pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
