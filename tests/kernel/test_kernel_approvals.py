"""Approval cards and the terminal prompt, in a real kernel and a real terminal IPython.

The model is the loopback fake server (a scripted ``shell`` call that would create a marker
file). A card is answered the way JupyterLab answers it: its view reports ``shown``, then a
``comm_msg`` to the card's comm (the anywidget custom message its buttons send) once the cell's
live line says it waits, from the kernel client while the ``%soba`` cell is still running
(foreground) or after its cell returned (background). A client that never reports ``shown`` is a
headless run (nbclient). The terminal prompt is answered on the standard input of a real
``ipython`` process in a pseudo-terminal (pexpect). Every wait is for an event of the cell; the
deadlines only bound a failure.
"""

from __future__ import annotations

import json
import os
import queue
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pexpect
import pytest
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from kernel_support import REPO, Kernel, fake_server_project, trust_project_config

from soba_notebook.notebook.approvals import SHOWN_WITHIN_ENV

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


@dataclass
class Seen:
    """What a cell showed while :func:`_follow` read it."""

    cards: list[dict[str, Any]] = field(default_factory=list)  # each card's request, as shown
    lines: list[str] = field(default_factory=list)  # every text/plain the cell displayed or updated, in order

    def text(self) -> str:
        return "\n".join(self.lines)


Answer = dict[str, Any] | Callable[[], Any] | None


def _follow(kernel: Kernel, msg_id: str, answers: list[Answer], *, until: str | None = None,
            shown: bool = True, timeout: float = 300) -> Seen:
    """Read cell ``msg_id``'s output as JupyterLab would, until the cell is idle, every answer was
    sent and (with ``until``) the cell showed ``until`` (a background turn's summary).

    Each new approval card is reported rendered (the ``shown`` message its view sends; not with
    ``shown=False``: a headless client) and, once the cell's live line says it waits for that
    approval, sent the next of ``answers`` the way a click sends it (``None``: left unanswered; a
    callable: called instead, e.g. the stop button).
    ``timeout`` only bounds a failure; every wait is for an event of the cell."""
    seen = Seen()
    cards: list[str] = []  # comm ids, in order shown
    answered = 0
    since = 0  # the cell's output after the last answer: where the next card's waiting line must be
    idle = False
    deadline = time.monotonic() + timeout

    def send(comm_id: str, content: dict[str, Any]) -> None:
        data = {"method": "custom", "content": content}
        kernel.kc.shell_channel.send(kernel.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": data}))

    while answered < len(answers) or not idle or (until is not None and until not in seen.text()):
        assert time.monotonic() < deadline, f"cards shown: {seen.cards}; the cell showed: {seen.text()[-3_000:]}"
        waiting = answered < len(cards) and f"waiting for your approval · {seen.cards[answered]['tool']}" \
            in "\n".join(seen.lines[since:])
        if waiting:
            answer = answers[answered]
            if callable(answer):
                answer()
            elif answer is not None:
                send(cards[answered], answer)
            answered, since = answered + 1, len(seen.lines)
        try:
            msg = kernel.kc.get_iopub_msg(timeout=0.2)
        except queue.Empty:
            continue
        content, kind = msg["content"], msg["msg_type"]
        if kind == "status" and msg["parent_header"].get("msg_id") == msg_id:
            idle = idle or content["execution_state"] == "idle"
        elif kind in ("display_data", "update_display_data", "stream") \
                and msg["parent_header"].get("msg_id") == msg_id:
            seen.lines.append(content["text"] if kind == "stream" else content["data"].get("text/plain", ""))
        state = content.get("data", {}).get("state", {}) if kind == "comm_open" else {}
        if isinstance(state.get("request"), dict) and state["request"].get("tool"):
            seen.cards.append(state["request"])
            cards.append(content["comm_id"])
            if shown:
                send(content["comm_id"], {"shown": True})
    while True:  # its reply (a reply to an earlier cell nobody read may come first)
        reply = kernel.kc.get_shell_msg(timeout=30)
        if reply["parent_header"]["msg_id"] == msg_id:
            return seen


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

    def start(shown_within_s: float | None = None, **tools: Any) -> tuple[Kernel, Path]:
        """A kernel on a project with ``tools``; ``shown_within_s`` shortens the card's shown bound."""
        project = _project(tmp_path, fake_server, **tools)
        env = {"SOBA_TEST_KEY": "test-key-not-secret"}
        if shown_within_s is not None:
            env[SHOWN_WITHIN_ENV] = str(shown_within_s)
        kernel = Kernel(project, tmp_path / "home", env=env, approval=None)
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
    (shown,) = _follow(kernel, msg_id, [{"answer": "deny", "reason": "not now"}]).cards
    assert shown["body"] == TOUCH and shown["rule"] == "shell: touch …"
    assert not (project / "marker.txt").exists()
    assert _tool_results(project) == ["denied by the user: not now"]
    assert _approvals(project) == [("deny", "user")]


def test_allow_once_runs_and_a_session_rule_allows_the_next_matching_command_only(
        started: Any, fake_server: FakeServer) -> None:
    kernel, project = started()
    _touch_then_reply(fake_server, "touch one.txt", "touch two.txt", "mkdir three")
    msg_id = kernel.submit("%soba make files")
    shown = _follow(kernel, msg_id, [{"answer": "session"}, {"answer": "deny"}]).cards
    assert [card["body"] for card in shown] == ["touch one.txt", "mkdir three"]  # two.txt: by the rule
    assert (project / "one.txt").exists() and (project / "two.txt").exists() and not (project / "three").exists()
    assert _approvals(project) == [("session", "user"), ("once", "rule"), ("deny", "user")]
    status, text = kernel.run("%soba status")
    assert status == "ok" and "approval" in text and "session rules: shell: touch …" in text, text


def test_a_card_in_a_background_turn_is_answered_while_the_kernel_is_idle(started: Any,
                                                                          fake_server: FakeServer) -> None:
    kernel, project = started()
    _touch_then_reply(fake_server, TOUCH)
    msg_id = kernel.submit("%%soba --background\nmake the marker")
    seen = _follow(kernel, msg_id, [{"answer": "once"}], until="After this turn")  # the board's summary
    (shown,) = seen.cards
    assert shown["body"] == TOUCH and "running in the background" in seen.text()
    assert (project / "marker.txt").exists() and _approvals(project) == [("once", "user")]


def test_while_a_card_waits_the_cells_live_line_says_it_waits_for_approval(started: Any,
                                                                          fake_server: FakeServer) -> None:
    kernel, _project = started()
    _touch_then_reply(fake_server, TOUCH)
    msg_id = kernel.submit("%soba make the marker")
    seen = _follow(kernel, msg_id, [{"answer": "once"}])
    waiting = [i for i, line in enumerate(seen.lines) if line.startswith("waiting for your approval · shell · ")]
    card = next(i for i, line in enumerate(seen.lines) if line.startswith("SOBA asks to run shell"))
    running = [i for i, line in enumerate(seen.lines) if line.startswith("running shell · ")]
    assert waiting and card < waiting[0], seen.lines  # under the card, the line said it waits
    assert running and running[-1] > waiting[-1], seen.lines  # and that the call runs once answered


def _clock_free(text: str) -> str:
    return re.sub(r"\b\d[\d,]* s\b", "N s", text)


#: One step of a cell as a front end meets it: ("shown", display id, text) a new display, ("update",
#: display id, text) a display changed in place, ("card", call id, "") a card is on the page (its
#: own display in a foreground cell, added to the slot in a background one), ("answer", call id, "").
Step = tuple[str, str, str]


def _card_moves(kernel: Kernel, msg_id: str, cards: int, *, until: str) -> list[Step]:
    """Cell ``msg_id``'s displays and cards, in order, until it is idle, showed ``until`` and each of
    ``cards`` cards was answered "once", a little over a second after it came (its clock moves)."""
    steps: list[Step] = []
    calls: dict[str, str] = {}  # a card's comm id -> its call id
    came: dict[str, float] = {}
    idle, deadline = False, time.monotonic() + 300

    def send(comm_id: str, content: dict[str, Any]) -> None:
        data = {"method": "custom", "content": content}
        kernel.kc.shell_channel.send(kernel.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": data}))

    def card(call: str | None) -> None:
        if call is not None and call not in came:
            steps.append(("card", call, ""))
            came[call] = time.monotonic()

    while not (idle and len(came) == cards and any(until in text for _k, _d, text in steps)):
        assert time.monotonic() < deadline, steps
        for comm_id, call in calls.items():
            if call in came and ("answer", call, "") not in steps and time.monotonic() - came[call] > 1.2:
                steps.append(("answer", call, ""))
                send(comm_id, {"answer": "once"})
        try:
            msg = kernel.kc.get_iopub_msg(timeout=0.1)
        except queue.Empty:
            continue
        content, kind = msg["content"], msg["msg_type"]
        data = content.get("data") if isinstance(content.get("data"), dict) else {}
        if kind == "status" and msg["parent_header"].get("msg_id") == msg_id:
            idle = idle or content["execution_state"] == "idle"
        elif kind in ("display_data", "update_display_data"):
            model = (data.get("application/vnd.jupyter.widget-view+json") or {}).get("model_id")
            if model in calls:  # a foreground card: displayed in the cell itself
                card(calls[model])
            else:
                steps.append(("shown" if kind == "display_data" else "update",
                              str(content.get("transient", {}).get("display_id", "")), data.get("text/plain", "")))
        elif kind == "comm_open" and isinstance(data.get("state", {}).get("request"), dict):
            calls[content["comm_id"]] = data["state"]["request"]["call_id"]
            send(content["comm_id"], {"shown": True})
        elif kind == "comm_msg" and "children" in data.get("state", {}):  # a background card added to the slot
            for child in data["state"]["children"]:
                card(calls.get(child.removeprefix("IPY_MODEL_")))
    return steps


def test_a_background_cells_board_is_sent_before_a_card_is_added_below_it_and_then_only_its_clock_moves(
        started: Any, fake_server: FakeServer) -> None:
    """A background cell's cards sit below its board (one display re-sent at most every 0.3 s). If
    the board's last state came after the card, the card would jump down while a person (or a
    browser test) clicks it, and a press and release on different elements is no click at all. So
    when a card is added the board already shows all that came before the question and that it
    waits; until the answer only its clock changes."""
    kernel, _project = started()
    _touch_then_reply(fake_server, "echo first-result", TOUCH)
    steps = _card_moves(kernel, kernel.submit("%%soba --background\nmake the marker"), 2, until="After this turn")
    for call, before in (("c0", ""), ("c1", "[ok] shell: [exit code 0]")):  # c1: c0 has run
        at = steps.index(("card", call, ""))
        board = [text for kind, _d, text in steps[:at] if kind == "update"][-1]
        assert "waiting for your approval · shell" in board and before in board, (call, board)
        while_waiting = [text for kind, _d, text in steps[at:steps.index(("answer", call, ""))] if kind == "update"]
        assert all(_clock_free(text) == _clock_free(board) for text in while_waiting), (call, board, while_waiting)


def test_nothing_shown_above_a_foreground_card_changes_while_it_waits(started: Any,
                                                                     fake_server: FakeServer) -> None:
    """A foreground cell shows the card below its output, and the live line that said "waiting for
    the model" is emptied *before* the card comes (the line goes on below the card): an output
    above a shown card that changes height would move the card under the pointer."""
    kernel, _project = started()
    _touch_then_reply(fake_server, "echo first-result", TOUCH)
    steps = _card_moves(kernel, kernel.submit("%soba make the marker"), 2, until="done")
    for call in ("c0", "c1"):
        at = steps.index(("card", call, ""))
        above = {shown for kind, shown, _t in steps[:at] if kind == "shown"}
        waiting = steps[at:steps.index(("answer", call, ""))]
        moved = [step for step in waiting if step[0] == "update" and step[1] in above]
        assert not moved, (call, moved, steps)
        waits = [text for kind, shown, text in steps[at:] if kind == "update" and shown not in above]
        assert any(text.startswith("waiting for your approval · shell") for text in waits), steps  # below it


_OPEN_ORDER = """
from ipykernel.comm.comm import BaseComm
from soba_notebook.agent.approval import ApprovalRequest
from soba_notebook.notebook.approval_card import ApprovalCard
from soba_notebook.notebook.approvals import PendingApproval
from soba_notebook.notebook.busy_comms import soba_subshell

at_open = []
publish = BaseComm.publish_msg
def recording(self, msg_type, *args, **kwargs):
    if msg_type == "comm_open" and "request" in (kwargs.get("data") or {}).get("state", {}):  # the card's
        # what a message arriving right after this would find
        at_open.append((self._msg_callback is not None, self._reply_subshell_for(None, None) == soba_subshell()))
    return publish(self, msg_type, *args, **kwargs)
BaseComm.publish_msg = recording
try:
    ApprovalCard(PendingApproval(ApprovalRequest("c1", "shell", "touch x", None, (), 300.0), "widget"))
finally:
    BaseComm.publish_msg = publish
print("AT_OPEN", at_open)
"""


def test_a_cards_comm_is_pinned_and_handled_before_the_front_end_can_learn_of_it(started: Any) -> None:
    """A front end (or this file's client) may answer the instant the ``comm_open`` arrives: by
    then the comm must have its handler and be routed to SOBA's subshell, or the answer is dropped
    (a background turn) or queued behind the busy cell (a foreground one) and the turn waits."""
    kernel, _project = started()
    status, text = kernel.run(_OPEN_ORDER)
    assert status == "ok" and "AT_OPEN [(True, True)]" in text, text


def test_a_card_no_front_end_shows_is_denied_long_before_the_timeout_saying_how_to_set_the_mode(
        started: Any, fake_server: FakeServer) -> None:
    """nbclient and papermill run a kernel with no one to click: the card's view never reports it
    rendered, so the call is denied after the shown bound (SHOWN_WITHIN_S, shortened to 2 s here through
    its environment variable), not after tools.approvalTimeoutMs."""
    kernel, project = started(shown_within_s=2, approvalTimeoutMs=3_600_000)  # an hour: it would fail long before
    _touch_then_reply(fake_server, TOUCH)
    msg_id = kernel.submit("%soba make the marker")
    seen = _follow(kernel, msg_id, [None], shown=False)
    assert len(seen.cards) == 1 and not (project / "marker.txt").exists()
    (result,) = _tool_results(project)
    assert "no front end showed the approval card within 2 s" in result and "%soba approval never" in result, result
    assert _approvals(project) == [("deny", "headless")]


def test_no_answer_denies_after_the_timeout_saying_how_to_set_the_mode(started: Any,
                                                                       fake_server: FakeServer) -> None:
    kernel, project = started(approvalTimeoutMs=1_500)
    _touch_then_reply(fake_server, TOUCH)
    msg_id = kernel.submit("%soba make the marker")
    (shown,) = _follow(kernel, msg_id, [None]).cards  # shown in a front end, never answered
    assert shown["timeout_s"] == 1.5
    assert not (project / "marker.txt").exists()
    (result,) = _tool_results(project)
    assert "no answer" in result and "%soba approval never" in result
    assert _approvals(project) == [("timeout", "timeout")]


def test_the_stop_button_cancels_a_pending_card(started: Any, fake_server: FakeServer) -> None:
    kernel, project = started()
    _touch_then_reply(fake_server, TOUCH)
    msg_id = kernel.submit("%soba make the marker")
    _follow(kernel, msg_id, [kernel.km.interrupt_kernel])  # pressed while the card waits
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
    assert "never (nothing asks" in kernel.run("%soba status")[1]


# -- terminal IPython ------------------------------------------------------------------------------

def _ipython(project: Path, home: Path) -> pexpect.spawn:
    trust_project_config(project, home)  # its config names the loopback server, as Kernel's tests trust it
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
