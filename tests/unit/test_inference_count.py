"""The budget widget counts every inference of the session (issue 20: "1 inference" after two turns).

The widget keeps one sparkline point per inference and labels it "N inferences"; a later
``budget`` event for the same inference replaces its point (after a compaction, or when a display
asks while idle). The events numbered an inference within its turn, so the first inference of
every turn was "inference 0" and replaced the previous turn's point: two one-reply turns on the
loopback server showed "1 inference". The number is now the inference's in the agent's life.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from agent_support import make_agent
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401  (the `fake_server` fixture)

from soba_notebook.notebook.display import BudgetState


def test_two_one_reply_turns_are_two_inferences_in_the_budget_display(tmp_path: Path,
                                                                       fake_server: FakeServer) -> None:
    fake_server.openai.enqueue(text="first answer")
    fake_server.openai.enqueue(text="second answer")
    fake_server.openai.enqueue(tool_calls=[{"id": "c1", "name": "list_files", "arguments": {}}])
    fake_server.openai.enqueue(text="third answer, after a tool")
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    state = BudgetState()
    agent.bus.subscribe(state.apply)

    async def turns() -> None:
        try:
            for prompt in ("one", "two", "three"):
                assert (await agent.run_turn(prompt)).outcome == "completed"
            agent.engine.publish()  # a display asking while idle: the same inference, not a new one
        finally:
            await agent.provider.aclose()

    asyncio.run(turns())
    assert len(fake_server.requests) == 4
    history = state.snapshot()["history"]
    assert len(history) == 4, history
    assert [p["inference"] for p in history] == [1, 2, 3, 4]
