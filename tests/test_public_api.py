"""The public surface: names that say what they are, and exactly what docs/API.md lists."""

from __future__ import annotations

import importlib
import importlib.util
import types

import pytest


def test_the_session_subpackage_is_not_shadowed_by_a_function() -> None:
    import soba_notebook
    import soba_notebook.session as session_package

    assert isinstance(session_package, types.ModuleType) and session_package.SessionStore is soba_notebook.SessionStore
    assert isinstance(soba_notebook.session, types.ModuleType)
    assert "current_store" in soba_notebook.__all__


def test_opening_an_agent_on_a_project_lives_in_agent_project_not_a_third_thing_called_session() -> None:
    from soba_notebook.agent import open_agent

    assert open_agent.__module__ == "soba_notebook.agent.project"
    assert importlib.util.find_spec("soba_notebook.agent.session") is None


def test_current_store_says_how_to_load_the_extension_outside_a_kernel() -> None:
    import soba_notebook

    with pytest.raises(RuntimeError, match="%load_ext soba_notebook"):
        soba_notebook.current_store()


def test_a_user_tool_and_a_user_provider_plug_into_open_agent_through_public_names_only(tmp_path) -> None:
    """The extension points of docs/API.md: a Provider of your own, a tool of your own, open_agent."""
    import asyncio

    from soba_notebook.agent import open_agent
    from soba_notebook.agent.tools import Tool, ToolResult, ToolSpec, default_tools
    from soba_notebook.config import load_config
    from soba_notebook.providers import ModelResponse, Provider
    from soba_notebook.session import ToolCall, Usage

    class TwoStepModel:
        name, label, offline = "mine", "my model", False

        def __init__(self) -> None:
            self.requests = []

        async def complete(self, request, *, on_event=None):
            self.requests.append(request)
            if len(self.requests) == 1:
                return ModelResponse("", (ToolCall("c1", "shout", {"word": "hi"}),), Usage(input=50, output=5),
                                     "tool_use", "mine")
            return ModelResponse("done", (), Usage(input=80, output=2), "stop", "mine")

        async def aclose(self) -> None:
            pass

    async def shout(args, ctx) -> ToolResult:
        return ToolResult(args["word"].upper() + "!", data={"loud": True})

    model = TwoStepModel()
    assert isinstance(model, Provider)
    config = load_config(home=tmp_path / "home", project_dir=tmp_path, overrides={"tools": {"workspace": "."}})
    shout_tool = Tool(ToolSpec("shout", "Shout a word.", {"type": "object", "properties": {"word": {"type": "string"}},
                                                          "required": ["word"]}), shout)
    tools = default_tools(config.tools)
    tools.register(shout_tool)
    handle = open_agent(tmp_path, config=config, provider=model, tools=tools)
    result = asyncio.run(handle.agent.run_turn("shout hi"))
    assert result.outcome == "completed" and result.text == "done"
    assert "shout" in [spec.name for spec in model.requests[0].tools]
    results = [e for e in handle.store.entries() if e.role == "tool"]
    assert [e.text for e in results] == ["HI!"]
    assert handle.paths.sessions == tmp_path.resolve() / ".soba" / "sessions"
