"""JupyterLab shows the kernel Busy for as long as a foreground ``%soba`` cell runs (issue 20).

Lab's status bar shows the execution state of the *last* ``status`` message on iopub, whatever
request it answers, except the message types jupyter_server leaves untracked. While a foreground
turn runs, Lab's widget manager asks the kernel for a subshell (``create_subshell_request`` on
the control channel, when the budget widget first appears); ipykernel answers it on its control
thread with ``busy`` then ``idle``, and Lab showed "Idle" for the rest of the turn. The cell now
says ``busy`` again, with its own parent header, after any other request's ``idle``.

A real kernel and a loopback model server that holds its reply until the control request was
answered: nothing is timed.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401  (the `fake_server` fixture)
from kernel_support import fake_server_project

from kernel.test_kernel_background_cell import RecordingKernel

#: jupyter_server's default ``untracked_message_types`` that answer requests: statuses with these
#: parents never change what Lab shows
UNTRACKED = {"comm_info_request", "kernel_info_request", "shutdown_request", "interrupt_request", "debug_request"}


def _lab_status(messages: list[dict[str, Any]], until: str) -> list[tuple[str, str]]:
    """What Lab's status bar shows after each tracked status message, up to the idle of the cell ``until``:
    (state, parent msg_type) pairs."""
    shown = []
    for msg in messages:
        if msg["msg_type"] != "status":
            continue
        parent = msg["parent_header"]
        if parent.get("msg_type") in UNTRACKED:
            continue
        shown.append((msg["content"]["execution_state"], str(parent.get("msg_type"))))
        if parent.get("msg_id") == until and msg["content"]["execution_state"] == "idle":
            break
    return shown


def test_lab_sees_the_kernel_busy_until_a_foreground_turn_ends_though_a_control_request_was_answered_meanwhile(
        tmp_path: Path, fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOBA_TEST_KEY", "k" * 16)  # the kernel's environment is this process's
    release = threading.Event()

    def held_reply(path: str, body: dict[str, Any]) -> dict[str, Any]:
        release.wait(120)  # the model answers once the control request was answered
        return {"text": "done"}

    fake_server.handler = held_reply
    project = fake_server_project(tmp_path, fake_server.openai_base_url)
    kernel = RecordingKernel(project, tmp_path / "home")
    try:
        cell = kernel.submit("%soba say done")
        assert fake_server.wait_for_requests(1, timeout=120), "the turn's request reached the model server"
        request = kernel.kc.session.msg("create_subshell_request", {})
        kernel.kc.control_channel.send(request)
        reply = kernel.kc.control_channel.get_msg(timeout=60)
        assert reply["parent_header"]["msg_id"] == request["header"]["msg_id"]
        release.set()
        status, text = kernel.wait(cell)
    finally:
        release.set()
        kernel.close()
    assert status == "ok", text
    started = next(i for i, m in enumerate(kernel.messages) if m["msg_type"] == "status"
                   and m["parent_header"].get("msg_id") == cell)
    shown = _lab_status(kernel.messages[started:], until=cell)
    assert ("idle", "create_subshell_request") in shown, "the control request was answered during the turn"
    # Lab went back to Busy after the other request's idle, and stayed there until the cell's own idle
    assert shown[-1] == ("idle", "execute_request"), shown
    assert shown[-2][0] == "busy", shown
    answered = shown.index(("idle", "create_subshell_request"))
    assert shown[answered + 1] == ("busy", "execute_request"), shown
