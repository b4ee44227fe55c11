"""Imports point downwards: the floor list of docs/ARCHITECTURE.md, enforced on the package's source.

The list is read from the document itself, so the picture and the code cannot drift apart: every
import of every module (absolute, relative, inside a function or under ``TYPE_CHECKING``) is
computed from the AST and must land on the module's own floor or on a floor its line names.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "soba_notebook"
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
UI_LIBRARIES = {"IPython", "ipywidgets", "anywidget", "pandas", "matplotlib", "traitlets", "ipykernel"}
UI_FLOORS = {"analysis", "notebook"}

_FLOOR_LINE = re.compile(r"^(\d+)\. \*\*(\w+)\*\* \((.+?)\) — .+ \*May import:\* (.+)\.$")


@dataclass(frozen=True)
class Floor:
    number: int
    name: str
    units: frozenset[str]  # top-level modules ("tokens") and subpackages ("session") of soba_notebook
    may_import: tuple[str, ...]  # names of other floors


def read_floors(text: str) -> list[Floor]:
    """The numbered floor lines of the document's "Floors" section, bottom first."""
    floors = []
    for line in text.splitlines():
        m = _FLOOR_LINE.match(line)
        if m is None:
            continue
        units = frozenset(u.removesuffix(".py").rstrip("/") for u in re.findall(r"`([^`]+)`", m[3]))
        may = () if m[4] == "nothing" else tuple(n.strip() for n in m[4].split(","))
        floors.append(Floor(int(m[1]), m[2], units, may))
    return floors


FLOORS = read_floors(ARCHITECTURE.read_text())
FLOOR_OF = {unit: floor for floor in FLOORS for unit in floor.units}


def allowed_imports() -> dict[str, frozenset[str]]:
    """Unit -> every unit it may import: its own floor's and those of the floors its line names."""
    by_name = {f.name: f for f in FLOORS}
    return {unit: frozenset().union(floor.units, *(by_name[n].units for n in floor.may_import))
            for floor in FLOORS for unit in floor.units}


def unit_of(module: str) -> str:
    """``soba_notebook.session.store`` -> ``session``; the package itself is ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path, package: Path = PACKAGE) -> str:
    rel = path.relative_to(package.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imported_modules(path: Path, package_dir: Path = PACKAGE) -> list[tuple[str, int]]:
    """Every ``soba_notebook`` module ``path`` imports, with the line: relative imports resolved."""
    name = module_name(path, package_dir)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target == "soba_notebook":  # ``from soba_notebook import views``: the names are modules
                out.extend((f"soba_notebook.{alias.name}", node.lineno) for alias in node.names)
            else:
                out.append((target, node.lineno))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in (
                "import_module", "find_spec") and node.args and isinstance(node.args[0], ast.Constant):
            out.append((str(node.args[0].value), node.lineno))
    return [(m, line) for m, line in out if m == "soba_notebook" or m.startswith("soba_notebook.")]


def wrong_arrows(package: Path = PACKAGE) -> list[str]:
    allowed = allowed_imports()
    bad = []
    for path in sorted(package.rglob("*.py")):
        source = unit_of(module_name(path, package))
        for target, line in imported_modules(path, package):
            unit = unit_of(target)
            if unit != source and unit not in allowed.get(source, ()):
                bad.append(f"{path.relative_to(package.parent)}:{line}: {source} ({FLOOR_OF[source].name}) "
                           f"imports {target} ({FLOOR_OF[unit].name if unit in FLOOR_OF else 'on no floor'})")
    return bad


# -- the list itself ---------------------------------------------------------------------------------
def test_the_floor_list_is_numbered_bottom_to_top_and_each_floor_imports_only_floors_below_it() -> None:
    assert [f.number for f in FLOORS] == list(range(1, len(FLOORS) + 1)) and len(FLOORS) >= 9
    position = {f.name: f.number for f in FLOORS}
    for floor in FLOORS:
        for name in floor.may_import:
            assert name in position, f"floor {floor.name} names {name!r}, which is no floor"
            assert position[name] < floor.number, f"floor {floor.name} may import {name}, which is not below it"
    assert FLOORS[0].may_import == (), "the bottom floor imports nothing of the package"


def test_every_module_of_the_package_is_on_exactly_one_floor() -> None:
    listed = [u for f in FLOORS for u in f.units]
    assert len(listed) == len(set(listed)), "a unit is on two floors"
    units = {unit_of(module_name(p)) for p in PACKAGE.rglob("*.py")}
    assert units - set(listed) == set(), "modules on no floor of docs/ARCHITECTURE.md"


# -- the code against it -----------------------------------------------------------------------------
def test_every_import_in_the_package_points_to_its_own_floor_or_a_floor_its_line_names() -> None:
    assert wrong_arrows() == []


def test_a_wrong_arrow_is_caught_whether_absolute_relative_or_inside_a_function(tmp_path: Path) -> None:
    """The checker itself: an upward import in each form is reported (a copy of the package, edited)."""
    import shutil

    copy = tmp_path / "soba_notebook"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.txt", "static"))
    (copy / "tokens.py").write_text((copy / "tokens.py").read_text() + "\nfrom .compaction import capsule\n")
    (copy / "session" / "entries.py").write_text(
        (copy / "session" / "entries.py").read_text() + "\ndef f():\n    from ..budget import hard_limit\n")
    (copy / "errors.py").write_text((copy / "errors.py").read_text() + "\nimport soba_notebook.config\n")
    (copy / "compaction" / "extra.py").write_text("from soba_notebook import agent\n")
    bad = wrong_arrows(copy)
    assert len(bad) == 4, bad
    assert any(b.startswith("soba_notebook/tokens.py:") and b.endswith(
        "tokens (accounting) imports soba_notebook.compaction (compaction)") for b in bad)
    assert any(b.startswith("soba_notebook/session/entries.py:") and b.endswith(
        "session (session) imports soba_notebook.budget (accounting)") for b in bad)
    assert any(b.startswith("soba_notebook/errors.py:") and b.endswith(
        "errors (base) imports soba_notebook.config (accounting)") for b in bad)
    assert "soba_notebook/compaction/extra.py:1: compaction (compaction) imports soba_notebook.agent (agent)" in bad


# -- third-party libraries ---------------------------------------------------------------------------
def _top_level_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_core_modules_import_no_ui_or_dataframe_library() -> None:
    offenders = {}
    for path in PACKAGE.rglob("*.py"):
        unit = unit_of(module_name(path))
        if FLOOR_OF[unit].name in UI_FLOORS:
            continue
        bad = _top_level_imports(path) & UI_LIBRARIES
        if bad:
            offenders[str(path.relative_to(PACKAGE))] = sorted(bad)
    assert offenders == {}, f"UI-free core imports UI libraries: {offenders}"


def test_importing_the_package_does_not_load_ui_libraries() -> None:
    import subprocess
    import sys

    from conftest import repo_python_env

    code = ("import sys, soba_notebook, soba_notebook.session, soba_notebook.budget; "
            "print(sorted(m for m in ('IPython','ipywidgets','anywidget','pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=repo_python_env()).stdout
    assert out.strip() == "[]"
