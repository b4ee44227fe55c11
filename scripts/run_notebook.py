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

A cell's output is awaited as long as the cell itself (``timeout``). nbclient stops listening 4 s
after a cell's reply by default, prints "Timeout waiting for IOPub output" and saves the notebook
without whatever came later: on a loaded machine the kernel's last output and its idle status
can come that late, and the executed copy would lose output without an error.

A kernel that dies before it runs any cell is started again, up to :data:`STARTS` times:
jupyter_client picks free ports and the kernel binds them a moment later, and on a busy machine
another process can take one in between ("Address already in use", one of five kernels started
at once in a fresh-clone CI run). Nothing has run then, so starting again is safe; a kernel that
fails after a cell ran is never retried.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

#: kernel starts a run may take when a kernel dies before running any cell
STARTS = 3


def _ran_any(nb: nbformat.NotebookNode) -> bool:
    return any(cell.get("execution_count") or cell.get("outputs") for cell in nb.cells if cell.cell_type == "code")


def main(source: str, target: str, timeout: int = 600, kernel_name: str = "python3") -> int:
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, STARTS + 1):
        nb = nbformat.read(source, as_version=4)
        client = NotebookClient(nb, timeout=timeout, kernel_name=kernel_name, store_widget_state=True,
                                iopub_timeout=timeout, raise_on_iopub_timeout=True,
                                extra_arguments=["--IPKernelApp.log_level=ERROR"],
                                resources={"metadata": {"path": str(Path(target).resolve().parent)}})
        try:
            client.execute()
            break
        except Exception as exc:
            if attempt == STARTS or _ran_any(nb):
                raise
            print(f"run_notebook: the kernel stopped before running any cell ({type(exc).__name__}: {exc}); "
                  f"starting a fresh one (attempt {attempt + 1} of {STARTS})", file=sys.stderr, flush=True)
    nbformat.write(nb, target)
    print(f"executed {source} -> {target} ({len(nb.cells)} cells)")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
