"""Approval cards and the terminal prompt, in a real kernel and a real terminal IPython.

The model is the loopback fake server (a scripted ``shell`` call that would create a marker
file). A card is answered the way JupyterLab answers it: a ``comm_msg`` to the card's comm (the
anywidget custom message its buttons send), from the kernel client while the ``%soba`` cell is
still running (foreground) or after its cell returned (background). The terminal prompt is
answered on the standard input of a real ``ipython`` process in a pseudo-terminal (pexpect).
"""

from __future__ import annotations

import json
import os
import queue
import sys
import time
from pathlib import Path
from typing import Any

import pexpect
import pytest
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from kernel_support import REPO, Kernel, fake_server_project

pytestmark = pytest.mark.kernel

TOUCH = "touch marker.txt"


def _touch_then_reply(server: FakeServer, *commands: str) -> None:
    for i, command in enumerate(commands):
        server.openai.enqueue(tool_calls=[{"id": f"c{i}", "name": "shell", "arguments": {"command": command}}])
    server.openai.enqueue(text="done")


def _project(tmp_path: Path, server: FakeServer, **tools: Any) -> Path:
    project = fake_server_project(tmp_path, server.openai_base_url)
    config = json.loads((project / ".soba" / "config.json").read_text())
    config["tools"] = {"approval": "ask", **tools}
    (project / ".soba" / "config.json").write_text(json.dumps(config))
    return project


def _answer_cards(kernel: Kernel, answers: list[dict[str, Any]], msg_id: str | None,
                  timeout: float = 180) -> list[dict[str, Any]]:
    """Read the kernel's output until every answer is sent to a new approval card (in order), and,
    with ``msg_id``, until that cell is idle; the cards' requests as they were shown."""
    shown: list[dict[str, Any]] = []
    idle = msg_id is None
    deadline = time.monotonic() + timeout
    while len(shown) < len(answers) or not idle:
        assert time.monotonic() < deadline, f"cards shown: {shown}"
        try:
            msg = kernel.kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        content = msg["content"]
        if msg["msg_type"] == "status" and msg["parent_header"].get("msg_id") == msg_id \
                and content["execution_state"] == "idle":
            idle = True
        state = content.get("data", {}).get("state", {}) if msg["msg_type"] == "comm_open" else {}
        if isinstance(state.get("request"), dict) and state["request"].get("tool"):
            shown.append(state["request"])
            data = {"method": "custom", "content": answers[len(shown) - 1]}
            kernel.kc.shell_channel.send(kernel.kc.session.msg("comm_msg", {"comm_id": content["comm_id"],
                                                                            "data": data}))
    if msg_id is not None:
        reply = kernel.kc.get_shell_msg(timeout=30)
        assert reply["parent_header"]["msg_id"] == msg_id
    return shown


def _tool_results(project: Path) -> list[str]:
    (session,) = (project / ".soba" / "sessions").glob("*.jsonl")
    lines = [json.loads(line) for line in session.read_text().splitlines() if line.strip()]
    return [str(e["message"]["content"]) for e in lines if e.get("message", {}).get("role") == "tool"]


def _approvals(project: Path) -> list[tuple[str, str]]:
    (session,) = (project / ".soba" / "sessions").glob("*.jsonl")
    lines = [json.loads(line) for line in session.read_text().splitlines() if line.strip()]
    return [(e["verdict"], e["decidedBy"]) for e in lines if e.get("type") == "approval"]


@pytest.fixture
def started(tmp_path: Path, fake_server: FakeServer) -> Any:
    kernels: list[Kernel] = []

    def start(**tools: Any) -> tuple[Kernel, Path]:
        project = _project(tmp_path, fake_server, **tools)
        kernel = Kernel(project, tmp_path / "home", env={"SOBA_TEST_KEY": "test-key-not-secret"}, approval=None)
        kernels.append(kernel)
        return kernel, project

    yield start
    for kernel in kernels:
        kernel.close()


def test_a_card_denied_during_a_foreground_turn_never_runs_the_command(started: Any,
                                                                       fake_server: FakeServer) -> None:
    kernel, project = started()
    _touch_then_reply(fake_server, TOUCH)
    msg_id = kernel.submit("%soba make the marker")
    (shown,) = _answer_cards(kernel, [{"answer": "deny", "reason": "not now"}], msg_id)
    assert shown["body"] == TOUCH and shown["rule"] == "shell: touch …"
    assert not (project / "marker.txt").exists()
    assert _tool_results(project) == ["denied by the user: not now"]
    assert _approvals(project) == [("deny", "user")]


def test_allow_once_runs_and_a_session_rule_allows_the_next_matching_command_only(
        started: Any, fake_server: FakeServer) -> None:
    kernel, project = started()
    _touch_then_reply(fake_server, "touch one.txt", "touch two.txt", "mkdir three")
    msg_id = kernel.submit("%soba make files")
    shown = _answer_cards(kernel, [{"answer": "session"}, {"answer": "deny"}], msg_id)
    assert [card["body"] for card in shown] == ["touch one.txt", "mkdir three"]  # two.txt: by the rule
    assert (project / "one.txt").exists() and (project / "two.txt").exists() and not (project / "three").exists()
    assert _approvals(project) == [("session", "user"), ("once", "rule"), ("deny", "user")]
    status, text = kernel.run("%soba status")
    assert status == "ok" and "approval" in text and "session rules: shell: touch …" in text, text


def test_a_card_in_a_background_turn_is_answered_while_the_kernel_is_idle(started: Any,
                                                                          fake_server: FakeServer) -> None:
    kernel, project = started()
    _touch_then_reply(fake_server, TOUCH)
    status, text = kernel.run("%%soba --background\nmake the marker")
    assert status == "ok", text
    (shown,) = _answer_cards(kernel, [{"answer": "once"}], None)
    assert shown["body"] == TOUCH
    deadline = time.monotonic() + 120
    while len(_tool_results(project)) < 1:
        assert time.monotonic() < deadline, "the background turn never ran the command"
        time.sleep(0.2)
    assert (project / "marker.txt").exists() and _approvals(project) == [("once", "user")]


def test_no_answer_denies_after_the_timeout_saying_how_to_set_the_mode(started: Any,
                                                                       fake_server: FakeServer) -> None:
    kernel, project = started(approvalTimeoutMs=1_500)
    _touch_then_reply(fake_server, TOUCH)
    status, text = kernel.run("%soba make the marker")
    assert status == "ok", text
    assert not (project / "marker.txt").exists()
    (result,) = _tool_results(project)
    assert "no answer" in result and "%soba approval never" in result
    assert _approvals(project) == [("timeout", "timeout")]


def test_the_stop_button_cancels_a_pending_card(started: Any, fake_server: FakeServer) -> None:
    kernel, project = started()
    _touch_then_reply(fake_server, TOUCH)
    msg_id = kernel.submit("%soba make the marker")
    deadline = time.monotonic() + 120
    while "SOBA asks" not in "".join(kernel._texts.get(msg_id, [])):  # the card's text/plain
        assert time.monotonic() < deadline, kernel._texts.get(msg_id)
        kernel._pump()
    kernel.km.interrupt_kernel()
    _status, _text = kernel.wait(msg_id)
    assert not (project / "marker.txt").exists()
    assert _approvals(project) == [("cancelled", "user")]
    assert "cancelled" in _tool_results(project)[0]


def test_the_mode_is_changed_by_a_magic_recorded_and_shown_in_status(started: Any,
                                                                     fake_server: FakeServer) -> None:
    kernel, project = started()
    status, text = kernel.run("%soba approval never")
    assert status == "ok" and "approval: never" in text, text
    _touch_then_reply(fake_server, TOUCH)
    status, text = kernel.run("%soba make the marker")
    assert status == "ok" and (project / "marker.txt").exists(), text
    (session,) = (project / ".soba" / "sessions").glob("*.jsonl")
    assert {"tools.approval": "never"} in [json.loads(line).get("changes") for line in session.read_text().splitlines()]
    assert "never (nothing asks)" in kernel.run("%soba status")[1]


# -- terminal IPython ------------------------------------------------------------------------------

def _ipython(project: Path, home: Path) -> pexpect.spawn:
    env = {**os.environ, "HOME": str(home), "NO_PROXY": "*", "SOBA_TEST_KEY": "test-key-not-secret",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    child = pexpect.spawn(sys.executable, ["-m", "IPython", "--simple-prompt", "--no-banner", "--colors=NoColor"],
                          cwd=str(project), env=env, encoding="utf-8", timeout=120)
    child.expect(r"In \[1\]: ")
    child.sendline("%load_ext soba_notebook")
    child.expect(r"In \[2\]: ")
    return child


def test_the_terminal_prompt_takes_y_a_and_n_with_a_reason_on_standard_input(
        tmp_path: Path, fake_server: FakeServer) -> None:
    project = _project(tmp_path, fake_server)
    _touch_then_reply(fake_server, "touch one.txt", "touch two.txt", "touch three.txt", "mkdir four")
    child = _ipython(project, tmp_path / "home")
    try:
        child.sendline("%soba make files")
        child.expect("SOBA asks to run shell:")
        child.expect(r"\[a\] allow for this session \(shell: touch …\).*\? ")
        child.sendline("y")
        child.expect("Allowed once")
        child.expect("SOBA asks to run shell:")  # once is not a rule: touch two.txt asks again
        child.expect(r"\? ")
        child.sendline("a")
        child.expect("Allowed for this session")
        child.expect("SOBA asks to run shell:")  # touch three.txt ran by the rule; mkdir asks
        child.expect("mkdir four")
        child.expect(r"\? ")
        child.sendline("n not in my home")
        child.expect("Denied: not in my home")
        child.expect(r"In \[3\]: ")
    finally:
        child.sendline("exit")
        child.expect(pexpect.EOF)
    assert [(project / f).exists() for f in ("one.txt", "two.txt", "three.txt", "four")] == [True, True, True, False]
    assert _approvals(project) == [("once", "user"), ("session", "user"), ("once", "rule"), ("deny", "user")]
    assert _tool_results(project)[-1] == "denied by the user: not in my home"
