"""Compaction sized by the server, not the config (issue 22, items 3 and 4).

A loopback llama.cpp-like server whose ``/props`` says its context is 4,096 tokens while
``model.contextWindow`` says 32,000. It counts every request as a tokenizer of its own would (the
request's JSON, a little more than SOBA's estimate), refuses one whose prompt and ``max_tokens``
do not fit its context with llama.cpp's own overflow error, and reports its count in ``usage``:

* every summary request of the overflow recovery fits the server's context, and the model's
  capsule is used (not the ``degraded`` fallback);
* the one retry fits, and the next short turn after the recovery does not overflow again;
* a schema-constrained summary's schema bounds fit the output budget it is given.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent_support import is_summary_request, make_agent
from fakeserver import FakeServer, _json_reply
from fakeserver import fake_server_fixture as fake_server_fixture  # the fixture

from soba_notebook.compaction.summarize import capsule_schema, smallest_capsule_schema
from soba_notebook.compaction.summary_budget import WORST_CHARS_PER_TOKEN, schema_output_tokens
from soba_notebook.tokens import TokenCounter

N_CTX = 4096
COUNTER = TokenCounter("gpt-4o-mini")
CAPSULE = {"goal": "read the notes", "done": ["read notes.txt"], "nextSteps": ["answer the user"]}


def server_tokens(body: Mapping[str, Any]) -> int:
    """The fake server's own count of a request's prompt: its messages and tools as JSON."""
    return COUNTER.count_text(json.dumps([body.get("messages"), body.get("tools")], ensure_ascii=False))


class SmallServer:
    """A llama.cpp-like server with a 4,096-token context (see the module docstring)."""

    def __init__(self, server: FakeServer) -> None:
        self.sizes: list[tuple[str, int]] = []  # (purpose, prompt + max_tokens) of every request
        self.overflows = 0
        server.get_routes["/props"] = {"default_generation_settings": {"n_ctx": N_CTX},
                                       "chat_template_caps": {"supports_tools": True}}
        server.handler = self.handle

    def handle(self, path: str, body: Mapping[str, Any]) -> Any:
        prompt = server_tokens(body)
        purpose = "summary" if is_summary_request(dict(body)) else "agent"
        self.sizes.append((purpose, prompt + int(body.get("max_tokens") or 0)))
        if prompt + int(body.get("max_tokens") or 0) > N_CTX:
            self.overflows += 1
            return _json_reply(400, {"error": {
                "code": 400, "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error", "n_prompt_tokens": prompt, "n_ctx": N_CTX}})
        usage = {"prompt_tokens": prompt, "completion_tokens": 20}
        if purpose == "summary":
            return {"text": json.dumps(CAPSULE), "usage": usage}
        messages = list(body.get("messages", []))
        last_user = max((i for i, m in enumerate(messages)
                         if m.get("role") == "user" and "context_capsule" not in str(m.get("content"))), default=0)
        if "read" in str(messages[last_user].get("content")) and not any(
                m.get("role") == "tool" for m in messages[last_user:]):
            return {"tool_calls": [{"id": f"call_{len(messages)}", "name": "read_file",
                                    "arguments": {"path": "notes.txt"}}], "usage": usage}
        return {"text": "noted", "usage": usage}


def test_the_overflow_recovery_sizes_its_summary_and_its_retry_by_the_servers_context_and_leaves_room_for_the_next_turn(
        tmp_path: Path, fake_server: FakeServer) -> None:
    small = SmallServer(fake_server)
    agent, _, _ = make_agent(
        tmp_path, "openai", fake_server.openai_base_url,
        model={"contextWindow": 32_000, "maxOutputTokens": 256},
        compaction={"auto": False, "compactOnTurnComplete": False, "keepRecentTokens": 400,
                    "safetyReserveTokens": 256, "timeoutMs": 10_000})
    (agent.workspace / "notes.txt").write_text("\n".join(f"note {i}: the parser keeps the span of token {i}."
                                                         for i in range(40)))
    results = []
    for n in range(6):  # each turn reads the notes again: the context grows past the server's
        results.append(asyncio.run(agent.run_turn(f"read notes.txt ({n})")))
        if small.overflows:
            break
    assert small.overflows == 1, "the history outgrew the server's context once"
    assert results[-1].outcome == "completed", results[-1]
    after = asyncio.run(agent.run_turn("thanks, that is all"))
    assert after.outcome == "completed", after

    summaries = [size for purpose, size in small.sizes if purpose == "summary"]
    assert summaries and max(summaries) <= N_CTX, summaries
    assert small.overflows == 1, "neither the retry nor the next short turn overflowed"
    capsules = [e for e in agent.store.entries() if e.type == "capsule"]
    assert [c.data["trigger"] for c in capsules] == ["context_overflow"]
    assert capsules[0].data["quality"] != "degraded", capsules[0].data
    # the retry and the turn after it left room: each under the server's context with its reply
    agent_sizes = [size for purpose, size in small.sizes if purpose == "agent"]
    rejected = next(i for i, size in enumerate(agent_sizes) if size > N_CTX)
    # the retry, the steps it still takes (a tool call when the kept tail ends on the request) and the next
    # turn: at least two requests, every one under the server's context with its reply
    assert len(agent_sizes[rejected + 1:]) >= 2 and max(agent_sizes[rejected + 1:]) <= N_CTX, agent_sizes
    summary_bodies = [r.body for r in fake_server.requests if is_summary_request(r.body)]
    assert all(b["max_tokens"] == N_CTX // 4 for b in summary_bodies), "sized to the server's window"


def test_a_constrained_capsule_filled_to_its_schema_bounds_fits_the_output_budget_it_is_given() -> None:
    for budget in (600, 1024, 2000, 4000):
        schema = capsule_schema(budget)
        filled = _filled(schema)
        # at two characters per token: denser than any prose a small model writes under a grammar
        assert len(json.dumps(filled, indent=1)) / WORST_CHARS_PER_TOKEN <= budget * 1.1, budget
        assert schema_output_tokens(schema) <= budget, budget
    assert schema_output_tokens(smallest_capsule_schema()) <= 600


def _filled(schema: Mapping[str, Any]) -> Any:
    """The largest JSON value ``schema`` allows: every string at its maxLength, every list full."""
    kind = schema["type"]
    if kind == "string":
        return max(schema["enum"], key=len) if "enum" in schema else "x" * schema["maxLength"]
    if kind == "array":
        return [_filled(schema["items"]) for _ in range(schema["maxItems"])]
    return {key: _filled(value) for key, value in schema["properties"].items()}


class _CappedCounter(TokenCounter):
    """Counts its calls and stops a clip loop that makes no progress (instead of hanging the suite)."""

    calls = 0

    def count_text(self, text: str) -> int:
        self.calls += 1
        if self.calls > 100:
            raise AssertionError("the clip loop is making no progress")
        return super().count_text(text)


def test_an_entry_a_little_over_a_tiny_summary_budget_is_clipped_in_a_few_steps_never_forever() -> None:
    # found by bench/bench_soak.py, which hung here: a 16k window whose rolled state left no room
    # (budget floored at 50 tokens) and a 216-character reply of 52 tokens; the omission marker
    # added back what each clip removed, so the text never got shorter
    from soba_notebook.compaction.summarize import _fit

    history = ("[assistant f3417c614fc141af]\n[offline scripted model] Review finished: the calculator project "
               "is built, its tests pass and the script has nothing more to build. To start over, delete "
               "`calc_demo/` and send any prompt.")
    counter = _CappedCounter("soba-scripted")
    assert counter.count_text(history) > 50
    for budget in (0, 30, 50):
        counter.calls = 0
        clipped = _fit(history, budget, counter)
        assert len(clipped) < len(history) and counter.calls <= 5
