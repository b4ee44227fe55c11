"""The kernel stays "Busy" in JupyterLab for as long as a foreground cell waits on the agent.

Why it exists: Lab's status bar shows the state of the *last* ``status`` message on
iopub, whatever request it answers (only a few message types are left untracked by
jupyter_server). While a foreground ``%soba`` turn or ``%compact`` runs, other requests are still
answered on other threads: Lab's widget manager asks for a subshell (``create_subshell_request``,
on the control channel) when the budget widget first appears, and a subshell answers widget
messages on its own thread. ipykernel publishes ``busy`` then ``idle`` for each of them, and Lab
said "Idle" for the rest of the turn while the cell was plainly running.

:func:`busy_while_waiting` wraps the kernel's status publisher for the duration of the wait: after
an ``idle`` for any other request, the kernel says ``busy`` again with the waiting cell's parent
header, which is true (the cell is running). Every request still gets its own ``busy`` and
``idle``; nothing is suppressed. Outside a kernel (a terminal IPython, a plain script) it does
nothing.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from ..trusted_import import trusted_import

__all__ = ["busy_while_waiting"]


def _kernel() -> Any | None:
    try:
        Kernel = trusted_import("ipykernel.kernelbase").Kernel
    except ImportError:
        return None
    return Kernel.instance() if Kernel.initialized() else None


@contextlib.contextmanager
def busy_while_waiting(kernel: Any | None = None) -> Iterator[None]:
    """While the block runs (the running cell waits on the agent), any ``idle`` status the kernel
    publishes for another request is followed by ``busy`` for this cell."""
    kernel = kernel if kernel is not None else _kernel()
    publish = getattr(kernel, "_publish_status", None)
    get_parent = getattr(kernel, "get_parent", None)
    if kernel is None or publish is None or get_parent is None or "_publish_status" in vars(kernel):
        yield  # not a kernel, or a wait inside a wait (the outer one already watches)
        return
    cell = get_parent("shell")
    cell_id = cell.get("header", {}).get("msg_id") if isinstance(cell, dict) else None
    if not cell_id:
        yield
        return
    lock = threading.Lock()

    def publish_then_busy(status: str, channel: str, parent: Any = None) -> None:
        publish(status, channel, parent)
        if status != "idle":
            return
        answered = parent or get_parent(channel)
        if isinstance(answered, dict) and answered.get("header", {}).get("msg_id") != cell_id:
            with lock:  # control and subshell threads may both finish a request at once
                publish("busy", "shell", cell)

    kernel._publish_status = publish_then_busy
    try:
        yield
    finally:
        del kernel._publish_status  # the class's method again
