"""Execute a notebook headless in a real kernel and save the executed copy (the README's main job).

The kernel runs in the target's folder (``build/``), so whatever the notebook creates next to
itself (the quickstart's ``soba-quickstart/<run>/`` project) lands there, never among the tracked
notebooks.

The kernel talks to this script over IPC (Unix domain sockets in a private temporary folder), not
TCP: nothing else on the machine can connect to it, and ipykernel has no reason to print its
"Kernel is running over TCP without encryption" warning into the quickstart's output. Windows has
no IPC transport; there it stays TCP on localhost.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from traitlets.config import Config

KERNEL_NAME = "python3"


def ipc_config(socket_dir: str) -> Config:
    """Kernel manager settings: the kernel listens on Unix sockets in ``socket_dir`` (none on Windows)."""
    if os.name == "nt":
        return Config()
    return Config({"KernelManager": {"transport": "ipc", "ip": os.path.join(socket_dir, "kernel")}})


def main(source: str, target: str, timeout: int = 600) -> int:
    nb = nbformat.read(source, as_version=4)
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    # a short path: a Unix socket's path must stay under ~100 bytes
    with tempfile.TemporaryDirectory(prefix="soba-kernel-") as sockets:
        # through config, not a ready manager: the client then owns the kernel and shuts it down
        client = NotebookClient(nb, config=ipc_config(sockets), timeout=timeout, kernel_name=KERNEL_NAME,
                                store_widget_state=True,
                                resources={"metadata": {"path": str(Path(target).resolve().parent)}})
        client.execute()
    nbformat.write(nb, target)
    print(f"executed {source} -> {target} ({len(nb.cells)} cells)")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
