"""The public surface: names that say what they are, and exactly what docs/API.md lists."""

from __future__ import annotations

import importlib
import importlib.util
import re
import types
from pathlib import Path

import pytest

API = Path(__file__).resolve().parents[2] / "docs" / "API.md"


def documented_names() -> dict[str, list[str]]:
    """docs/API.md: module (a ``## `module` `` heading) -> the names of its ``- `name` —`` lines."""
    out: dict[str, list[str]] = {}
    module = None
    for line in API.read_text().splitlines():
        heading = re.match(r"^## `(soba_notebook[\w.]*)`", line)
        if heading:
            module = heading[1]
            out[module] = []
        elif module and (item := re.match(r"^- `(\w+)` — ", line)):
            out[module].append(item[1])
    return out


def test_docs_api_lists_each_public_module_with_exactly_the_names_of_its_all() -> None:
    documented = documented_names()
    assert {"soba_notebook", "soba_notebook.views", "soba_notebook.notebook.magics", "soba_notebook.agent",
            "soba_notebook.agent.tools", "soba_notebook.providers"} <= set(documented)
    for module_name, names in documented.items():
        module = importlib.import_module(module_name)
        assert len(names) == len(set(names)), f"{module_name}: a name is listed twice in docs/API.md"
        assert set(names) == set(module.__all__), f"{module_name}: docs/API.md and __all__ differ"
        missing = [n for n in module.__all__ if not hasattr(module, n)]
        assert missing == [], f"{module_name}.__all__ names what it does not define: {missing}"


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
