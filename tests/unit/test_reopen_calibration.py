"""A reopened session measures what the kernel that wrote it measured (issue 20 item 7).

The token calibration (the ratio of the provider's reported prompt sizes to SOBA's estimate) is
learned in memory; right after a compaction the budget is an estimate through it. A fresh agent on
the same session relearns it from the usage the transcript recorded (``soba_notebook/relearn.py``),
so its figure and its last compaction are the old agent's. The loopback server counts prompts its own
way (a quarter of the messages' JSON, the tool schemas three times as verbosely), far from SOBA's
tokenizer, as a real server's differs.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agent_support import is_summary_request
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401  (the `fake_server` fixture)
from kernel_support import trust_project_config

from soba_notebook.agent.project import AgentHandle, open_agent
from soba_notebook.relearn import relearn_calibration
from soba_notebook.session.entries import Usage, assistant_message, tool_result, user_message
from soba_notebook.session.store import SessionStore
from soba_notebook.tokens import REPLY_PRIMING, TokenCounter

NOTES = "The parser reads tokens from the lexer and builds a tree of nodes; each node keeps its source span. " * 30


def _project(tmp_path: Path, base_url: str) -> Path:
    project = tmp_path / "project"
    (project / ".soba").mkdir(parents=True)
    (project / ".soba" / "config.json").write_text(json.dumps({
        "model": {"provider": "openai", "model": "gpt-4o-mini", "baseUrl": base_url, "apiKeyEnv": "SOBA_TEST_KEY"},
        "compaction": {"auto": False, "keepRecentTokens": 300},
        "tools": {"workspace": str(project)}}))
    trust_project_config(project, tmp_path / "home")  # the HOME the tests set
    (project / "notes.txt").write_text(NOTES)
    return project


def _server_count(body: dict[str, Any]) -> int:
    """The loopback server's prompt count: a quarter of the messages' JSON, and the tool schemas
    rendered three times as verbosely (as llama-cpp-python's function-calling format renders them)."""
    return len(json.dumps(body["messages"])) // 4 + 3 * (len(json.dumps(body.get("tools", []))) // 4)


def _reader(path: str, body: dict[str, Any]) -> dict[str, Any]:
    """Reads notes.txt once per turn, then answers; a summary request gets a capsule."""
    if is_summary_request(body):
        return {"text": json.dumps({"goal": "read the notes", "nextSteps": ["answer questions about them"]})}
    usage = {"prompt_tokens": _server_count(body)}
    last = body["messages"][-1]
    if last["role"] == "user":
        return {"tool_calls": [{"id": f"call_{len(body['messages'])}", "name": "read_file",
                                "arguments": {"path": "notes.txt"}}], "usage": usage}
    return {"text": "I read the notes.", "usage": usage}


def _run(handle: AgentHandle, *prompts: str, compact: bool = False) -> Any:
    async def scenario() -> Any:
        try:
            for prompt in prompts:
                result = await handle.agent.run_turn(prompt)
                assert result.outcome == "completed", result
            return await handle.agent.compact() if compact else None
        finally:
            await handle.agent.provider.aclose()
    return asyncio.run(scenario())


def test_a_reopened_session_shows_the_old_agents_figure_and_last_compaction_after_a_compaction(
        tmp_path: Path, fake_server: FakeServer, monkeypatch: Any) -> None:
    monkeypatch.setenv("SOBA_TEST_KEY", "k" * 16)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    fake_server.handler = _reader
    project = _project(tmp_path, fake_server.openai_base_url)
    old = open_agent(project)
    done = _run(old, "Read the notes", "Read them again", "And once more", compact=True)
    assert done.outcome == "completed", done.reason
    ratio = old.agent.counter.calibration.ratio("gpt-4o-mini")
    assert abs(ratio - 1) > 0.05, f"the server counts like SOBA ({ratio}): nothing to relearn"
    before = old.agent.engine.publish()
    assert before.source == "estimated" and before.effective == done.tokens_after
    old.close()

    fresh = open_agent(project, session=old.store.id)
    try:
        after = fresh.agent.engine.publish()
    finally:
        fresh.close()
    assert after.last_compaction is not None and after.last_compaction["checkpoint_id"] == done.checkpoint_id
    assert after.effective == before.effective, (before.effective, after.effective)

    # and the next request is sized alike by both: the relearned ratio is the old one
    assert fresh.agent.counter.calibration.ratio("gpt-4o-mini") == ratio


def test_relearning_replays_each_reply_as_the_live_agent_took_it_whole_request_then_spans(tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path / "sessions")
    counter = TokenCounter("gpt-4o-mini")
    head = [store.append(user_message("hello there " * 20)),
            store.append(assistant_message("no usage reported: it teaches nothing", context_key="root")),
            store.append(user_message("more words " * 40))]
    a = store.append(assistant_message("answer", usage=Usage(500, 10), context_key="root"))
    result = store.append(tool_result("c1", "read_file", "x " * 100))
    store.append(assistant_message("again", usage=Usage(700, 10), context_key="root"))
    store.append(assistant_message("counted by SOBA", usage=Usage(900, 10, counted=True), context_key="root"))

    relearned = relearn_calibration(store, counter, base_tokens=50, capsule_tokens=lambda e: 0)
    assert relearned.samples == 2

    expected = TokenCounter("gpt-4o-mini")
    # the first reply's whole request: base, the entries before it, the reply priming
    expected.observe_usage(50 + sum(expected.count_entry(e) for e in head) + REPLY_PRIMING, 500, whole=True)
    # the next one: the span since the previous reply against the growth of the reported prompt
    expected.observe_usage(expected.count_entry(a) + expected.count_entry(result), 200)
    assert counter.calibration.ratio("gpt-4o-mini") == expected.calibration.ratio("gpt-4o-mini") != 1.0
    # the anchor: the latest reported prompt and the raw estimate of the request it answered
    assert relearned.anchor == (700, 50 + sum(expected.count_entry(e) for e in (*head, a, result)) + REPLY_PRIMING)


def test_a_compactions_after_figure_is_the_servers_count_of_the_next_request_though_tools_count_differently(
        tmp_path: Path, fake_server: FakeServer, monkeypatch: Any) -> None:
    """The loopback server counts the tool schemas as a quarter of their JSON, unlike the messages:
    a calibration learned on message spans, applied to the whole request, missed its count of the
    request after a compaction; sized against the last reported prompt, it does not."""
    monkeypatch.setenv("SOBA_TEST_KEY", "k" * 16)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    fake_server.handler = _reader
    project = _project(tmp_path, fake_server.openai_base_url)
    handle = open_agent(project)
    done = _run(handle, "Read the notes", "Read them again", "And once more", compact=True)
    assert done.outcome == "completed", done.reason
    ratio = handle.agent.counter.calibration.ratio("gpt-4o-mini")
    after_capsule = len(handle.store.path())
    _run(handle, "Read the notes one last time")
    handle.close()
    appended = [e for e in handle.store.path()[after_capsule:] if e.is_model_input]
    reply = next(e for e in appended if e.role == "assistant")
    added = sum(handle.agent.counter.count_entry(e) for e in appended[:appended.index(reply)])
    assert reply.usage is not None
    expected = done.tokens_after + round(added * ratio)
    error = abs(expected - reply.usage.prompt_tokens) / reply.usage.prompt_tokens
    assert error <= 0.01, (done.tokens_after, added, reply.usage.prompt_tokens, error)
