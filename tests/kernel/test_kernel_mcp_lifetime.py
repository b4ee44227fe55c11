"""MCP servers stop with the kernel: a stdio server (written with the SDK's server API) started by the
session's agent writes its pid when it starts and keeps running after its stdin closes (as a server
with a busy worker does), so only a kill ends it. After the kernel is shut down, restarted, or killed with
``SIGKILL``, that pid is no longer running (a zombie counts as dead). Every wait is for an event; the
deadlines only bound a failure."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_support import Kernel, alive, parent_pid, wait_for

SERVER = textwrap.dedent('''
    import os
    import sys
    import time

    from mcp.server.mcpserver import MCPServer

    with open(sys.argv[1], "w") as fh:
        fh.write(str(os.getpid()))

    app = MCPServer("calc")

    @app.tool()
    def add(a: int, b: int) -> int:
        """Add two whole numbers."""
        return a + b

    app.run()
    time.sleep(600)  # a server that outlives its stdin (a worker still busy): only a kill ends it
''')


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[tuple[Kernel, int]]:
    """A kernel whose session's agent runs the MCP server; the server's pid."""
    script, pid_file = tmp_path / "calc_server.py", tmp_path / "server.pid"
    script.write_text(SERVER)
    home, project = tmp_path / "home", tmp_path / "project"
    (home / ".soba").mkdir(parents=True)
    project.mkdir()
    (home / ".soba" / "config.json").write_text(json.dumps({"mcpServers": {
        "calc": {"command": sys.executable, "args": [str(script), str(pid_file)]}}}))
    kernel = Kernel(project, home)
    pid = 0
    try:
        status, text = kernel.run("%soba mcp")
        assert status == "ok" and "calc: running" in text, text
        pid = int(pid_file.read_text())
        assert alive(pid)
        yield kernel, pid
    finally:
        if pid and alive(pid):  # never leave a server behind when the rule failed
            os.kill(pid, signal.SIGKILL)
        try:
            kernel.close()
        except Exception:  # already shut down by the test
            pass


def test_a_kernel_shutdown_stops_its_mcp_servers(serving: tuple[Kernel, int]) -> None:
    kernel, pid = serving
    kernel.km.shutdown_kernel(now=False)
    wait_for(lambda: not alive(pid), f"MCP server {pid} to end")


@pytest.mark.parametrize("now", [False, True], ids=["graceful", "immediate"])
def test_a_kernel_restart_stops_its_mcp_servers(serving: tuple[Kernel, int], now: bool) -> None:
    kernel, pid = serving
    kernel.km.restart_kernel(now=now)  # immediate: the old kernel is killed, nothing of it runs after
    wait_for(lambda: not alive(pid), f"MCP server {pid} to end")


def test_a_killed_kernel_stops_its_mcp_servers(serving: tuple[Kernel, int]) -> None:
    _, pid = serving
    kernel_pid = parent_pid(pid)
    assert b"ipykernel" in Path(f"/proc/{kernel_pid}/cmdline").read_bytes()  # the server is the kernel's child
    os.kill(kernel_pid, signal.SIGKILL)  # no atexit, no shutdown hook
    wait_for(lambda: not alive(pid), f"MCP server {pid} to end")
