"""Execute a notebook headless in a real kernel and save the executed copy (the README's main job).

The kernel runs in the target's folder (``build/``), so whatever the notebook creates next to
itself (the quickstart's ``soba-quickstart/<run>/`` project) lands there, never among the tracked
notebooks.

The kernel's own log is kept to errors: ipykernel 7 warns "Kernel is running over TCP without
encryption" at every start, which in a headless run lands in the terminal between the runner's
lines although the kernel listens on localhost only. (An IPC transport avoids the warning, but
libzmq then aborted in the kernel at shutdown now and then: "Assertion failed: pfd.revents &
POLLIN", seen in the suite.) Errors still reach the terminal, and every cell's output is in the
executed notebook.
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
                            extra_arguments=["--IPKernelApp.log_level=ERROR"],
                            resources={"metadata": {"path": str(Path(target).resolve().parent)}})
    client.execute()
    nbformat.write(nb, target)
    print(f"executed {source} -> {target} ({len(nb.cells)} cells)")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
