"""Approval modes, session rules and the gate's answers, on a real agent over the loopback server.

The policy (agent/approval.py) is pure; the gate (agent/approval_gate.py) asks an injected
approver, records ``approval`` entries and makes a denial the call's result. The notebook's card
and terminal prompt are driven in a real kernel in test_kernel_approvals.py.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from agent_support import make_agent
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401

from soba_notebook.agent.approval import (
    ApprovalRequest,
    Decision,
    Rule,
    needs_approval,
    runs_without_asking,
    shell_prefixes,
    suggested_rules,
)
from soba_notebook.cancel import CancelToken
from soba_notebook.config import load_config
from soba_notebook.errors import ConfigError
from soba_notebook.session import SessionStore


class Scripted:
    """An approver that answers from a list, and keeps what it was asked."""

    def __init__(self, *answers: Decision | None) -> None:
        self.answers = list(answers)
        self.asked: list[ApprovalRequest] = []
        self.settled: list[str] = []

    async def ask(self, request: ApprovalRequest, cancel: CancelToken) -> Decision:
        self.asked.append(request)
        answer = self.answers.pop(0)
        if answer is None:  # never answers: the timeout or the stop button ends it
            await asyncio.Event().wait()
        assert answer is not None
        return answer

    def settle(self, request: ApprovalRequest, decision: Decision) -> None:
        self.settled.append(decision.verdict)


def _calls(*calls: tuple[str, str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"id": cid, "name": name, "arguments": args} for cid, name, args in calls]


def _agent(tmp_path: Path, server: FakeServer, approver: Scripted | None, **tools: Any) -> Any:
    agent, _, _ = make_agent(tmp_path, "openai", server.openai_base_url, tools={"approval": "ask", **tools})
    agent.approvals.approver = approver
    return agent


def _tool_texts(agent: Any) -> list[str]:
    return [e.text for e in agent.store.path() if e.role == "tool"]


# -- the pure policy -------------------------------------------------------------------------------

@pytest.mark.parametrize(("mode", "tool", "args", "asks"), [
    ("ask", "shell", {"command": "ls"}, True),
    ("ask", "python", {"code": "1"}, True),
    ("ask", "write_file", {"path": "a.py", "content": ""}, True),
    ("ask", "read_file", {"path": "a.py"}, False),
    ("edits", "write_file", {"path": "src/a.py", "content": ""}, False),
    ("edits", "write_file", {"path": "../outside.py", "content": ""}, True),
    ("edits", "shell", {"command": "ls"}, True),
    ("edits", "python", {"code": "1"}, True),
    ("never", "shell", {"command": "rm -rf x"}, False),
    ("never", "python", {"code": "1"}, False),
])
def test_each_mode_asks_for_exactly_its_tools(mode: str, tool: str, args: dict[str, Any], asks: bool) -> None:
    assert needs_approval(mode, "none", (), tool, args) is asks


def test_a_sandboxed_shell_command_still_asks_unless_sandbox_skips_approval_and_python_always_asks() -> None:
    rm = {"command": "rm -f notes.txt"}
    for mode in ("ask", "edits"):
        assert needs_approval(mode, "bwrap", (), "shell", rm) is True  # the default: the card still comes
        assert needs_approval(mode, "bwrap", (), "shell", rm, sandbox_skips_approval=True) is False
        assert needs_approval(mode, "none", (), "shell", rm, sandbox_skips_approval=True) is True  # no sandbox
        assert needs_approval(mode, "bwrap", (), "python", {"code": "import os"}, sandbox_skips_approval=True) is True
    assert load_config(home=Path("/nonexistent-home"), project_dir=Path("/nonexistent")).tools.sandbox_skips_approval \
        is False


def test_what_runs_without_asking_is_one_sentence_naming_the_sandboxed_shell_exactly_when_it_skips() -> None:
    assert runs_without_asking("ask", "none", False) == \
        "runs without asking: reads; asks first: shell, python, every write, MCP tools"
    assert runs_without_asking("ask", "bwrap", False) == \
        "runs without asking: reads; asks first: shell (sandboxed; tools.sandboxSkipsApproval is false), python, " \
        "every write, MCP tools"
    assert runs_without_asking("edits", "bwrap", True) == \
        "runs without asking: reads, writes in the workspace, sandboxed shell (tools.sandboxSkipsApproval); " \
        "asks first: python, writes to files Python in this kernel imports, MCP tools"
    assert runs_without_asking("never", "bwrap", False).startswith("nothing asks: shell (sandboxed), python")


def test_a_shell_rule_is_the_program_and_its_subcommand_and_covers_no_other_command() -> None:
    assert shell_prefixes("git status --short") == ("git status",)
    assert shell_prefixes("pytest -q tests/test_x.py 2>&1") == ("pytest",)
    rules = suggested_rules("shell", {"command": "git status"})
    assert rules == (Rule("shell", "git status"),)
    assert needs_approval("ask", "none", rules, "shell", {"command": "git status -s"}) is False
    assert needs_approval("ask", "none", rules, "shell", {"command": "git push --force"}) is True
    # a chained or redirected command is never covered by a rule for its first part
    assert needs_approval("ask", "none", rules, "shell", {"command": "git status && rm -rf ~"}) is True
    assert needs_approval("ask", "none", rules, "shell", {"command": "git status > ~/.bashrc"}) is True
    assert needs_approval("ask", "none", rules, "shell", {"command": "git status $(rm x)"}) is True


def test_an_edit_rule_covers_the_files_folder_and_nothing_beside_it() -> None:
    rules = suggested_rules("edit_file", {"path": "src/pkg/a.py"})
    assert rules == (Rule("edits", "src/pkg/"),)
    assert needs_approval("ask", "none", rules, "write_file", {"path": "src/pkg/sub/b.py"}) is False
    assert needs_approval("ask", "none", rules, "write_file", {"path": "src/pkg2/b.py"}) is True
    assert needs_approval("ask", "none", rules, "write_file", {"path": "src/other.py"}) is True


def test_the_approval_mode_is_validated_with_the_key_and_the_choices(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"tools.approval = 'sometimes' .*ask, edits, never"):
        load_config(home=tmp_path, project_dir=tmp_path, overrides={"tools": {"approval": "sometimes"}})
    with pytest.raises(ConfigError, match=r"tools.approvalTimeoutMs"):
        load_config(home=tmp_path, project_dir=tmp_path, overrides={"tools": {"approvalTimeoutMs": 0}})
    assert load_config(home=tmp_path, project_dir=tmp_path).tools.approval == "ask"


# -- the gate in a real agent ----------------------------------------------------------------------

def test_a_denied_shell_call_never_runs_and_the_model_hears_the_reason(tmp_path: Path,
                                                                      fake_server: FakeServer) -> None:
    approver = Scripted(Decision("deny", "not on my laptop"))
    agent = _agent(tmp_path, fake_server, approver)
    marker = agent.workspace / "marker.txt"
    fake_server.openai.enqueue(tool_calls=_calls(("c1", "shell", {"command": f"touch {marker}"})))
    fake_server.openai.enqueue(text="understood")
    result = asyncio.run(agent.run_turn("make the marker"))
    assert result.outcome == "completed"  # the turn goes on after a denial
    assert not marker.exists()
    assert _tool_texts(agent) == ["denied by the user: not on my laptop"]
    assert approver.asked[0].body == f"touch {marker}" and approver.asked[0].rules == (Rule("shell", "touch"),)
    # the model's next request carried the denial as the tool result, and nothing else of it
    sent = fake_server.requests[1].body["messages"]
    assert sent[-1]["content"].endswith("denied by the user: not on my laptop")  # the wire marks errors
    assert not any("approval" in str(m.get("content", "")).lower() for m in sent)
    recorded = [e for e in agent.store.path() if e.type == "approval"]
    assert [(e.data["verdict"], e.data["decidedBy"], e.data["reason"]) for e in recorded] == [
        ("deny", "user", "not on my laptop")]


def test_a_session_rule_allows_the_next_matching_command_and_not_a_different_one(
        tmp_path: Path, fake_server: FakeServer) -> None:
    rules = (Rule("shell", "touch"),)
    approver = Scripted(Decision("session", rules=rules), Decision("deny"))
    agent = _agent(tmp_path, fake_server, approver)
    ws = agent.workspace
    fake_server.openai.enqueue(tool_calls=_calls(("c1", "shell", {"command": "touch one.txt"})))
    fake_server.openai.enqueue(tool_calls=_calls(("c2", "shell", {"command": "touch two.txt"})))
    fake_server.openai.enqueue(tool_calls=_calls(("c3", "shell", {"command": "mkdir three"})))
    fake_server.openai.enqueue(text="done")
    asyncio.run(agent.run_turn("make files"))
    assert (ws / "one.txt").exists() and (ws / "two.txt").exists() and not (ws / "three").exists()
    assert [r.body for r in approver.asked] == ["touch one.txt", "mkdir three"]  # touch two.txt: by the rule
    verdicts = [(e.data["verdict"], e.data["decidedBy"]) for e in agent.store.path() if e.type == "approval"]
    assert verdicts == [("session", "user"), ("once", "rule"), ("deny", "user")]


def test_session_rules_are_kept_on_resume_and_dropped_by_a_rewind_past_them(tmp_path: Path,
                                                                           fake_server: FakeServer) -> None:
    approver = Scripted(Decision("session", rules=(Rule("shell", "touch"),)))
    agent = _agent(tmp_path, fake_server, approver)
    fake_server.openai.enqueue(tool_calls=_calls(("c1", "shell", {"command": "touch a"})))
    fake_server.openai.enqueue(text="done")
    asyncio.run(agent.run_turn("touch"))
    before = next(e.id for e in agent.store.path() if e.role == "user")  # the prompt, before the answer
    reopened = SessionStore.open(agent.store.file)
    from soba_notebook.agent import Agent

    again = Agent(reopened, agent.config, agent.provider, workspace=agent.workspace)
    assert again.approvals.rules == (Rule("shell", "touch"),)
    reopened.rewind(before)
    again.approvals.restore(reopened.path())
    assert again.approvals.rules == ()


def test_no_answer_within_the_timeout_denies_and_says_how_to_set_the_mode(tmp_path: Path,
                                                                         fake_server: FakeServer) -> None:
    approver = Scripted(None)
    agent = _agent(tmp_path, fake_server, approver, approvalTimeoutMs=300)
    fake_server.openai.enqueue(tool_calls=_calls(("c1", "write_file", {"path": "x.txt", "content": "x"})))
    fake_server.openai.enqueue(text="ok")
    result = asyncio.run(agent.run_turn("write"))
    assert result.outcome == "completed" and not (agent.workspace / "x.txt").exists()
    (text,) = _tool_texts(agent)
    assert text.startswith("denied: no answer") and "%soba approval never" in text and "tools" in text
    assert approver.settled == ["timeout"]


def test_an_agent_with_no_approver_denies_at_once_in_ask_mode_and_runs_in_never_mode(
        tmp_path: Path, fake_server: FakeServer) -> None:
    agent = _agent(tmp_path, fake_server, None)
    fake_server.openai.enqueue(tool_calls=_calls(("c1", "write_file", {"path": "x.txt", "content": "x"})))
    fake_server.openai.enqueue(text="ok")
    asyncio.run(agent.run_turn("write"))
    assert not (agent.workspace / "x.txt").exists()
    assert "no one can answer" in _tool_texts(agent)[0] and "%soba approval never" in _tool_texts(agent)[0]
    agent.set_config(agent.config.with_overrides({"tools": {"approval": "never"}}))
    fake_server.openai.enqueue(tool_calls=_calls(("c2", "write_file", {"path": "x.txt", "content": "x"})))
    fake_server.openai.enqueue(text="ok")
    asyncio.run(agent.run_turn("write again"))
    assert (agent.workspace / "x.txt").read_text() == "x"
    changes = [e.data["changes"] for e in agent.store.path() if e.type == "config"]
    assert {"tools.approval": "never"} in changes  # the mode change is in the transcript


def test_the_stop_button_cancels_a_pending_approval(tmp_path: Path, fake_server: FakeServer) -> None:
    approver = Scripted(None)
    agent = _agent(tmp_path, fake_server, approver)
    fake_server.openai.enqueue(tool_calls=_calls(("c1", "shell", {"command": "touch never.txt"})))
    cancel = CancelToken()
    asked = threading.Event()
    original = approver.ask

    async def ask(request: ApprovalRequest, token: CancelToken) -> Decision:
        asked.set()
        return await original(request, token)

    approver.ask = ask  # type: ignore[method-assign]
    threading.Thread(target=lambda: asked.wait(60) and cancel.cancel("stop button"), daemon=True).start()
    result = asyncio.run(agent.run_turn("touch", cancel))
    assert result.outcome == "cancelled" and not (agent.workspace / "never.txt").exists()
    (entry,) = [e for e in agent.store.path() if e.role == "tool"]
    assert entry.data["message"].get("cancelled") is True
    assert approver.settled == ["cancelled"]


def test_a_write_asks_with_the_diff_it_would_make(tmp_path: Path, fake_server: FakeServer) -> None:
    approver = Scripted(Decision("once"))
    agent = _agent(tmp_path, fake_server, approver)
    (agent.workspace / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    fake_server.openai.enqueue(tool_calls=_calls(("c1", "write_file", {
        "path": "calc.py", "content": "def add(a, b):\n    return a + b\n"})))
    fake_server.openai.enqueue(text="ok")
    asyncio.run(agent.run_turn("fix"))
    diff = approver.asked[0].diff or ""
    assert "-    return a - b" in diff and "+    return a + b" in diff and "a/calc.py" in diff
    assert "a + b" in (agent.workspace / "calc.py").read_text()


def test_a_notebook_edit_asks_with_where_it_goes_and_the_cells_new_source(tmp_path: Path,
                                                                         fake_server: FakeServer) -> None:
    """A card for ``notebook_edit`` says which notebook, which action and which cell, and shows the
    new source (it showed an empty body: the kernel's own notebook has no ``path`` argument)."""
    approver = Scripted(Decision("deny", "not now"))
    agent = _agent(tmp_path, fake_server, approver)
    fake_server.openai.enqueue(tool_calls=_calls(("c1", "notebook_edit", {
        "cell_id": "a1b2", "action": "insert_after", "source": "df.plot()", "cell_type": "code"})))
    fake_server.openai.enqueue(text="ok")
    asyncio.run(agent.run_turn("plot it"))
    asked = approver.asked[0]
    assert asked.body == "this kernel’s notebook: insert a cell after a1b2"
    assert "+df.plot()" in (asked.diff or "")


class _ShowingQueue:
    """A job's event queue whose front end renders each card the moment it is asked (or never)."""

    def __init__(self, shows: bool) -> None:
        self.shows, self.items = shows, list[Any]()

    def put(self, event: Any) -> None:
        self.items.append(event)
        if self.shows and event.type == "approval_request":
            event.data["pending"].mark_shown()


def test_a_card_no_front_end_rendered_is_denied_after_the_shown_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    from soba_notebook.notebook import approvals

    monkeypatch.setattr(approvals, "SHOWN_WITHIN_S", 0.2)
    events = _ShowingQueue(shows=False)
    approver = approvals.NotebookApprover("widget", lambda: events)
    request = ApprovalRequest("c1", "shell", "touch x", None, (), 3_600.0, "ask")
    decision = asyncio.run(approver.ask(request, CancelToken()))
    assert (decision.verdict, decision.by) == ("deny", "headless")
    assert "no front end showed the approval card" in decision.reason


def test_once_a_card_is_shown_only_the_timeout_bounds_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    from soba_notebook.notebook import approvals

    monkeypatch.setattr(approvals, "SHOWN_WITHIN_S", 0.05)
    events = _ShowingQueue(shows=True)
    approver = approvals.NotebookApprover("widget", lambda: events)
    request = ApprovalRequest("c1", "shell", "touch x", None, (), 3_600.0, "ask")

    def click_later() -> None:  # a person takes longer than the bound to answer
        threading.Event().wait(0.5)
        approver.pending()[0].answer(Decision("once"))

    clicker = threading.Thread(target=click_later)
    clicker.start()
    decision = asyncio.run(approver.ask(request, CancelToken()))
    clicker.join()
    assert decision.verdict == "once"


def test_the_shown_bound_is_read_from_its_environment_variable_at_each_question(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from soba_notebook.notebook import approvals

    monkeypatch.setenv(approvals.SHOWN_WITHIN_ENV, "0.1")
    events = _ShowingQueue(shows=False)
    approver = approvals.NotebookApprover("widget", lambda: events)
    request = ApprovalRequest("c1", "shell", "touch x", None, (), 3_600.0, "ask")
    decision = asyncio.run(approver.ask(request, CancelToken()))
    assert (decision.verdict, decision.by) == ("deny", "headless")
    assert "within 0.1 s" in decision.reason


@pytest.mark.parametrize("raw", ["soon", "0", "-5", "inf", "nan"])
def test_a_shown_bound_that_is_not_a_positive_number_is_named_and_the_default_kept(
        raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from soba_notebook.notebook import approvals

    monkeypatch.setenv(approvals.SHOWN_WITHIN_ENV, raw)
    with pytest.warns(UserWarning, match=f"{approvals.SHOWN_WITHIN_ENV}={raw!r} is not a positive number"):
        assert approvals.shown_within_s() == approvals.SHOWN_WITHIN_S
