"""A compaction's live progress follows the summary as it streams in, and ends at 100%.

The summariser is a real model provider talking to the loopback server, which streams the capsule
in small pieces with a pause between them. The progress used to move with the share of
``timeoutMs`` elapsed only, so a summary that took a third of it stopped the bar at about 34% and
then jumped to done; now it moves with the streamed text against the capsule's expected size,
and while nothing has arrived yet it names the model it waits for.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

from agent_support import is_summary_request, make_agent
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401

from soba_notebook.compaction.progress import streamed_share
from soba_notebook.notebook.display import BudgetState

#: A capsule of a realistic size, streamed in pieces of 40 characters.
SUMMARY = json.dumps({"goal": "write the three files the user asked for, then check them",
                      "done": [f"wrote f{i}.txt with the content asked for, {'and checked it ' * 3}" for i in range(3)],
                      "nextSteps": ["tell the user the files are written"], "filesRead": [], "filesModified":
                      ["f0.txt", "f1.txt", "f2.txt"]})
PIECE = 40


def _compact(tmp_path: Path, fake_server: FakeServer, *, streams: bool = True) -> list[Any]:
    """A ``%compact`` after a short history: its progress events, start to end. ``streams``: the
    server reports usage in streams, so the provider streams (else it learns not to, from the
    history's replies, and the summary arrives whole)."""
    agent, _, events = make_agent(tmp_path, "openai", fake_server.openai_base_url,
                                  compaction={"keepRecentTokens": 200, "timeoutMs": 60_000})
    usage: dict[str, Any] = {} if streams else {"usage": False}
    q = fake_server.openai
    for i in range(3):
        q.enqueue(tool_calls=[{"id": f"w{i}", "name": "write_file",
                               "arguments": {"path": f"f{i}.txt", "content": "y " * 300}}], **usage)
    q.enqueue(text="ok", **usage)
    asyncio.run(agent.run_turn("write the files"))
    fake_server.handler = lambda path, body: {"text": SUMMARY, "text_chunk": PIECE, "delay": 0.05, **usage} \
        if is_summary_request(body) else {"text": "fine"}
    outcome = asyncio.run(agent.compact())
    assert outcome.outcome == "completed" and outcome.quality == "ok", outcome.reason
    start = max(i for i, e in enumerate(events) if e.type == "compaction_start")
    return [e for e in events[start:] if e.type in ("compaction_start", "compaction_progress", "compaction_end")]


def test_progress_follows_the_streamed_summary_and_ends_at_100(tmp_path: Path, fake_server: FakeServer) -> None:
    seen = _compact(tmp_path, fake_server)
    percents = [e["percent"] for e in seen if e.type == "compaction_progress"]
    assert percents == sorted(percents), percents
    assert percents[-1] == 100 and seen[-1].type == "compaction_end"
    streamed = [e["percent"] for e in seen if e.type == "compaction_progress" and e["phase"] == "summarize"
                and not e.get("waiting_for")]
    # the summary's band (10..80%) is crossed in steps as the pieces arrive, not in one jump at the end
    assert len(set(streamed)) >= 5, streamed
    steps = [b - a for a, b in itertools.pairwise(percents)]
    assert max(steps) <= 35, percents


def test_progress_names_the_model_until_the_summary_begins_to_arrive(tmp_path: Path,
                                                                    fake_server: FakeServer) -> None:
    seen = _compact(tmp_path, fake_server)
    progress = [e for e in seen if e.type == "compaction_progress"]
    waiting = [i for i, e in enumerate(progress) if e.get("waiting_for")]
    assert waiting and {progress[i]["waiting_for"] for i in waiting} == {"gpt-4o-mini"}
    assert waiting == list(range(waiting[0], waiting[-1] + 1)), "one wait, before the first piece"
    assert not any(e.get("waiting_for") for e in progress[waiting[-1] + 1:])
    state = BudgetState()
    lines = []
    for event in seen:
        state.apply(event)
        lines.append(state.progress_text)
    assert any(line.endswith("waiting for gpt-4o-mini") for line in lines), lines
    assert lines[-1] == "" and state.percent == 100.0


def test_the_streamed_share_is_monotone_and_never_reaches_the_end_before_the_summary() -> None:
    shares = [streamed_share(size, 1_000) for size in range(0, 10_000, 50)]
    assert shares == sorted(shares) and shares[0] == 0.0
    assert max(shares) < 1.0
    assert streamed_share(1_000, 1_000) == 0.9 and streamed_share(500, 0) == 0.0


def test_a_summary_that_arrives_whole_is_waited_for_by_name_until_it_does(tmp_path: Path,
                                                                         fake_server: FakeServer) -> None:
    seen = _compact(tmp_path, fake_server, streams=False)
    summarizing = [dict(e.data) for e in seen if e.type == "compaction_progress" and e["phase"] == "summarize"]
    waited = [e for e in summarizing if e.get("waiting_for")]
    # every step before the answer says whom it waits for; the answer itself ends the wait (at most
    # three events: the wait's end, the text's share, the summary done)
    assert waited and summarizing[:len(waited)] == waited, summarizing
    assert {e["waiting_for"] for e in waited} == {"gpt-4o-mini"} and len(summarizing) - len(waited) <= 3, summarizing
    percents = [e["percent"] for e in seen if e.type == "compaction_progress"]
    assert percents == sorted(percents) and percents[-1] == 100
