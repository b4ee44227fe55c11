"""``%soba mcp`` in a real kernel: a real stdio MCP server (written with the SDK's server API) started
with the session's agent, its state and tools listed, and a server that cannot start named in one line."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

from kernel_support import Kernel

SERVER = textwrap.dedent('''
    from mcp.server.mcpserver import MCPServer

    app = MCPServer("calc")

    @app.tool()
    def add(a: int, b: int) -> int:
        """Add two whole numbers."""
        return a + b

    app.run()
''')


def test_soba_mcp_lists_each_server_its_state_and_its_tools(tmp_path: Path) -> None:
    script = tmp_path / "calc_server.py"
    script.write_text(SERVER)
    home, project = tmp_path / "home", tmp_path / "project"
    (home / ".soba").mkdir(parents=True)
    project.mkdir()
    (home / ".soba" / "config.json").write_text(json.dumps({"mcpServers": {
        "calc": {"command": sys.executable, "args": [str(script)]},
        "gone": {"command": str(tmp_path / "no-such-program")}}}))
    kernel = Kernel(project, home)
    try:
        status, text = kernel.run("%soba mcp")
        assert status == "ok", text
        assert "calc: running — tools: mcp__calc__add" in text, text
        gone = [line for line in text.splitlines() if line.startswith("gone: failed: cannot run")]
        assert len(gone) == 1, text
        said = [line for line in text.splitlines() if "MCP server gone failed: cannot run" in line]
        assert len(said) == 1, text  # the one line said when the session's agent opened
    finally:
        kernel.close()


def test_soba_mcp_without_servers_says_where_to_add_them_and_opens_no_session(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "project").mkdir()
    kernel = Kernel(tmp_path / "project", tmp_path / "home")
    try:
        status, text = kernel.run("%soba mcp")
        assert status == "ok" and 'no MCP servers: add them as "mcpServers"' in text, text
        assert not (tmp_path / "project" / ".soba" / "sessions").exists()
    finally:
        kernel.close()
