"""Execute a notebook headless in a real kernel and save the executed copy (the README's main job).

The kernel runs in the target's folder (``build/``), so whatever the notebook creates next to
itself (the quickstart's ``soba-quickstart/<run>/`` project) lands there, never among the tracked
notebooks.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def main(source: str, target: str, timeout: int = 600) -> int:
    nb = nbformat.read(source, as_version=4)
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=True,
                            resources={"metadata": {"path": str(Path(target).resolve().parent)}})
    client.execute()
    nbformat.write(nb, target)
    print(f"executed {source} -> {target} ({len(nb.cells)} cells)")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
