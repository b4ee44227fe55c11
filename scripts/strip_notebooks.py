"""Keep tracked notebooks free of outputs and metadata churn (an nbstripout-style check).

``python scripts/strip_notebooks.py`` rewrites every tracked notebook (``notebooks/*.ipynb``,
``tests/data/*.ipynb``) into its canonical stored form: no outputs, no execution counts, cell
metadata reduced to ``tags``, notebook metadata reduced to the kernelspec and the language name,
every cell with a stable id. ``--check`` changes nothing and exits 1 naming each file that is not
in that form; the test suite runs the same check (tests/unit/test_notebooks_clean.py), so a notebook
saved from JupyterLab with its outputs cannot be committed unnoticed.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TRACKED = ("notebooks/*.ipynb", "tests/data/*.ipynb")
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}


def tracked_notebooks(repo: Path = REPO) -> list[Path]:
    return sorted(p for pattern in TRACKED for p in repo.glob(pattern))


def _cell_id(cell: dict[str, Any], index: int, taken: set[str]) -> str:
    if isinstance(cell.get("id"), str) and cell["id"] and cell["id"] not in taken:
        return cell["id"]
    digest = hashlib.sha256(f"{index}:{''.join(cell.get('source', []))}".encode()).hexdigest()[:8]
    return digest if digest not in taken else f"{digest}-{index}"


def canonical(nb: dict[str, Any]) -> dict[str, Any]:
    """The stored form of notebook ``nb`` (a pure function of it)."""
    cells, taken = [], set()
    for index, cell in enumerate(nb.get("cells", [])):
        source = cell.get("source", [])
        if isinstance(source, str):
            source = source.splitlines(keepends=True)
        tags = (cell.get("metadata") or {}).get("tags")
        out: dict[str, Any] = {"cell_type": cell["cell_type"], "id": _cell_id(cell, index, taken)}
        taken.add(out["id"])
        if cell["cell_type"] == "code":
            out.update(execution_count=None, metadata={"tags": tags} if tags else {}, outputs=[], source=source)
        else:
            out.update(metadata={"tags": tags} if tags else {}, source=source)
        cells.append(out)
    kernelspec = (nb.get("metadata") or {}).get("kernelspec") or KERNELSPEC
    return {"cells": cells, "metadata": {"kernelspec": kernelspec, "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def dumps(nb: dict[str, Any]) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


def unclean(paths: list[Path]) -> list[Path]:
    """The notebooks among ``paths`` whose file is not byte-for-byte its canonical form."""
    return [p for p in paths if p.read_text(encoding="utf-8") != dumps(canonical(json.loads(p.read_text("utf-8"))))]


def main(argv: list[str]) -> int:
    paths = tracked_notebooks()
    if "--check" in argv:
        bad = unclean(paths)
        for path in bad:
            print(f"{path.relative_to(REPO)}: has outputs or metadata churn; run python scripts/strip_notebooks.py")
        return 1 if bad else 0
    for path in paths:
        text = dumps(canonical(json.loads(path.read_text("utf-8"))))
        if path.read_text("utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"stripped {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
