"""Comm messages answered while the kernel is busy running a cell.

A foreground ``%soba`` keeps the kernel's main shell busy for the whole turn, and a kernel handles
shell messages one at a time: a widget's button click (an approval card) or a reply from the
JupyterLab front end (the open notebook's cells) would wait until the cell ends, which is too late
for a turn that is waiting for exactly that answer.

ipykernel 7 runs *subshells*: extra shell threads with their own message loops, and it routes an
incoming ``comm_msg`` to the subshell its comm names (``Comm._reply_subshell_for``). This module
starts one subshell per kernel for SOBA (:func:`soba_subshell`, made the way a front end's
``create_subshell_request`` makes one, on the kernel's control thread) and pins a comm's incoming
messages to it (:func:`answer_while_busy`): the comm's handlers then run on that subshell's thread,
whether the main shell is idle, running a foreground turn, or running other cells beside a
background turn. The jupyter-ui-poll package does a similar job by pumping the main shell from the
busy cell, but it needs ``Kernel.do_one_iteration``, which ipykernel 7 no longer has.

Where the kernel has no subshells (ipykernel < 7, terminal IPython, no kernel at all),
:func:`answer_while_busy` returns ``False`` and callers say what the user can do instead; nothing
here ever blocks for longer than :data:`CREATE_TIMEOUT_S`.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any

__all__ = ["CREATE_TIMEOUT_S", "answer_while_busy", "soba_subshell"]

#: How long starting the subshell may take before the kernel is treated as having none.
CREATE_TIMEOUT_S = 10.0

_lock = threading.Lock()
_subshells: dict[int, str | None] = {}  # id(kernel) -> its SOBA subshell (None: cannot have one)


def _kernel() -> Any | None:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency
        return None
    shell = get_ipython()
    return getattr(shell, "kernel", None) if shell is not None else None


def _create_subshell(kernel: Any) -> str | None:
    """Ask the kernel's shell-channel thread for a new subshell, from the control thread (the only
    thread that may use the control-to-shell socket), and wait for its id."""
    if not getattr(kernel, "_supports_kernel_subshells", False):
        return None
    control = getattr(kernel, "control_thread", None)
    manager = getattr(getattr(kernel, "shell_channel_thread", None), "manager", None)
    if control is None or manager is None:
        return None
    made: concurrent.futures.Future[str] = concurrent.futures.Future()

    def create() -> None:
        try:
            socket = manager.control_to_shell_channel.from_socket
            socket.send_json({"type": "create"})
            made.set_result(str(socket.recv_json()["subshell_id"]))
        except BaseException as exc:  # reported to the waiting thread, never lost on the control loop
            made.set_exception(exc)

    control.io_loop.add_callback(create)
    try:
        return made.result(timeout=CREATE_TIMEOUT_S)
    except (concurrent.futures.TimeoutError, OSError, KeyError, ValueError):
        return None


def soba_subshell(kernel: Any | None = None) -> str | None:
    """The id of SOBA's subshell in ``kernel`` (the running IPython kernel by default), started on
    first use; ``None`` when the kernel cannot run one."""
    kernel = kernel if kernel is not None else _kernel()
    if kernel is None:
        return None
    with _lock:
        if id(kernel) not in _subshells:
            _subshells[id(kernel)] = _create_subshell(kernel)
        return _subshells[id(kernel)]


def answer_while_busy(comm: Any) -> bool:
    """Have ``comm``'s incoming messages handled on SOBA's subshell, so its handlers run while the
    main shell is busy. ``True`` when they will be; ``False`` (nothing changed) when this kernel
    cannot, or ``comm`` is not an ipykernel comm."""
    if comm is None or not hasattr(comm, "_reply_subshell_for"):
        return False
    subshell = soba_subshell()
    if subshell is None:
        return False
    # An instance attribute, because ipykernel re-points the comm at whichever shell last sent on
    # it (the main shell, for every update the agent's thread pushes during a turn).
    comm._reply_subshell_for = lambda _data, _default: subshell
    return True
