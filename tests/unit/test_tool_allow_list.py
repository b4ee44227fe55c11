"""tools.enabled / tools.disabled: a small model is offered only the tools it can use, and a config
that makes a trigger impossible in its window says so in one line at open."""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path

import pytest
from agent_support import make_agent
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401

from soba_notebook.agent.tools import ToolContext, default_tools
from soba_notebook.agent.window_fit import fit_warnings
from soba_notebook.config import TOOL_NAMES, ConfigWarning, SobaConfig, ToolsConfig, load_config
from soba_notebook.errors import ConfigError

SMALL = ["read_file", "list_files", "grep"]


def test_tool_names_known_to_the_config_are_the_registry_tools() -> None:
    assert set(default_tools(ToolsConfig()).names()) == set(TOOL_NAMES)


def test_unknown_tool_name_is_refused_at_load_with_the_nearest_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(home=tmp_path, project_dir=tmp_path, overrides={"tools": {"enabled": ["read_fil"]}})
    assert "tools.enabled" in str(err.value) and "'read_fil' is not a tool" in str(err.value)
    assert "did you mean 'read_file'?" in str(err.value)
    with pytest.raises(ConfigError, match="expected a list of tool names"):
        load_config(home=tmp_path, project_dir=tmp_path, overrides={"tools": {"disabled": "shell"}})


def test_allow_list_is_honoured_in_the_request_and_counted_in_the_budget(tmp_path: Path,
                                                                         fake_server: FakeServer) -> None:
    full, _, _ = make_agent(tmp_path / "full", "openai", fake_server.openai_base_url)
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url, tools={"enabled": SMALL})
    fake_server.openai.enqueue(text="ok")
    asyncio.run(agent.run_turn("hello"))
    sent = [t["function"]["name"] for t in fake_server.requests[-1].body["tools"]]
    assert sent == SMALL
    # the fixed part of the budget is smaller by exactly the schemas not offered (the two system
    # prompts differ only in their workspace paths)
    withheld = full.counter.count_tools(full.tools.specs()) - agent.counter.count_tools(agent.tools.specs())
    paths = full.counter.count_text(full.system_prompt()) - agent.counter.count_text(agent.system_prompt())
    assert withheld > 0 and full.engine.base_tokens - agent.engine.base_tokens == withheld + paths


def test_disabled_wins_over_enabled_and_a_withheld_tool_is_refused_by_name(tmp_path: Path) -> None:
    config = ToolsConfig(workspace=str(tmp_path), enabled=("read_file", "shell"), disabled=("shell",))
    registry = default_tools(config)
    assert registry.names() == ("read_file",)
    outcome = asyncio.run(registry.run("shell", {"command": "true"}, ToolContext(tmp_path, config)))
    assert outcome.is_error and "not offered" in outcome.content and "tools.enabled" in outcome.content


def _small(**compaction: int) -> SobaConfig:
    return SobaConfig().with_overrides({"model": {"contextWindow": 4096, "maxOutputTokens": 512},
                                        "compaction": {"safetyReserveTokens": 512, "keepRecentTokens": 1000,
                                                       "minTokensForAutoCompact": 2000, **compaction}})


def test_soft_compaction_that_can_never_reclaim_enough_is_named_with_a_working_value() -> None:
    lines = fit_warnings(_small(), fixed_tokens=800)  # the seed's minReclaimableTokens 12,000
    assert len(lines) == 1 and "compaction.minReclaimableTokens 12,000 can never be reclaimed" in lines[0]
    working = (3072 - 800 - 1000) // 2
    assert f"set compaction.minReclaimableTokens to {working:,}" in lines[0]
    assert fit_warnings(_small(minReclaimableTokens=working), fixed_tokens=800) == ()


def test_a_fixed_prompt_over_its_share_of_the_window_names_tools_enabled() -> None:
    lines = fit_warnings(_small(minReclaimableTokens=100), fixed_tokens=2700)
    assert any("tools.enabled" in line and "of model.contextWindow 4,096" in line for line in lines)


def test_the_seed_defaults_fit_their_own_window() -> None:
    assert fit_warnings(SobaConfig(), fixed_tokens=3000) == ()


def test_an_agent_opened_on_a_config_that_cannot_soft_compact_warns_once(tmp_path: Path,
                                                                         fake_server: FakeServer) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url,
                                 model={"contextWindow": 8192, "maxOutputTokens": 1024},
                                 compaction={"safetyReserveTokens": 1024, "keepRecentTokens": 2000,
                                             "minTokensForAutoCompact": 4000})
    said = [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]
    assert len(said) == 1 and "compaction.minReclaimableTokens" in said[0] and agent.fit_notes == tuple(said)
