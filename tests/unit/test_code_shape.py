"""Small modules and short functions (the house rules of the brief and of issue 10), kept by CI,
and no module reaching into another's private names.

Every module of ``soba_notebook/`` stays at or under :data:`MAX_MODULE_LINES` lines, and every
function (methods and nested functions too) in the subpackages that hold the core decisions,
``compaction/`` and ``agent/``, at or under :data:`MAX_FUNCTION_LINES` lines, counted from its
``def`` to its last line. When a change crosses a limit, split the module or the function into
well-named pieces rather than raising the number.
"""

from __future__ import annotations

import ast
from pathlib import Path

import soba_notebook

PACKAGE = Path(soba_notebook.__file__).parent
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
SHORT_FUNCTION_PACKAGES = ("compaction", "agent")


def _modules(root: Path) -> list[Path]:
    return sorted(root.rglob("*.py"))


def _shown(path: Path) -> str:
    return str(path.relative_to(PACKAGE.parent)) if path.is_relative_to(PACKAGE.parent) else path.name


def long_modules(root: Path, limit: int = MAX_MODULE_LINES) -> list[str]:
    """``path: N lines`` for every module of ``root`` longer than ``limit`` lines."""
    out = []
    for path in _modules(root):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            out.append(f"{_shown(path)}: {lines:,} lines")
    return out


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``path:line name: N lines`` for every function under ``root`` longer than ``limit`` lines."""
    out = []
    for path in _modules(root):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    out.append(f"{_shown(path)}:{node.lineno} {node.name}: {length} lines")
    return out


def private_imports(root: Path) -> list[str]:
    """``path:line name`` for every ``from x import _name``: a module split only to meet the line cap
    shows as one half importing the other's private names (issue 21 item 14)."""
    out = []
    for path in _modules(root):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.ImportFrom):
                out.extend(f"{_shown(path)}:{node.lineno} {a.name}" for a in node.names
                           if a.name.startswith("_") and not a.name.startswith("__"))
    return out


def test_no_module_imports_another_modules_private_names() -> None:
    assert private_imports(PACKAGE) == [], "split along a seam: make the name part of the module's interface"


def test_no_module_in_the_package_passes_600_lines() -> None:
    assert long_modules(PACKAGE) == [], "split these modules along their ideas"


def test_no_function_in_compaction_or_agent_passes_80_lines() -> None:
    offenders = [line for package in SHORT_FUNCTION_PACKAGES for line in long_functions(PACKAGE / package)]
    assert offenders == [], "split these functions into named steps"


def test_the_shape_checks_see_a_long_module_and_a_long_function(tmp_path: Path) -> None:
    """The checks themselves: a 601-line module and an 81-line function are reported, the limits are not."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "at_limit.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    (package / "too_long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    body = "".join(f"    y{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))
    (package / "funcs.py").write_text(f"def fits():\n{body}\n\nasync def too_long():\n{body}    return 1\n")
    assert long_modules(package) == ["too_long.py: 601 lines"]
    assert long_functions(package) == [f"funcs.py:{MAX_FUNCTION_LINES + 3} too_long: 81 lines"]
    (package / "half.py").write_text("from .at_limit import _helper, __version__, public\n")
    assert private_imports(package) == ["half.py:1 _helper"]
