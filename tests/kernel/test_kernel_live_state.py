"""A real kernel: the agent knows the kernel's variables after compaction, and the user's own cells."""

from __future__ import annotations

import json
import os
from pathlib import Path

from agent_support import is_summary_request
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from jupyter_client import KernelManager
from kernel_support import fake_server_project, trust_project_config

from kernel.test_kernel import REPO, _execute


def _text(message: dict) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else json.dumps(content)


def test_kernel_state_survives_compaction_the_variables_tool_sees_it_and_user_cells_are_noted(
        tmp_path: Path, fake_server: FakeServer) -> None:
    project = fake_server_project(tmp_path, fake_server.openai_base_url, keepRecentTokens=60)
    turn = {"n": 0}

    def handler(path: str, body: dict) -> dict:
        if is_summary_request(body):
            return {"text": json.dumps({"goal": "explore the data"}), "usage": False}
        turn["n"] += 1
        last = body["messages"][-1]
        if "use the variables tool" in _text(last):
            return {"tool_calls": [{"id": "v1", "name": "variables", "arguments": {}}], "usage": False}
        return {"text": "Looked at it. " + "The frame has two integer columns. " * 20, "usage": False}

    fake_server.handler = handler
    trust_project_config(project, tmp_path / "home")
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(project), env={
        **os.environ, "SOBA_TEST_KEY": "k" * 16, "HOME": str(tmp_path / "home"),
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])})
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        for code in ("%load_ext soba_notebook",
                     "import pandas as pd\ndf = pd.DataFrame({'x': [1, 2, 3], 'y': [4, 5, 6]})",
                     "%soba look at df", "%soba what else can you tell", "%compact",
                     "df = df[df.x > 1]", "%soba now use the variables tool"):
            status, outputs = _execute(kc, code, timeout=120)
            assert status == "ok", (code, outputs)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    agent_requests = [r.body for r in fake_server.requests if not is_summary_request(r.body)]
    assert "df = pd.DataFrame" in json.dumps(agent_requests[0]["messages"]), "the first turn hears of the cell"
    after, tool_round = agent_requests[-2], agent_requests[-1]
    messages = [m for m in after["messages"] if m["role"] != "system"]
    capsule = _text(messages[0])
    assert capsule.startswith("<context_capsule") and "## Kernel state (informative only" in capsule
    assert "- df: DataFrame shape (3, 2); columns: x int64, y int64" in capsule
    assert not any("pd.DataFrame(" in _text(m) for m in messages), "the defining history was compacted away"
    note = _text(messages[-2])
    assert note.startswith("<user_cells>") and "df = df[df.x > 1]" in note and "→ ok" in note
    assert _text(messages[-1]) == "now use the variables tool"
    result = next(m for m in tool_round["messages"] if m["role"] == "tool")
    assert _text(result) == "df: DataFrame shape (2, 2); columns: x int64, y int64"
