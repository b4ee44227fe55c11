"""Standing instructions (AGENTS.md, CLAUDE.md, ~/.soba/AGENTS.md) in the system prompt that is sent."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from agent_support import make_agent
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401

from soba_notebook.agent.instructions import load_instructions
from soba_notebook.tokens import TokenCounter

RULES = "Use polars, not pandas.\nNever touch data/raw."


def _sent_system(server: FakeServer, n: int = -1) -> str:
    messages = server.requests[n].body["messages"]
    return messages[0]["content"] if messages[0]["role"] == "system" else ""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ws = tmp_path / "project" / "ws"
    ws.mkdir(parents=True)
    return ws


def test_agents_md_is_in_the_sent_system_prompt_and_its_tokens_in_the_budget(project: Path, tmp_path: Path,
                                                                               fake_server: FakeServer) -> None:
    bare, _, _ = make_agent(tmp_path / "bare", "openai", fake_server.openai_base_url)
    (project / "AGENTS.md").write_text(RULES)
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    fake_server.openai.enqueue(text="ok")
    assert asyncio.run(agent.run_turn("hello")).outcome == "completed"
    system = _sent_system(fake_server)
    assert "Use polars, not pandas." in system and 'source="./AGENTS.md"' in system
    assert system.startswith("You are SOBA")  # SOBA's own prompt first: the cache-stable prefix
    tokens = agent.instructions.current.tokens
    assert tokens == agent.counter.count_text(RULES)
    # the budget's fixed part holds the instruction text and its frame, beyond an agent without one
    assert agent.engine.base_tokens - bare.engine.base_tokens >= tokens
    assert agent.reload_instructions() == f"instructions from ./AGENTS.md ({tokens} tokens)"
    assert agent.reload_instructions() is None  # said once


def test_an_edited_agents_md_is_sent_at_the_next_turn_and_said_in_one_line(project: Path, tmp_path: Path,
                                                                            fake_server: FakeServer) -> None:
    (project / "AGENTS.md").write_text(RULES)
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    agent.reload_instructions()
    fake_server.openai.enqueue(text="ok")
    asyncio.run(agent.run_turn("one"))
    (project / "AGENTS.md").write_text("Always answer in French.")
    os.utime(project / "AGENTS.md", ns=(1, 1))  # a different mtime even on a coarse clock
    before = agent.engine.base_tokens
    fake_server.openai.enqueue(text="ok")
    asyncio.run(agent.run_turn("two"))
    system = _sent_system(fake_server)
    assert "Always answer in French." in system and "polars" not in system
    assert agent.engine.base_tokens != before
    note = agent.reload_instructions()
    assert note is not None and note.startswith("instructions reloaded: ./AGENTS.md (") and "\n" not in note


def test_user_file_first_then_claude_md_only_without_agents_md(project: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".soba").mkdir(parents=True)
    (home / ".soba" / "AGENTS.md").write_text("Be brief.")
    (project / "CLAUDE.md").write_text("Claude rules.")
    count = TokenCounter("gpt-4o-mini").count_text
    loaded = load_instructions(project, home, 4000, count)
    assert [f.label for f in loaded.files] == ["~/.soba/AGENTS.md", "./CLAUDE.md"]
    (project / "AGENTS.md").write_text("Agents rules.")
    loaded = load_instructions(project, home, 4000, count)
    assert [f.label for f in loaded.files] == ["~/.soba/AGENTS.md", "./AGENTS.md"]
    assert "Claude rules." not in loaded.system_text()
    assert load_instructions(project, home, 0, count).files == ()  # 0 switches them off


def test_instructions_over_the_bound_are_clipped_with_a_marker_and_a_warning(project: Path, tmp_path: Path,
                                                                             fake_server: FakeServer) -> None:
    (project / "AGENTS.md").write_text("\n".join(f"rule {i}: keep the tests green" for i in range(400)))
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    agent.set_config(agent.config.with_overrides({"agent": {"instructionsMaxTokens": 200}}))
    note = agent.reload_instructions()
    loaded = agent.instructions.current
    assert loaded.tokens <= 200 and loaded.files[0].clipped_from is not None
    assert "clipped here" in loaded.files[0].text and "agent.instructionsMaxTokens" in loaded.files[0].text
    assert note is not None and "warning: ./AGENTS.md is" in note and "clipped" in note
    assert "rule 0:" in agent.system_prompt() and "rule 399:" not in agent.system_prompt()


def test_a_project_agents_md_linking_out_of_the_project_is_not_read(project: Path, tmp_path: Path) -> None:
    secret = tmp_path / "elsewhere.txt"
    secret.write_text("private notes")
    (project / "AGENTS.md").symlink_to(secret)
    loaded = load_instructions(project, tmp_path / "home", 4000, TokenCounter("gpt-4o-mini").count_text)
    assert loaded.files == ()
    assert "private notes" not in loaded.system_text()
    assert "./AGENTS.md not loaded: a link out of" in loaded.describe()


def test_soba_status_lists_the_instruction_files_and_their_tokens(project: Path, tmp_path: Path,
                                                                  fake_server: FakeServer) -> None:
    from soba_notebook.notebook.cellview import status_lines

    (project / "AGENTS.md").write_text(RULES)
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    described = agent.instructions.current.describe()
    assert described == f"./AGENTS.md ({agent.counter.count_text(RULES)} tokens)"
    assert any(line.startswith("instructions") and line.endswith(described)
               for line in status_lines({"instructions": described}))
