"""docs/SECURITY.md's threat model names, for each line, the test that proves it: every test it names
exists, so a renamed or deleted test cannot leave a claim standing without its proof."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITED = re.compile(r"`((?:unit|kernel|faults|browser|realmodel)/test_\w+\.py)::(test_\w+)`")


def _threat_model() -> str:
    text = (ROOT / "docs" / "SECURITY.md").read_text(encoding="utf-8")
    start = text.index("## Threat model")
    return text[start:text.index("\n## ", start + 1)]


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")}


def test_every_test_the_threat_model_names_exists_in_its_tier() -> None:
    cited = CITED.findall(_threat_model())
    assert len(cited) >= 30, "the threat model names a test for each line"
    missing = [f"{file}::{name}" for file, name in cited
               if not (ROOT / "tests" / file).is_file() or name not in _test_names(ROOT / "tests" / file)]
    assert not missing, "docs/SECURITY.md names tests that do not exist: " + ", ".join(missing)


def test_every_line_of_the_threat_model_says_what_proves_it() -> None:
    rows = [line for line in _threat_model().splitlines()
            if line.startswith("| can") or line.startswith("| cannot")]
    assert rows, "the threat model's tables have rows"
    unproved = [row for row in rows if not CITED.search(row) and "(" not in row.rsplit("|", 2)[-2]]
    assert not unproved, "rows without a test or a stated reason: " + "\n".join(unproved)
