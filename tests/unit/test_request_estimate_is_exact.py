"""The budget check's size of a request is the request's exact size when nothing else is known:
the offline model counts with the same tokenizer and SOBA learns no calibration from it, so the
two agree to the token. The system prompt is a message like any other and its overhead counts:
the estimate was 3 tokens short of every request, and the soak sent 9 of 8,033 requests 1-3
tokens over the hard limit."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agent_support import RecordingProvider

from soba_notebook.agent import open_agent
from soba_notebook.demo.scripted import ScriptedModel


def test_the_estimate_of_every_agent_request_is_its_exact_count_on_the_offline_model(tmp_path: Path) -> None:
    provider = RecordingProvider(ScriptedModel())
    handle = open_agent(tmp_path, provider=provider,  # type: ignore[arg-type]
                        overrides={"tools": {"approval": "never"}})  # no one answers here
    result = asyncio.run(handle.agent.run_turn("start the demo"))
    assert result.outcome == "completed"
    sent = [r for r in provider.sent if r.purpose == "agent"]
    assert len(sent) >= 2
    assert [r.estimated_input_tokens for r in sent] == [ScriptedModel.count_input(r) for r in sent]
