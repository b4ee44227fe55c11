"""Issue 13, item 4: one secret scrubber for every file soba writes, spill files scrubbed before they
are written, and a secret variable set after the agent started scrubbed from the next turn on."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from agent_support import make_agent
from compaction_support import FakeSummarizer, capsules, fill, make_engine, small_config
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401

from soba_notebook.agent.tools import ToolContext, default_tools
from soba_notebook.compaction import Capsule, EngineParts, TurnState
from soba_notebook.flight import FlightRecorder
from soba_notebook.providers.failures import redact
from soba_notebook.session.entries import user_message

LATE = "late-" + "7c1e9a4b2d8f6e3a5b0c"


def _files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def test_spilled_output_is_scrubbed_before_it_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", LATE)
    ctx = ToolContext(tmp_path)
    code = "import os\nprint((os.environ['MY_SERVICE_TOKEN'] + '\\n') * 3000)"
    out = asyncio.run(default_tools(ctx.config).run("python", {"code": code}, ctx))
    spill = out.data["spill_path"]
    text = (tmp_path / spill).read_text()
    assert LATE not in text and "[REDACTED:MY_SERVICE_TOKEN]" in text
    assert LATE not in out.content


def test_a_secret_set_after_the_agent_started_is_scrubbed_at_the_next_turn(
        tmp_path: Path, fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    monkeypatch.setenv("LATE_TOKEN", LATE)  # like %env LATE_TOKEN=... in the notebook
    fake_server.openai.enqueue(tool_calls=[{"id": "a", "name": "python", "arguments": {
        "code": "import os\nprint((os.environ['LATE_TOKEN'] + '\\n') * 3000)"}}])
    fake_server.openai.enqueue(text="done")
    asyncio.run(agent.run_turn(f"the token is {LATE}"))
    files = _files_under(tmp_path / "project")  # sessions, flight records, ws/.soba/outputs
    assert any("outputs" in f.parts for f in files)
    for f in files:
        assert LATE not in f.read_text(errors="replace"), f"secret leaked into {f}"
    assert "[REDACTED:LATE_TOKEN]" in agent.store.file.read_text()


def test_flight_records_are_scrubbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DB_PASSWORD", LATE)
    rec = FlightRecorder(tmp_path / "flight.jsonl", "s1")
    rec.record("compaction", {"reason": f"provider said {LATE} and Bearer abcdef123456"})
    text = (tmp_path / "flight.jsonl").read_text()
    assert LATE not in text and "[REDACTED:DB_PASSWORD]" in text and "[REDACTED:bearer_token]" in text


def test_provider_errors_scrub_environment_secrets_token_shapes_and_the_given_keys(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", LATE)
    message = f"upstream echoed {LATE} and key sk-proj-abcdefghijklmnop1234 and given-key-0123"
    out = redact(message, ("given-key-0123",))
    assert LATE not in out and "sk-proj" not in out and "given-key" not in out
    assert "[REDACTED:MY_SERVICE_TOKEN]" in out and "[REDACTED:openai_key]" in out


def test_a_capsule_passes_the_scrubber_once_as_it_is_appended_and_keeps_no_secret(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", LATE)
    request = "deploy with the MY_SERVICE_TOKEN token from the environment"
    # the goal is the user's request (grounded), with the token's value the model filled in echoed into it
    summary = Capsule(goal=f"{request}: {LATE}", next_steps=(f"rotate {LATE}",))
    scrubbed: list[Any] = []
    default = EngineParts().scrub
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), FakeSummarizer(answer=lambda _: summary),
                                   scrub=lambda value: scrubbed.append(value) or default(value))
    store.append(user_message(request))
    fill(store, 14000)
    asyncio.run(engine.preflight(TurnState()))
    (cap,) = capsules(store)
    assert len(scrubbed) == 1 and "state" in scrubbed[0]  # once, the whole entry's data, at append
    assert LATE not in store.file.read_text() and "[REDACTED:MY_SERVICE_TOKEN]" in cap.data["state"]["goal"]
