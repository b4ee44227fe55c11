"""What a capsule says the user said, decided or should do next is grounded in the history (issue 39,
items 1-3). The summarizer is a real provider talking to a loopback server (tests/fakeserver.py)
whose answer invents a user constraint, a decision on a file never touched and a next step copied
from the prompt's instructions; the agent, session, barrier, views and completion line are real."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agent_support import make_agent
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401

from soba_notebook import views
from soba_notebook.compaction.capsule import Capsule, render
from soba_notebook.memory.portable import PortableCapsule, export_text, load_text
from soba_notebook.notebook.display import CompactionSummary

REQUEST = "Fix the failing parser test in parser.py. Do not touch tests/fixtures."
LATER = "thanks, and keep the public API of parse_rows unchanged"


def _calls(*calls: tuple[str, str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"id": i, "name": n, "arguments": a} for i, n, a in calls]


def _compact_with(tmp_path: Path, fake_server: FakeServer, answer: dict[str, Any], *,
                  last: str | None = "ok") -> tuple[Any, Any]:
    """The history compacted with the model's ``answer``; ``last``: a final user turn, kept in the tail
    (``None``: none, so the tail is LATER's answer alone and LATER is the latest request summarized)."""
    agent, _, _events = make_agent(tmp_path, "openai", fake_server.openai_base_url, compaction={"keepRecentTokens": 10})
    (agent.workspace / "parser.py").write_text("def parse_rows(text):\n    return []\n")
    q = fake_server.openai
    q.enqueue(tool_calls=_calls(("r1", "read_file", {"path": "parser.py"})))
    q.enqueue(tool_calls=_calls(("s1", "shell", {"command": "python3 -c 'print(1)'"})))
    q.enqueue(text="The parser reads rows. " * 150 + "\nNext: add a test for empty rows")
    assert asyncio.run(agent.run_turn(REQUEST)).outcome == "completed"
    # a long last word: the local capsule carries 300 characters of it as active work
    q.enqueue(text="You are welcome. " + "The parser handles every row it is given. " * 20)
    assert asyncio.run(agent.run_turn(LATER)).outcome == "completed"
    if last is not None:
        q.enqueue(text="You are welcome again.")
        assert asyncio.run(agent.run_turn(last)).outcome == "completed"  # LATER is summarized, not kept
    q.enqueue(text=json.dumps(answer))
    outcome = asyncio.run(agent.compact())
    assert outcome.outcome == "completed", outcome.reason
    return agent, outcome


INVENTIVE = {
    "goal": "Fix the failing parser test in parser.py",
    "constraints": ["User: Run the command: python3 -m argparse -c", "The user.git has no git-support",
                    "User: do not touch tests/fixtures"],
    "decisions": [{"what": "Rewrite src/legacy_loader.py as a class", "why": "cleaner"},
                  {"what": "Keep parse_rows returning a list", "why": "the user asked for a stable API"}],
    "nextSteps": ["concrete next steps", "Add a test for empty rows in parser.py"],
    "blockers": [], "done": ["read parser.py"], "active": [], "pending": [], "filesRead": ["parser.py"],
    "filesModified": [], "verification": [], "activeSkills": [], "artifacts": []}


def test_an_invented_user_constraint_and_a_decision_on_an_untouched_file_are_dropped_and_counted_by_field(
        tmp_path: Path, fake_server: FakeServer) -> None:
    answer = {**INVENTIVE, "nextSteps": ["Add a test for empty rows in parser.py"]}
    agent, outcome = _compact_with(tmp_path, fake_server, answer)
    data = outcome.entry.data
    state = data["state"]
    assert "User: Run the command: python3 -m argparse -c" not in state["constraints"]
    assert "The user.git has no git-support" not in state["constraints"]
    assert "User: do not touch tests/fixtures" in state["constraints"]  # what the user did say stays
    assert [d["what"] for d in state["decisions"]] == ["Keep parse_rows returning a list"]
    assert data["ungroundedByField"] == {"constraints": 2, "decisions": 1}
    assert data["ungroundedClaims"] == 3 == outcome.ungrounded_claims
    # dropped, the rest grounded and complete: ok, and the counts are shown
    assert data["quality"] == outcome.quality == "ok"
    frame = views.capsules(agent.store)
    assert frame["ungrounded_by_field"].tolist() == ["constraints 2, decisions 1"]
    line = CompactionSummary.from_event(outcome.to_event()).text
    assert "3 model claims the history does not support dropped (constraints 2, decisions 1)" in line


def test_a_next_step_copied_from_the_prompts_instructions_makes_the_capsule_partial_with_the_reason(
        tmp_path: Path, fake_server: FakeServer) -> None:
    answer = {**INVENTIVE, "constraints": [], "decisions": []}
    agent, outcome = _compact_with(tmp_path, fake_server, answer)
    data = outcome.entry.data
    assert "concrete next steps" not in data["state"]["nextSteps"]
    assert data["quality"] == outcome.quality == "partial"
    assert "an echo of the prompt's instructions" in data["note"] and "nextSteps 1" in data["note"]
    frame = views.capsules(agent.store)
    assert frame["quality"].tolist() == ["partial"] and "nextSteps 1" in frame["note"].iloc[0]
    line = CompactionSummary.from_event(outcome.to_event()).text
    assert "partial" in line and "nextSteps 1" in line


def test_a_grounded_complete_summary_is_ok_and_keeps_the_latest_request_verbatim(
        tmp_path: Path, fake_server: FakeServer) -> None:
    answer = {**INVENTIVE, "constraints": ["User: do not touch tests/fixtures"],
              "decisions": [{"what": "Keep parse_rows returning a list", "why": "stable API"}],
              "nextSteps": ["Add a test for empty rows in parser.py"]}
    _agent, outcome = _compact_with(tmp_path, fake_server, answer, last=None)
    data = outcome.entry.data
    assert data["quality"] == "ok" and data["ungroundedClaims"] == 0 and "ungroundedByField" not in data
    assert outcome.entry.data["firstKeptEntryId"] is not None  # LATER's answer is the tail: no user message
    assert data["state"]["latestRequest"] == LATER
    capsule = Capsule.from_json(data["state"])
    assert f"## Latest user request (verbatim)\n{LATER}" in render(capsule)
    line = CompactionSummary.from_event(outcome.to_event()).text
    assert "partial" not in line and "ungrounded" not in line


def test_a_capsule_has_no_latest_request_when_the_retained_tail_shows_the_users_latest_request(
        tmp_path: Path, fake_server: FakeServer) -> None:
    answer = {**INVENTIVE, "nextSteps": ["Add a test for empty rows in parser.py"]}
    agent, outcome = _compact_with(tmp_path, fake_server, answer, last="now run the parser test once more")
    assert "latestRequest" not in outcome.entry.data["state"]
    model_input = json.dumps(agent.engine.model_messages())
    assert "## Latest user request (verbatim)" not in model_input
    assert model_input.count("now run the parser test once more") == 1  # the tail's message, shown once


def test_a_goal_no_user_message_supports_is_replaced_by_the_users_own_words(
        tmp_path: Path, fake_server: FakeServer) -> None:
    answer = {**INVENTIVE, "goal": "Migrate the project to Rust", "constraints": [], "decisions": [],
              "nextSteps": ["Add a test for empty rows in parser.py"]}
    _, outcome = _compact_with(tmp_path, fake_server, answer)
    data = outcome.entry.data
    assert data["state"]["goal"] == REQUEST
    assert data["ungroundedByField"] == {"goal": 1}


def test_a_rejected_partial_capsule_falls_back_to_the_smaller_deterministic_capsule(
        tmp_path: Path, fake_server: FakeServer) -> None:
    # a partial answer padded with long decisions about real files: larger than the local capsule
    padded = [{"what": f"Keep parse_rows in parser.py as step {i}", "why": "parser.py " * 60} for i in range(8)]
    answer = {**INVENTIVE, "decisions": padded, "nextSteps": ["concrete next steps"], "constraints": []}
    _agent, outcome = _compact_with(tmp_path, fake_server, answer)
    data = outcome.entry.data
    assert data["quality"] == "degraded"
    assert "the model's capsule was rejected (partial" in data["note"]
    assert "smaller local deterministic capsule was used" in data["note"]
    assert not any("step 3" in d["what"] for d in data["state"]["decisions"])


def test_the_latest_request_round_trips_through_a_portable_capsule() -> None:
    capsule = Capsule(goal="g", latest_request="Please:\n  fix `parse_rows`\n\n— and \"quote\" it ")
    pc = PortableCapsule(id="cap_1", title="t", created="2025-01-01T00:00:00.000Z", source_session=None,
                         source_checkpoint=None, trigger="user", quality="ok", token_count=1, capsule=capsule)
    assert load_text(export_text(pc)) == pc
    assert "latestRequest" not in Capsule(goal="g").to_json()  # absent when empty: older hashes still hold
