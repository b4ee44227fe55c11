"""A long session on the offline scripted model: real tools, real compactions, real flight records."""

from __future__ import annotations

import asyncio
import collections
import json
import subprocess
from pathlib import Path

from agent_support import RecordingProvider

from soba_notebook.agent import open_agent
from soba_notebook.demo.scenario import DEMO_PROMPTS
from soba_notebook.demo.scripted import ScriptedModel
from soba_notebook.flight import read_flight_records
from soba_notebook.session.context import build_context, pair_problems
from unit.test_flight_spellings import keys_of


def test_scripted_session_of_30_plus_inferences_triggers_auto_turn_complete_and_milestone(tmp_path: Path) -> None:
    (tmp_path / ".soba").mkdir()
    (tmp_path / ".soba" / "config.json").write_text(json.dumps({
        "model": {"contextWindow": 16000, "maxOutputTokens": 1000},
        "compaction": {"safetyReserveTokens": 1000, "keepRecentTokens": 3000, "minTokensForAutoCompact": 4000,
                       "minReclaimableTokens": 1000}}))
    provider = RecordingProvider(ScriptedModel())
    handle = open_agent(tmp_path, provider=provider, overrides={"tools": {"approval": "never"}})  # no one to ask
    agent = handle.agent
    inferences = 0
    for prompt in [*DEMO_PROMPTS, "Anything left to do?", "Anything else?"]:
        result = asyncio.run(agent.run_turn(prompt))
        assert result.outcome == "completed", result.error
        inferences += result.inferences
    assert inferences >= 30

    records = read_flight_records(handle.paths.flight)
    on_disk = [json.loads(line) for line in handle.paths.flight.read_text().splitlines()]
    assert {r["kind"] for r in on_disk} >= {"budget", "compaction"}
    assert not sorted({k for r in on_disk for k in keys_of(r) if "_" in k}), "the flight file is camelCase only"
    compactions = [r for r in records if r["kind"] == "compaction"]
    completed = collections.Counter(r["trigger"] for r in compactions if r["outcome"] == "completed")
    assert completed["auto_threshold"] >= 1
    assert completed["turn_complete"] >= 1
    assert completed["milestone"] >= 1
    for r in compactions:
        assert r["outcome"] in ("completed", "skipped", "cancelled", "stale", "failed")
        for key in ("operation_id", "trigger", "hard_limit", "soft_limit", "duration_ms", "tokens_before",
                    "tokens_after", "reclaimed_tokens", "checkpoint_id", "source"):
            assert key in r
        if r["outcome"] == "completed":
            assert r["tokens_after"] < r["tokens_before"] and r["checkpoint_id"].startswith("ck_")
    assert sum(1 for r in records if r["kind"] == "budget") >= inferences
    capsule_texts = [json.dumps(e.data["state"]) for e in handle.store.entries() if e.type == "capsule"]
    flight_text = handle.paths.flight.read_text()
    assert all(text[20:80] not in flight_text for text in capsule_texts), "no summary text in flight records"

    hard = agent.config.hard_limit
    for request in (r for r in provider.sent if r.purpose == "agent"):
        assert provider.request_tokens(request, agent.counter) <= hard, "a request over the hard limit was sent"
    assert pair_problems(build_context(handle.store.path()).messages) == []

    # the work itself is real: the package the model built passes its own tests
    project = agent.workspace / "calc_demo"
    run = subprocess.run(["python3", "-m", "unittest", "discover", "-s", "tests"], cwd=project,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]


def test_the_offline_model_says_what_and_where_before_writing_and_never_writes_over_an_existing_file(
        tmp_path: Path) -> None:
    mine = "# my own ops module, not the demo's\nVALUE = 1\n"
    (tmp_path / "calc_demo" / "calc").mkdir(parents=True)
    (tmp_path / "calc_demo" / "calc" / "ops.py").write_text(mine)
    handle = open_agent(tmp_path, provider=ScriptedModel(), overrides={"tools": {"approval": "never"}})
    result = asyncio.run(handle.agent.run_turn("create hello.py that prints hi"))
    assert result.outcome == "completed", result.error
    replies = [e for e in handle.store.path() if e.role == "assistant"]
    first_write = next(i for i, e in enumerate(replies) if any(c.name == "write_file" for c in e.tool_calls))
    before = " ".join(e.text for e in replies[:first_write])
    assert "I will not do what you asked" in before and "`calc_demo/`" in before
    assert "never write over an existing file" in before
    assert (tmp_path / "calc_demo" / "calc" / "ops.py").read_text() == mine
    written = {c.arguments["path"] for e in replies for c in e.tool_calls if c.name == "write_file"}
    assert all(p.startswith("calc_demo/") for p in written), written
