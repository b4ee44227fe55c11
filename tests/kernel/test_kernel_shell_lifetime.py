"""Every process a ``shell`` command starts ends with the kernel (soba_notebook.agent.process_reaper).

A real kernel runs a turn whose model (the loopback fake server) asks for a long shell command
with ``sandbox: none``: ``bash`` writes its pid, starts ``sleep`` in its group and a ``setsid``
sleeper that left the group, writes their pids, and would touch a marker after five minutes.
The kernel is then restarted, shut down, or killed with ``SIGKILL`` mid-command; afterwards no
pid is alive and no marker appears. Every wait is for an event; the deadlines only bound a failure.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from kernel_support import Kernel, alive, fake_server_project, parent_pid, wait_for

COMMAND = ("echo $$ > bash.pid; sleep 300 & echo $! > sleep.pid; setsid sleep 301 & echo $! > setsid.pid; "
           "wait; touch marker")
PID_FILES = ("bash.pid", "sleep.pid", "setsid.pid")


@pytest.fixture
def running(tmp_path: Path, fake_server: FakeServer) -> Iterator[tuple[Kernel, Path, dict[str, int]]]:
    """A kernel whose turn is inside the long shell command; its project and the command's pids."""
    fake_server.openai.enqueue(tool_calls=[{"id": "c1", "name": "shell", "arguments": {"command": COMMAND}}])
    fake_server.openai.enqueue(text="done")
    project = fake_server_project(tmp_path, fake_server.openai_base_url)
    kernel = Kernel(project, tmp_path / "home", env={"SOBA_TEST_KEY": "sk-test"})
    pids: dict[str, int] = {}
    try:
        kernel.submit("%soba run the long job")

        def started() -> bool:
            return all((project / f).exists() and (project / f).read_text().strip() for f in PID_FILES)

        wait_for(started, "the shell command to write its pids")
        pids = {f: int((project / f).read_text()) for f in PID_FILES}
        assert all(alive(pid) for pid in pids.values()), pids
        yield kernel, project, pids
    finally:
        for pid in pids.values():  # never leave a sleeper behind when the rule failed
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        try:
            kernel.close()
        except Exception:  # already shut down by the test
            pass


def _assert_all_ended(project: Path, pids: dict[str, int]) -> None:
    wait_for(lambda: not any(alive(pid) for pid in pids.values()),
             f"the command's processes to end: {[p for p in pids.values() if alive(p)]}")
    assert not (project / "marker").exists()


@pytest.mark.parametrize("now", [False, True], ids=["graceful", "immediate"])
def test_a_kernel_restart_ends_every_process_of_a_running_shell_command(
        running: tuple[Kernel, Path, dict[str, int]], now: bool) -> None:
    kernel, project, pids = running
    kernel.km.restart_kernel(now=now)  # immediate: the old kernel is killed, nothing of it runs after
    _assert_all_ended(project, pids)


def test_a_kernel_shutdown_ends_every_process_of_a_running_shell_command(
        running: tuple[Kernel, Path, dict[str, int]]) -> None:
    kernel, project, pids = running
    kernel.km.shutdown_kernel(now=False)
    _assert_all_ended(project, pids)


def test_a_killed_kernel_ends_every_process_of_a_running_shell_command(
        running: tuple[Kernel, Path, dict[str, int]]) -> None:
    _, project, pids = running
    kernel_pid = parent_pid(pids["bash.pid"])
    assert b"ipykernel" in Path(f"/proc/{kernel_pid}/cmdline").read_bytes()  # bash is the kernel's child
    os.kill(kernel_pid, signal.SIGKILL)  # no atexit, no shutdown hook: the reaper and the death signal
    _assert_all_ended(project, pids)
