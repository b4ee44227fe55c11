"""A loopback "JupyterLab" for kernel tests of the live notebook channel.

:class:`LoopbackLab` is a second ``jupyter_client`` connection to a test kernel that does what
SOBA's JupyterLab extension does (``labextension/src/index.js``): it watches iopub for a
``comm_open`` to ``soba.live_notebook``, answers a ``read`` with the open document it holds (a
notebook dict per absolute path, which a test may change as a user's unsaved typing) and applies
an ``apply``'s one cell operation to it (and an ``outputs``: a cell the agent runs, its count and
outputs set on the open cell, every state kept in ``runs``), replying with a ``comm_msg`` on the shell channel, as a
front end does (``answer=False``: it only records them). It runs on its own thread, so it answers
while the kernel's main shell is busy.
"""

from __future__ import annotations

import copy
import queue
import threading
from typing import Any

from jupyter_client import BlockingKernelClient

__all__ = ["LoopbackLab"]

TARGET = "soba.live_notebook"


class LoopbackLab:
    """The front end; ``documents`` maps absolute notebook paths to the open notebooks' JSON."""

    def __init__(self, km: Any, documents: dict[str, dict[str, Any]], *, answer: bool = True) -> None:
        self.documents = documents
        self.answer = answer  # False: only records the requests, as a front end without the extension
        self.requests: list[dict[str, Any]] = []
        self.runs: list[tuple[str, str, int | None]] = []  # (cell id, state, execution count) as sent
        self.lock = threading.Lock()
        # its own client and session: a client sharing the test's session would share its socket
        # identity, and the kernel's replies to the test's cells would reach this one
        self._client = BlockingKernelClient()
        self._client.load_connection_info(km.get_connection_info())
        self._client.start_channels()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="loopback-lab", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._client.stop_channels()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                msg = self._client.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                continue
            content = msg["content"]
            if msg["msg_type"] != "comm_open" or content.get("target_name") != TARGET:
                continue
            request = dict(content.get("data") or {})
            with self.lock:
                self.requests.append(request)
                if not self.answer:
                    continue
                reply = self._answer(request)
            self._client.shell_channel.send(self._client.session.msg(
                "comm_msg", {"comm_id": content["comm_id"], "data": {"reply": request.get("id"), **reply}}))

    def _answer(self, request: dict[str, Any]) -> dict[str, Any]:
        doc = self.documents.get(str(request.get("path")))
        if doc is None:
            return {"found": False, "open": sorted(self.documents)}
        if request.get("op") == "read":
            return {"found": True, "notebook": copy.deepcopy(doc), "dirty": True}
        if request.get("op") == "outputs":
            return {"found": True, **self._show_run(doc, request)}
        return {"found": True, **_apply(doc, request["edit"])}


    def _show_run(self, doc: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
        at = _index(doc, request.get("cell_id"))
        if at < 0 or doc["cells"][at]["cell_type"] != "code":
            return {"ok": False, "error": f"no code cell {request.get('cell_id')}"}
        running = request["state"] == "running"
        cell = doc["cells"][at]
        cell["outputs"] = list(request["outputs"])
        cell["execution_count"] = None if running else request["execution_count"]
        self.runs.append((str(request["cell_id"]), str(request["state"]), cell["execution_count"]))
        return {"ok": True, "index": at}


def _index(doc: dict[str, Any], cell_id: str | None) -> int:
    return next((i for i, c in enumerate(doc["cells"]) if c.get("id") == cell_id), -1)


def _source(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _apply(doc: dict[str, Any], edit: dict[str, Any]) -> dict[str, Any]:
    cells = doc["cells"]
    if edit["action"] == "insert":
        at = 0 if edit["after_id"] is None else _index(doc, edit["after_id"]) + 1
        if edit["after_id"] is not None and at == 0:
            return {"ok": False, "error": f"no cell {edit['after_id']}"}
        cell = dict(edit["cell"])
        if cell["cell_type"] == "code":
            cell.update(outputs=[], execution_count=None)
        cells.insert(at, cell)
        return {"ok": True, "index": at}
    at = _index(doc, edit["cell_id"])
    if at < 0:
        return {"ok": False, "error": f"no cell {edit['cell_id']}"}
    if _source(cells[at]) != edit["expect"]:
        return {"ok": False, "error": f"cell {edit['cell_id']} changed in the notebook since it was read"}
    if edit["action"] == "delete":
        del cells[at]
    else:
        cell = {**cells[at], **edit["cell"]}
        if cell["cell_type"] == "code":
            cell.update(outputs=[], execution_count=None)
        cells[at] = cell
    return {"ok": True, "index": at}
