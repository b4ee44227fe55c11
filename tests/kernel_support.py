"""A real IPython kernel for tests: started in a project directory with soba_notebook loaded.

:class:`Kernel` wraps ``jupyter_client``'s ``KernelManager``: ``submit`` sends a cell and returns at
once (so two kernels can be sent cells at the same moment), ``wait`` collects what that cell
showed as text, ``run`` does both; ``wait_for_text`` waits for a running cell to show something.
:func:`run_cell` is the one loop for a test that drives a kernel client itself: a cell's reply
and every message it sent, in order. The kernel imports the package of the repository this file
lives in (``PYTHONPATH``) and sees only ``home`` as its home directory, whose config sets
``tools.approval`` to ``"never"`` unless the test passes another ``approval`` (or ``None``), and
which trusts the project's ``.soba/config.json`` as it is at the start unless ``trust=False``
(the tests of workspace trust itself).
"""

from __future__ import annotations

import json
import os
import queue
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from jupyter_client import KernelManager

__all__ = ["REPO", "Kernel", "alive", "fake_server_project", "parent_pid", "run_cell", "script_tool_calls",
           "trust_project_config", "wait_for"]

REPO = Path(__file__).resolve().parents[1]


def fake_server_project(tmp_path: Path, base_url: str, **compaction: object) -> Path:
    """``tmp_path/project`` whose config sends the model ``gpt-4o-mini`` to ``base_url`` with the key
    in ``SOBA_TEST_KEY``, and ``compaction`` as its compaction settings."""
    project = tmp_path / "project"
    (project / ".soba").mkdir(parents=True)
    (project / ".soba" / "config.json").write_text(json.dumps({
        "model": {"provider": "openai", "model": "gpt-4o-mini", "baseUrl": base_url, "apiKeyEnv": "SOBA_TEST_KEY"},
        "compaction": compaction}))
    return project


def script_tool_calls(fake_server: Any, calls: list[tuple[str, dict[str, Any]]]) -> None:
    """The loopback model (``fakeserver.FakeServer``) makes ``calls`` one per step, then ends the turn."""
    def handler(path: str, body: dict[str, Any]) -> dict[str, Any]:
        done = sum(1 for m in body["messages"] if m.get("role") == "tool")
        if done < len(calls):
            name, arguments = calls[done]
            return {"tool_calls": [{"id": f"c{done}", "name": name, "arguments": arguments}], "usage": False}
        return {"text": "done", "usage": False}
    fake_server.handler = handler


def trust_project_config(project: Path, home: Path) -> None:
    """``home``'s user trusts ``project``'s ``.soba/config.json`` as it is now, as ``%soba trust`` records it
    (tests of other things use a project config that names the loopback server)."""
    from soba_notebook.config import project_trust
    from soba_notebook.trust import record_trust

    report = project_trust(project, home=home)
    if report is not None:
        record_trust(report.trust, home)


def run_cell(kc: Any, code: str, timeout: float = 120) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Execute ``code`` on the kernel client ``kc``: its execute_reply content and every iopub
    message of the cell, in order, until the kernel is idle again."""
    msg_id = kc.execute(code)
    messages: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        messages.append(msg)
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            while True:  # a reply to an earlier cell nobody read may come first
                reply = kc.get_shell_msg(timeout=10)
                if reply["parent_header"].get("msg_id") == msg_id:
                    return reply["content"], messages
    raise TimeoutError(f"cell did not finish: {code[:60]}")


def _set_home_approval(home: Path, approval: str) -> None:
    """``tools.approval`` in ``home``'s ``~/.soba/config.json``, keeping whatever else it holds."""
    path = home / ".soba" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    config = json.loads(path.read_text()) if path.exists() else {}
    config.setdefault("tools", {}).setdefault("approval", approval)
    path.write_text(json.dumps(config))


class Kernel:
    """A real IPython kernel in ``project`` with ``%load_ext soba_notebook`` run; ``timeout`` is how
    long a cell may run unless told otherwise."""

    def __init__(self, project: Path, home: Path, env: Mapping[str, str] | None = None,
                 timeout: float = 120, approval: str | None = "never", trust: bool = True) -> None:
        home.mkdir(parents=True, exist_ok=True)
        if approval is not None:  # tests of other things run without questions no one would answer
            _set_home_approval(home, approval)
        if trust:
            trust_project_config(project, home)
        self.timeout = timeout
        self.km = KernelManager(kernel_name="python3")
        full_env = {**os.environ, "HOME": str(home), "NO_PROXY": "*",
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
                    **(env or {})}
        self.km.start_kernel(cwd=str(project), env=full_env)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        self._texts: dict[str, list[str]] = {}
        self._idle: set[str] = set()
        self._status: dict[str, str] = {}
        #: where each display (by its display_id) shows: the cell's message id and its text's index
        self._displays: dict[str, tuple[str, int]] = {}
        status, text = self.run("%load_ext soba_notebook")
        assert status == "ok", text

    def submit(self, code: str) -> str:
        """Send a cell; its message id (``wait`` for its outcome)."""
        return str(self.kc.execute(code))

    def run(self, code: str, timeout: float | None = None) -> tuple[str, str]:
        """Execute ``code``; the reply status and everything the cell showed as text."""
        return self.wait(self.submit(code), timeout)

    def _pump(self) -> None:
        """Read one message of the kernel's output (if one comes within a second) into the buffers."""
        try:
            msg = self.kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            return
        parent = msg["parent_header"].get("msg_id")
        if not parent:
            return
        content, texts = msg["content"], self._texts.setdefault(parent, [])
        if msg["msg_type"] == "stream":
            texts.append(content["text"])
        elif msg["msg_type"] in ("display_data", "execute_result"):
            display_id = content.get("transient", {}).get("display_id")
            if display_id:
                self._displays[display_id] = (parent, len(texts))
            texts.append(content.get("data", {}).get("text/plain", ""))
        elif msg["msg_type"] == "update_display_data":
            # An updated display shows its latest content where it first appeared, as a front end
            # does: a slow compaction's "Compacting context · 0%" line becomes its final report. A
            # display of a cell already collected changes in that cell, not in this one.
            where = self._displays.get(content.get("transient", {}).get("display_id", ""))
            if where is not None:
                self._texts[where[0]][where[1]] = content.get("data", {}).get("text/plain", "")
        elif msg["msg_type"] == "error":
            texts.append("\n".join(content.get("traceback", [])))
        elif msg["msg_type"] == "status" and content["execution_state"] == "idle":
            self._idle.add(parent)

    def wait_for_text(self, msg_id: str, needle: str, timeout: float | None = None) -> str:
        """Wait until the running cell ``msg_id`` has shown ``needle``; what it showed so far."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while needle not in "".join(self._texts.get(msg_id, [])):
            if msg_id in self._idle or time.monotonic() > deadline:
                raise AssertionError(f"the cell never showed {needle!r}: {''.join(self._texts.get(msg_id, []))}")
            self._pump()
        return "".join(self._texts[msg_id])

    def wait(self, msg_id: str, timeout: float | None = None) -> tuple[str, str]:
        """Wait until cell ``msg_id`` ends: its reply status and everything it showed as text."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while msg_id not in self._idle:
            if time.monotonic() > deadline:
                shown = "".join(self._texts.get(msg_id, []))
                raise TimeoutError(f"cell {msg_id} did not finish within {timeout} s; it showed "
                                   f"{len(shown):,} characters, the last: {shown[-3_000:]!r}")
            self._pump()
        while msg_id not in self._status:  # the shell replies arrive in the order the cells ran
            reply = self.kc.get_shell_msg(timeout=10)
            self._status[reply["parent_header"].get("msg_id")] = str(reply["content"]["status"])
        self._displays = {key: where for key, where in self._displays.items() if where[0] != msg_id}
        return self._status.pop(msg_id), "".join(self._texts.pop(msg_id, []))

    def value(self, expression: str) -> str:
        """What ``print(expression)`` prints in the kernel (stripped)."""
        status, text = self.run(f"print({expression})")
        assert status == "ok", text
        return text.strip()

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def alive(pid: int) -> bool:
    """Running, not a zombie (an orphan a container's init does not reap stays one, dead)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(b")") + 2:].split()[0] not in (b"Z", b"X")


def parent_pid(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as fh:
        stat = fh.read()
    return int(stat[stat.rfind(b")") + 2:].split()[1])


def wait_for(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Wait until ``check()`` holds; the deadline only bounds a failure."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
