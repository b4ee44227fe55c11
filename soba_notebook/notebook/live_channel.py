"""One request to the JupyterLab front end and its reply, over a comm, while the kernel is busy.

The agent runs on its own thread (``agent/runtime.py``) and a foreground ``%soba`` keeps the main
shell busy, so a front end's reply must be handled elsewhere: each request opens a fresh comm to
the target :data:`TARGET` (which SOBA's JupyterLab extension registers on every notebook kernel)
with the request as the open message's data, pins the comm's incoming messages to SOBA's subshell
(:func:`.busy_comms.answer_while_busy`), and waits, bounded, for the first ``comm_msg`` back. A
fresh comm per request needs no handshake and survives page reloads and new browser tabs (the comm
opened for a request reaches every front end connected then); it is closed after the reply.

Nothing answers when no front end has the target (classic Notebook, VS Code, JupyterLab without
the extension; a JupyterLab without it closes the comm, which may itself wait for the busy shell):
the request then ends after :data:`REPLY_TIMEOUT_S` and further requests are not sent for
:data:`QUIET_AFTER_SILENCE_S`, so an agent without a live front end loses seconds once, not per call.
A kernel that no Jupyter server started for a notebook (no ``JPY_SESSION_NAME``: nbclient, a
console, terminal IPython) is never asked.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..trusted_import import trusted_import
from .busy_comms import answer_while_busy

__all__ = ["QUIET_AFTER_SILENCE_S", "REPLY_TIMEOUT_S", "TARGET", "FrontEndChannel", "Reply"]

#: The comm target SOBA's JupyterLab extension registers (labextension/src/index.js).
TARGET = "soba.live_notebook"
#: How long one request waits for the front end (it answers in milliseconds when it is there).
REPLY_TIMEOUT_S = 5.0
#: After a request nothing answered, how long further requests are not sent.
QUIET_AFTER_SILENCE_S = 60.0

_SILENCE = ("no JupyterLab front end with SOBA's extension answered (classic Notebook, VS Code, or JupyterLab "
            "without the soba-notebook extension)")


@dataclass(frozen=True, slots=True)
class Reply:
    """What a request got: ``data`` the front end's reply (``None``: none) and, without one, why."""

    data: Mapping[str, Any] | None
    reason: str = ""


def _in_kernel() -> bool:
    try:
        Kernel = trusted_import("ipykernel.kernelbase").Kernel
    except ImportError:
        return False
    return bool(Kernel.initialized())


class FrontEndChannel:
    """Requests to the JupyterLab front end of the running kernel (module docstring)."""

    def __init__(self, timeout: float = REPLY_TIMEOUT_S, quiet_after_silence: float = QUIET_AFTER_SILENCE_S) -> None:
        self.timeout = timeout
        self.quiet_after_silence = quiet_after_silence
        self._silent_until = 0.0
        self._lock = threading.Lock()

    def request(self, data: Mapping[str, Any]) -> Reply:
        """Send ``data`` (a JSON object) and wait for the first reply; never raises for a missing front end."""
        if not os.environ.get("JPY_SESSION_NAME"):
            return Reply(None, "this kernel was not started for a notebook by a Jupyter server (nbclient, a console, "
                               "terminal IPython), so there is no JupyterLab to ask")
        if time.monotonic() < self._silent_until:
            return Reply(None, _SILENCE)
        try:
            create_comm = trusted_import("comm").create_comm
        except ImportError:  # pragma: no cover - comm comes with ipykernel
            return Reply(None, "this Python has no Jupyter comm support")
        request_id = uuid.uuid4().hex
        answered = threading.Event()
        got: list[Mapping[str, Any]] = []

        def on_msg(msg: Mapping[str, Any]) -> None:
            reply = msg.get("content", {}).get("data")
            if isinstance(reply, Mapping) and reply.get("reply") == request_id and not got:
                got.append(reply)
                answered.set()

        if not _in_kernel():
            return Reply(None, "not running in a Jupyter kernel (terminal IPython or a plain Python)")
        comm = create_comm(target_name=TARGET, primary=False)  # opened below, once its handlers are set
        if not answer_while_busy(comm):
            return Reply(None, "this kernel cannot hear the front end while a cell runs (it needs ipykernel 7.4 "
                               "or later)")
        comm.on_msg(on_msg)
        comm.on_close(lambda _msg: answered.set())  # a front end without the extension closes it at once
        try:
            comm.open(data={**data, "id": request_id})
            answered.wait(self.timeout)
        finally:
            comm.close()
        if got:
            return Reply(got[0])
        with self._lock:
            self._silent_until = time.monotonic() + self.quiet_after_silence
        return Reply(None, _SILENCE)
