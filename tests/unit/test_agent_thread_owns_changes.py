"""Only the agent's thread changes the agent and its engine (``soba_notebook/ownership.py``).

With the real runtime and a loopback server that holds the running turn's first request open:
a change made from another thread raises at once, and one handed to the agent's thread applies
where it said, between jobs or at the running turn's next step, never under a request.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from agent_support import make_agent
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401

from soba_notebook.agent import Agent, AgentRuntime
from soba_notebook.notebook.agent_changes import change_agent
from soba_notebook.ownership import WrongThread

LIST = {"id": "c1", "name": "list_files", "arguments": {"path": "."}}


class HeldFirstRequest:
    """The loopback server's replies: the first request is held until ``release`` (at most
    ``hold_seconds``), then asks for a read-only tool; every later request answers with text."""

    def __init__(self, hold_seconds: float = 60) -> None:
        self.held = threading.Event()
        self.release = threading.Event()
        self.hold_seconds = hold_seconds
        self.count = 0

    def __call__(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.count += 1
        if self.count == 1:
            self.held.set()
            self.release.wait(self.hold_seconds)
            return {"tool_calls": [LIST]}
        return {"text": f"reply {self.count}"}


def _set(agent: Agent, section: str, key: str, value: Any) -> None:
    agent.set_config(agent.config.with_overrides({section: {key: value}}))


def test_set_config_and_record_intent_off_the_agents_thread_raise_once_a_runtime_owns_the_agent(
        tmp_path: Path, fake_server: FakeServer) -> None:
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    before = agent.config
    _set(agent, "compaction", "auto", True)  # no runtime yet: the calling thread owns it (scripts, tests)
    runtime = AgentRuntime(agent)
    try:
        with pytest.raises(WrongThread, match="set_config"):
            _set(agent, "compaction", "auto", False)
        assert agent.config == before and agent.engine.config == before, "nothing changed before the refusal"
        with pytest.raises(WrongThread, match="record_intent"):
            agent.engine.record_intent("milestone", "from the wrong thread")
        assert not agent.engine.intents.pending()
        # the same changes, as jobs, run on the agent's thread
        assert change_agent(runtime, lambda: agent.engine.record_intent("milestone", "as a job"), "intent").result
        assert [i.note for i in agent.engine.intents.pending()] == ["as a job"]
    finally:
        runtime.close()


def test_a_running_turn_keeps_its_model_and_takes_step_changes_only_between_its_steps(
        tmp_path: Path, fake_server: FakeServer) -> None:
    agent, provider, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    script = HeldFirstRequest()
    fake_server.handler = script
    runtime = AgentRuntime(agent)
    try:
        turn = runtime.submit("look around")
        assert script.held.wait(30), "the turn's first request is in flight"
        model = change_agent(runtime, lambda: _set(agent, "model", "model", "other-model"), "model")
        intent = change_agent(runtime, lambda: agent.engine.record_intent("milestone", "posted"), "ck", at_step=True)
        auto = change_agent(runtime, lambda: _set(agent, "compaction", "auto", False), "auto", at_step=True)
        assert (model.when, intent.when, auto.when) == ("next_turn", "next_step", "next_step")
        assert agent.config.compaction.auto is True and agent.config.model.model == "gpt-4o-mini", \
            "nothing changed under the request in flight"
        script.release.set()
        assert turn.future.result(60).outcome == "completed"
        assert runtime.submit("again").future.result(60).outcome == "completed"
    finally:
        script.release.set()
        runtime.close()
    assert [r.model for r in provider.sent] == ["gpt-4o-mini", "gpt-4o-mini", "other-model"]
    path = agent.store.path()
    kinds = [(e.type, e.role, dict(e.data.get("changes", {})) if e.type == "config" else None) for e in path]
    result = next(i for i, e in enumerate(path) if e.role == "tool")
    auto_at = kinds.index(("config", None, {"compaction.auto": False}))
    second_reply = next(i for i, e in enumerate(path) if e.role == "assistant" and e.text == "reply 2")
    assert result < auto_at < second_reply, "auto-compaction changed between the turn's steps"
    model_at = kinds.index(("config", None, {"model.model": "other-model"}))
    second_prompt = next(i for i, e in enumerate(path) if e.role == "user" and e.text == "again")
    assert second_reply < model_at < second_prompt, "the model changed between the turns"
    # the intent was recorded on the agent's thread at that step, before auto-compaction went off (the
    # posts apply in their order); with the soft triggers off it is still pending, not lost
    assert [(i.trigger.value, i.note) for i in agent.engine.intents.pending()] == [("milestone", "posted")]
