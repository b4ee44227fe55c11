"""The sandbox and approvals together, in a real kernel with real bwrap (issue 37, items 1 and 2).

``tools.sandbox: "bwrap"`` limits what a command reaches; it does not stand in for the card unless
``tools.sandboxSkipsApproval`` says so. And a sandboxed command that leaves code where this kernel
imports from gets a card of its own ("keep these files?"), whose denial moves them to
``.soba/quarantine/<call id>/``. The model is the loopback fake server; cards are answered as
JupyterLab answers them (test_kernel_approvals.py's client).
"""

from __future__ import annotations

import json
from typing import Any

from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from unit.test_sandbox import bwrap  # noqa: F401  (the fixture: bwrap present and usable, or skip/fail as there)

from kernel import test_kernel_approvals
from kernel.test_kernel_approvals import _approvals, _follow, _tool_results

started = test_kernel_approvals.started  # the fixture: a kernel on a project whose model is the loopback server

RM = "rm -f notes.txt"
KEEP_TITLE = "SOBA asks to keep files a sandboxed command left where this kernel imports from"


def _shell_then_reply(server: FakeServer, command: str, call_id: str = "c1") -> None:
    server.openai.enqueue(tool_calls=[{"id": call_id, "name": "shell", "arguments": {"command": command}}])
    server.openai.enqueue(text="done")


def _tool_messages_sent(server: FakeServer) -> list[str]:
    """The tool results the model was sent, in its last request."""
    messages = server.requests[-1].body["messages"]
    return [str(m.get("content")) for m in messages if m.get("role") == "tool"]


def test_sandboxed_shell_asks_first_unless_sandbox_skips_approval(
        bwrap: str, started: Any, fake_server: FakeServer) -> None:  # noqa: F811
    """Default ``sandboxSkipsApproval: false``: ``rm -f notes.txt`` shows a card, a denial keeps the
    file and is what the model hears, and ``%soba approval ask`` says shell asks first."""
    kernel, project = started(sandbox="bwrap")
    (project / "notes.txt").write_text("mine\n")
    status, text = kernel.run("%soba approval ask")
    assert status == "ok" and "asks first: shell (sandboxed; tools.sandboxSkipsApproval is false), python" in text, \
        text
    _shell_then_reply(fake_server, RM)
    seen = _follow(kernel, kernel.submit("%soba tidy up"), [{"answer": "deny", "reason": "keep my notes"}])
    (card,) = seen.cards
    assert card["tool"] == "shell" and card["body"] == RM
    assert (project / "notes.txt").read_text() == "mine\n"
    assert _tool_results(project) == ["denied by the user: keep my notes"]
    assert _tool_messages_sent(fake_server) == ["Error: denied by the user: keep my notes"]  # as an error result
    assert _approvals(project) == [("deny", "user")]


def test_sandboxed_shell_runs_without_a_card_when_sandbox_skips_approval(
        bwrap: str, started: Any, fake_server: FakeServer) -> None:  # noqa: F811
    kernel, project = started(sandbox="bwrap", sandboxSkipsApproval=True)
    (project / "notes.txt").write_text("mine\n")
    status, text = kernel.run("%soba approval ask")
    assert status == "ok" and "runs without asking: reads, sandboxed shell (tools.sandboxSkipsApproval); " \
        "asks first: python, every write" in text, text
    _shell_then_reply(fake_server, RM)
    seen = _follow(kernel, kernel.submit("%soba tidy up"), [])
    assert seen.cards == [] and not (project / "notes.txt").exists()
    assert _approvals(project) == []
    (result,) = _tool_results(project)
    assert "exit code 0" in result, result


def test_a_sandboxed_planted_module_denied_on_its_own_card_is_quarantined_and_recorded(
        bwrap: str, started: Any, fake_server: FakeServer) -> None:  # noqa: F811
    """The command runs unasked (``sandboxSkipsApproval``), but what it leaves where this kernel
    imports from asks on a card titled for that question; a denial moves it to
    ``.soba/quarantine/<call id>/`` and the transcript records who decided."""
    kernel, project = started(sandbox="bwrap", sandboxSkipsApproval=True)
    _shell_then_reply(fake_server, "echo 'print(1)' > mistune.py", "plant1")
    seen = _follow(kernel, kernel.submit("%soba write a helper"), [{"answer": "deny", "reason": "not code"}])
    (card,) = seen.cards
    assert card["title"] == KEEP_TITLE, card
    assert "mistune.py (new)" in card["body"] and "+print(1)" in card["diff"]
    assert any(line.startswith(KEEP_TITLE) for line in seen.lines), seen.lines  # its text/plain says so too
    assert not (project / "mistune.py").exists()
    assert (project / ".soba" / "quarantine" / "plant1" / "mistune.py").read_text() == "print(1)\n"
    (result,) = _tool_results(project)
    assert "[rolled back (deny by user)" in result and "mistune.py: moved to .soba/quarantine/plant1/mistune.py" \
        in result, result
    (session,) = (project / ".soba" / "sessions").glob("*.jsonl")
    (entry,) = [e for e in map(json.loads, session.read_text().splitlines()) if e.get("type") == "approval"]
    assert (entry["verdict"], entry["decidedBy"], entry["reason"], entry["toolCallId"]) == \
        ("deny", "user", "not code", "plant1")
    assert entry["subject"] == "keep mistune.py (new)"
