"""MCP servers' tools on a real agent: a real stdio server written with the SDK's server API, the
loopback model server, the approval gate, and a project config that is not trusted."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from agent_support import make_agent
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401

from soba_notebook.agent.approval import Decision, Rule
from soba_notebook.cancel import CancelToken
from soba_notebook.config import UntrustedConfigWarning, load_config
from soba_notebook.errors import ConfigError

SERVER = textwrap.dedent('''
    import os, sys
    from mcp.server.mcpserver import MCPServer

    LOG = sys.argv[1]
    app = MCPServer("calc")
    with open(LOG + ".pid", "w") as f:
        f.write(str(os.getpid()))

    def record(name):
        with open(LOG, "a") as f:
            f.write(name + "\\n")

    @app.tool()
    def add(a: int, b: int) -> int:
        """Add two whole numbers."""
        record("add")
        return a + b

    @app.tool()
    def wait() -> str:
        """Never answer."""
        record("wait")
        import time
        time.sleep(3600)

    @app.tool()
    def crash() -> str:
        """Exit the server mid-call."""
        record("crash")
        os._exit(1)

    app.run()
''')


def _home(tmp_path: Path, servers: dict[str, Any]) -> Path:
    home = tmp_path / "home"
    (home / ".soba").mkdir(parents=True)
    (home / ".soba" / "config.json").write_text(json.dumps({"mcpServers": servers}))
    return home


def _calc(tmp_path: Path) -> tuple[dict[str, Any], Path]:
    script, log = tmp_path / "calc_server.py", tmp_path / "calls.log"
    script.write_text(SERVER)
    return {"calc": {"command": sys.executable, "args": [str(script), str(log)]}}, log


def _calls(*calls: tuple[str, str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"id": cid, "name": name, "arguments": args} for cid, name, args in calls]


def _tool_texts(agent: Any) -> list[str]:
    return [e.text for e in agent.store.path() if e.role == "tool"]


@pytest.fixture
def calc_agent(tmp_path: Path, fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> Any:
    servers, log = _calc(tmp_path)
    monkeypatch.setenv("HOME", str(_home(tmp_path, servers)))
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    yield agent, log
    agent.mcp.close()  # the provider's client belongs to a closed loop: only the servers are closed


class Answer:
    def __init__(self, decision: Decision) -> None:
        self.decision, self.asked = decision, []

    async def ask(self, request: Any, cancel: CancelToken) -> Decision:
        self.asked.append(request)
        return self.decision


def test_an_mcp_servers_tool_is_offered_called_and_its_result_lands_in_the_transcript(
        calc_agent: Any, fake_server: FakeServer) -> None:
    agent, log = calc_agent
    assert "mcp__calc__add" in agent.tools
    fake_server.openai.enqueue(tool_calls=_calls(("c1", "mcp__calc__add", {"a": 2, "b": 40})))
    fake_server.openai.enqueue(text="42")
    result = asyncio.run(agent.run_turn("add"))
    assert result.outcome == "completed"
    assert _tool_texts(agent) == ["42"]
    assert log.read_text().split() == ["add"]
    offered = [t["function"]["name"] for t in fake_server.requests[0].body["tools"]]
    assert "mcp__calc__add" in offered and "mcp__calc__crash" in offered
    assert [s.state for s in agent.mcp.status()] == ["running"]


def test_a_server_that_exits_mid_call_is_a_clear_tool_error_its_tools_go_and_the_turn_goes_on(
        calc_agent: Any, fake_server: FakeServer) -> None:
    agent, log = calc_agent
    fake_server.openai.enqueue(tool_calls=_calls(("c1", "mcp__calc__crash", {})))
    fake_server.openai.enqueue(text="the server died")
    result = asyncio.run(agent.run_turn("crash it"))
    assert result.outcome == "completed"
    (text,) = _tool_texts(agent)
    assert text.startswith("MCP server calc exited:") and "no longer available" in text
    assert log.read_text().split() == ["crash"]  # the call reached the server, which then died
    assert not any(n.startswith("mcp__") for n in agent.tools.names())
    second = [t["function"]["name"] for t in fake_server.requests[1].body["tools"]]
    assert not any(n.startswith("mcp__") for n in second)  # the next request no longer offers them
    assert agent.mcp.status()[0].state == "exited"
    assert agent.mcp.notes()[0].startswith("MCP server calc exited")


def test_the_stop_button_ends_a_waiting_mcp_call_with_a_cancelled_result(
        calc_agent: Any, fake_server: FakeServer) -> None:
    agent, log = calc_agent
    fake_server.openai.enqueue(tool_calls=_calls(("c1", "mcp__calc__wait", {})))
    token = CancelToken()

    async def turn() -> Any:
        running = asyncio.ensure_future(agent.run_turn("wait", token))
        while not log.exists():
            await asyncio.sleep(0.05)
        token.cancel()
        return await running

    result = asyncio.run(turn())
    assert result.outcome == "cancelled"
    assert _tool_texts(agent) == ["[cancelled: the call to MCP server calc was abandoned]"]


def test_closing_the_hub_stops_the_server_process(calc_agent: Any) -> None:
    agent, log = calc_agent
    pid = int(Path(str(log) + ".pid").read_text())
    os.kill(pid, 0)  # running
    agent.mcp.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


HTTP_SERVER = textwrap.dedent('''
    import sys
    from mcp.server.mcpserver import MCPServer

    app = MCPServer("web")

    @app.tool()
    def shout(text: str) -> str:
        """Upper-case a text."""
        return text.upper()

    app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
''')


def test_a_url_server_is_reached_over_streamable_http(tmp_path: Path, fake_server: FakeServer,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = tmp_path / "web_server.py"
    script.write_text(HTTP_SERVER)
    server = subprocess.Popen([sys.executable, str(script), str(port)], stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):  # until it listens (no timing is asserted)
            with socket.socket() as s, contextlib.suppress(OSError):
                s.connect(("127.0.0.1", port))
                break
            time.sleep(0.05)
        monkeypatch.setenv("HOME", str(_home(tmp_path, {"web": {"url": f"http://127.0.0.1:{port}/mcp"}})))
        agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
        try:
            fake_server.openai.enqueue(tool_calls=_calls(("c1", "mcp__web__shout", {"text": "hi"})))
            fake_server.openai.enqueue(text="done")
            asyncio.run(agent.run_turn("shout"))
            assert _tool_texts(agent) == ["HI"]
        finally:
            agent.mcp.close()
    finally:
        server.kill()
        server.wait()


def test_an_mcp_tools_schema_is_counted_in_the_fixed_prompt(calc_agent: Any) -> None:
    agent, _ = calc_agent
    with_mcp = agent.engine.base_tokens
    specs = [t.spec for t in agent.mcp.tools()]
    for spec in specs:
        agent.tools.unregister(spec.name)
    agent._refresh_base_tokens()
    assert with_mcp - agent.engine.base_tokens == agent.counter.count_tools(tuple(specs)) > 0


def test_a_denied_mcp_call_is_never_sent_to_the_server_and_a_session_rule_covers_only_that_tool(
        calc_agent: Any, fake_server: FakeServer) -> None:
    agent, log = calc_agent
    agent.config = agent.config.with_overrides({"tools": {"approval": "edits"}})
    agent.tool_context.config = agent.config.tools
    denied = Answer(Decision("deny", "no"))
    agent.approvals.approver = denied
    fake_server.openai.enqueue(tool_calls=_calls(("c1", "mcp__calc__add", {"a": 1, "b": 2})))
    fake_server.openai.enqueue(text="ok")
    asyncio.run(agent.run_turn("add"))
    assert _tool_texts(agent) == ["denied by the user: no"]
    assert not log.exists()  # the server was never called
    assert denied.asked[0].rules == (Rule("mcp__calc__add", "*"),)
    assert json.loads(denied.asked[0].body) == {"a": 1, "b": 2}
    allowed = Answer(Decision("session", rules=(Rule("mcp__calc__add", "*"),)))
    agent.approvals.approver = allowed
    fake_server.openai.enqueue(tool_calls=_calls(("c2", "mcp__calc__add", {"a": 1, "b": 2})))
    fake_server.openai.enqueue(tool_calls=_calls(("c3", "mcp__calc__add", {"a": 3, "b": 4})))
    fake_server.openai.enqueue(text="ok")
    asyncio.run(agent.run_turn("add twice"))
    assert _tool_texts(agent)[-2:] == ["3", "7"]
    assert len(allowed.asked) == 1  # the second call ran by the session rule
    assert log.read_text().split() == ["add", "add"]


def test_a_server_that_cannot_start_is_one_line_and_offers_no_tools(
        tmp_path: Path, fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    servers = {"gone": {"command": str(tmp_path / "no-such-program")}}
    monkeypatch.setenv("HOME", str(_home(tmp_path, servers)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    try:
        lines = [str(w.message) for w in caught if "MCP server" in str(w.message)]
        assert len(lines) == 1 and lines[0].startswith("MCP server gone failed: cannot run")
        assert not any(n.startswith("mcp__") for n in agent.tools.names())
        fake_server.openai.enqueue(text="fine")
        assert asyncio.run(agent.run_turn("hi")).outcome == "completed"
    finally:
        agent.mcp.close()  # the provider's client belongs to a closed loop: only the servers are closed


def test_an_untrusted_projects_mcp_servers_are_ignored_with_one_line(tmp_path: Path) -> None:
    project, home = tmp_path / "project", tmp_path / "home"
    (project / ".soba").mkdir(parents=True)
    home.mkdir()
    (project / ".soba" / "config.json").write_text(json.dumps({"mcpServers": {"evil": {"command": "rm"}}}))
    with pytest.warns(UntrustedConfigWarning, match="mcpServers"):
        config = load_config(home=home, project_dir=project)
    assert config.mcp_servers == ()


@pytest.mark.parametrize(("servers", "named"), [
    ({"calc": {"args": ["x"]}}, "mcpServers.calc"),
    ({"calc": {"command": "python", "args": "x.py"}}, "mcpServers.calc.args"),
    ({"calc": {"command": "python", "env": {"A": 1}}}, "mcpServers.calc.env"),
    ({"calc": {"url": "ftp://x"}}, "mcpServers.calc.url"),
    ({"a b": {"command": "python"}}, "mcpServers.a b"),
])
def test_a_bad_mcp_server_entry_is_a_config_error_naming_the_server_and_key(
        tmp_path: Path, servers: dict[str, Any], named: str) -> None:
    home = _home(tmp_path, servers)
    with pytest.raises(ConfigError) as caught:
        load_config(home=home, project_dir=tmp_path)
    assert caught.value.key == named and named in str(caught.value)


def test_a_disabled_mcp_tool_is_not_offered_and_its_schema_not_counted(
        tmp_path: Path, fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    servers, _ = _calc(tmp_path)
    monkeypatch.setenv("HOME", str(_home(tmp_path, servers)))
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url,
                             tools={"disabled": ["mcp__calc__crash"]})
    try:
        assert "mcp__calc__add" in agent.tools and "mcp__calc__crash" not in agent.tools
        fake_server.openai.enqueue(text="ok")
        asyncio.run(agent.run_turn("hello"))
        offered = [t["function"]["name"] for t in fake_server.requests[-1].body["tools"]]
        assert "mcp__calc__add" in offered and "mcp__calc__crash" not in offered
        without = agent.engine.base_tokens
        crash = next(t for t in agent.mcp.tools() if t.name == "mcp__calc__crash")
        agent.tools.register(crash)  # what the fixed prompt would be had it been offered
        agent._refresh_base_tokens()
        assert agent.engine.base_tokens - without == agent.counter.count_tools((crash.spec,)) > 0
    finally:
        agent.mcp.close()


def test_an_enabled_list_offers_only_the_mcp_tools_it_names(
        tmp_path: Path, fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    servers, _ = _calc(tmp_path)
    monkeypatch.setenv("HOME", str(_home(tmp_path, servers)))
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url,
                             tools={"enabled": ["read_file", "mcp__calc__add"]})
    try:
        assert agent.tools.names() == ("read_file", "mcp__calc__add")
    finally:
        agent.mcp.close()


def test_the_allow_list_takes_mcp_tool_names_and_still_refuses_an_unknown_name(tmp_path: Path) -> None:
    config = load_config(home=tmp_path, project_dir=tmp_path,
                         overrides={"tools": {"disabled": ["shell", "mcp__calc__crash"]}})
    assert config.tools.disabled == ("shell", "mcp__calc__crash")
    with pytest.raises(ConfigError, match=r"tools\.enabled.*'shel' is not a tool; did you mean 'shell'\?"):
        load_config(home=tmp_path, project_dir=tmp_path, overrides={"tools": {"enabled": ["shel"]}})
    with pytest.raises(ConfigError, match=r"tools\.disabled.*'mcp__calc' is not an MCP tool name"):
        load_config(home=tmp_path, project_dir=tmp_path, overrides={"tools": {"disabled": ["mcp__calc"]}})
