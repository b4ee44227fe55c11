"""A real kernel: magics run during a background turn change the agent only on its thread, where they say.

A ``%%soba --background`` turn's first request is held open by a loopback server. Meanwhile
other cells run ``%soba checkpoint``, ``%auto_compact off``, ``%soba approval never``, ``%soba
status`` and a second background turn with ``--model``: each cell returns while the request is
still held (a magic that waited for the agent would hang until the release), says when its change
applies, and the transcript and the requests the server saw show it applied exactly there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from kernel_support import Kernel, fake_server_project
from unit.test_agent_thread_owns_changes import HeldFirstRequest

from soba_notebook.session import SessionStore, list_sessions

#: Long enough for any cell on a loaded machine; a magic that blocked on the held turn would wait
#: for the release, which comes only after every cell below has returned.
CELL_SECONDS = 60


def _run(kernel: Kernel, code: str) -> str:
    status, text = kernel.run(code, timeout=CELL_SECONDS)
    assert status == "ok", text
    return text


def test_magics_during_a_background_turn_change_the_agent_on_its_thread_where_they_say(
        tmp_path: Path, fake_server: FakeServer) -> None:
    script = HeldFirstRequest(hold_seconds=600)
    fake_server.handler = script
    project = fake_server_project(tmp_path, fake_server.openai_base_url)
    kernel = Kernel(project, tmp_path / "home", env={"SOBA_TEST_KEY": "k" * 12}, approval="edits")
    try:
        _run(kernel, "%%soba --background\nlook around")
        assert script.held.wait(CELL_SECONDS), "the background turn's first request is in flight"
        checkpoint = _run(kernel, '%soba checkpoint milestone "parser fixed"')
        auto = _run(kernel, "%auto_compact off")
        approval = _run(kernel, "%soba approval never")
        status = _run(kernel, "%soba status")
        second = _run(kernel, "%%soba --background --model other-model\nagain")
        assert not script.release.is_set() and script.count == 1, "every cell returned under the held request"
        assert "milestone applies from the running turn's next step" in checkpoint
        assert "auto-compaction off" in auto and "applies from the running turn's next step" in auto
        assert "approval: never" in approval and "applies from the running turn's next step" in approval
        assert "as the running job last measured it" in status
        assert "model other-model: from this turn on (the running turn keeps its model)" in second
        script.release.set()
        _run(kernel, "%soba -- last")  # queued behind the background turns: they have ended when it returns
        status = _run(kernel, "%soba status")
        pending = next(line for line in status.splitlines() if line.startswith("pending intents"))
        assert "measured now" in status and "milestone" in pending, status
    finally:
        script.release.set()
        kernel.close()
    models = [request.body["model"] for request in fake_server.requests]
    assert models == ["gpt-4o-mini", "gpt-4o-mini", "other-model", "other-model"], models
    (info,) = list_sessions(project / ".soba" / "sessions")
    path = SessionStore.open(info.path).path()

    def at(found: Any) -> int:
        return next(i for i, e in enumerate(path) if found(e))

    tool_result = at(lambda e: e.role == "tool")
    second_reply = at(lambda e: e.role == "assistant" and e.text == "reply 2")
    milestone = at(lambda e: e.type == "checkpoint")
    auto_off = at(lambda e: e.type == "config" and "compaction.auto" in e.data.get("changes", {}))
    never = at(lambda e: e.type == "config" and "tools.approval" in e.data.get("changes", {}))
    assert tool_result < milestone < auto_off < never < second_reply, "between the running turn's steps, in order"
    model = at(lambda e: e.type == "config" and "model.model" in e.data.get("changes", {}))
    assert second_reply < model < at(lambda e: e.role == "user" and e.text == "again"), "between the turns"
