"""SOBA's own tool protocol (``model.toolProtocol``, providers/tool_protocol.py): on a server whose
chat template drops tools, the definitions go into the system prompt, each answer is constrained to
one JSON tool call or a reply, results go back as user messages, and the transcript keeps its
canonical form. Loopback tests on the fake server (request shape and parsing);
``tests/realmodel/test_realmodel_llama_server.py`` runs the same on the real llama-server.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from agent_support import make_agent
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401

from soba_notebook.config import ConfigWarning, load_config
from soba_notebook.errors import ConfigError
from soba_notebook.providers import OpenAIChatProvider
from soba_notebook.providers.base import ModelRequest, StreamEvent, ToolSpec
from soba_notebook.providers.factory import make_provider
from soba_notebook.providers.tool_protocol import parse_step, step_schema, to_protocol_messages, tools_prompt
from soba_notebook.tokens import MESSAGE_OVERHEAD
from unit.test_server_renders import NO_TOOLS_PROPS, _chatml

READ = ToolSpec("read_file", "Read a text file.", {
    "type": "object", "properties": {"path": {"type": "string", "description": "Relative path."},
                                     "start_line": {"type": "integer"}},
    "required": ["path"], "additionalProperties": False})


def _system(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"]) if body["messages"][0]["role"] == "system" else ""


# -- the config key ------------------------------------------------------------------------------

def test_tool_protocol_takes_auto_native_or_json_and_a_bad_value_is_named_with_the_choices(tmp_path: Path) -> None:
    assert load_config(home=tmp_path, project_dir=tmp_path).model.tool_protocol == "auto"
    for value in ("native", "json"):
        config = load_config(home=tmp_path, project_dir=tmp_path, overrides={"model": {"toolProtocol": value}})
        assert config.model.tool_protocol == value
    for bad in ("xml", True, 1):
        with pytest.raises(ConfigError) as error:
            load_config(home=tmp_path, project_dir=tmp_path, overrides={"model": {"toolProtocol": bad}})
        assert "model.toolProtocol" in str(error.value) and "auto, native, json" in str(error.value)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)  # a known key: no "unknown key" warning
        load_config(home=tmp_path, project_dir=tmp_path, overrides={"model": {"toolProtocol": "json"}})


def test_the_model_block_hands_the_tool_protocol_to_the_openai_compatible_provider() -> None:
    provider = make_provider({"provider": "llamacpp", "model": "m", "toolProtocol": "json"})
    assert isinstance(provider, OpenAIChatProvider) and provider.tool_protocol == "json"
    with pytest.raises(ConfigError, match=r"toolProtocol = .grammar. is not allowed: expected one of auto, native"):
        make_provider({"provider": "llamacpp", "model": "m", "toolProtocol": "grammar"})


# -- the request ---------------------------------------------------------------------------------

def test_the_step_schema_allows_exactly_one_call_with_the_tools_own_parameters_or_a_reply() -> None:
    schema = step_schema([READ])
    call, reply = schema["anyOf"]
    assert call["properties"]["tool"] == {"const": "read_file"}
    assert call["properties"]["arguments"] == READ.parameters
    assert call["required"] == ["tool", "arguments"] and call["additionalProperties"] is False
    assert reply["properties"] == {"reply": {"type": "string"}} and reply["required"] == ["reply"]


def test_the_tool_definitions_are_readable_text_with_every_parameter_and_the_answer_form() -> None:
    text = tools_prompt([READ])
    assert "## read_file\nRead a text file." in text
    assert "- path (string, required): Relative path." in text and "- start_line (integer)" in text
    assert '{"tool": "TOOL_NAME", "arguments": {...}}' in text and '{"reply": "your answer"}' in text


def test_calls_and_results_go_as_text_the_template_renders_and_adjacent_user_messages_are_joined() -> None:
    messages = [
        {"role": "user", "content": "read it"},
        {"role": "assistant", "content": "", "toolCalls": [
            {"id": "c1", "name": "read_file", "arguments": {"path": "a.txt"}},
            {"id": "c2", "name": "read_file", "arguments": {}, "rawArguments": "{\"path\": "}]},
        {"role": "tool", "toolCallId": "c1", "name": "read_file", "content": "alpha"},
        {"role": "tool", "toolCallId": "c2", "name": "read_file", "content": "bad json", "isError": True},
    ]
    wire = to_protocol_messages("You are SOBA.", messages, [READ])
    assert [m["role"] for m in wire] == ["system", "user", "assistant", "user"]
    assert wire[0]["content"].startswith("You are SOBA.\n\n# Tools")
    assert wire[2]["content"] == ('{"tool": "read_file", "arguments": {"path": "a.txt"}}\n'
                                  '{"tool": "read_file", "arguments": {"path": }')
    assert wire[3]["content"] == ("Result of tool read_file (call c1):\nalpha\n\n"
                                  "Error from tool read_file (call c2):\nbad json")
    assert all("tool_calls" not in m for m in wire)


def test_a_server_that_drops_tools_gets_them_in_the_system_prompt_and_a_one_step_schema(
        tmp_path: Path, fake_server: FakeServer) -> None:
    fake_server.get_routes["/props"] = NO_TOOLS_PROPS
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    fake_server.openai.enqueue(text='{"reply": "hi"}')
    asyncio.run(agent.run_turn("hello"))
    body = fake_server.requests[-1].body
    assert "tools" not in body and "tool_choice" not in body
    assert all(f"## {spec.name}\n" in _system(body) for spec in agent.tools.specs())
    form = body["response_format"]
    assert form["type"] == "json_schema" and form["json_schema"]["name"] == "soba_step"
    names = [c["properties"].get("tool", {}).get("const") for c in form["json_schema"]["schema"]["anyOf"]]
    assert names == [spec.name for spec in agent.tools.specs()] + [None]


def test_json_forced_on_a_server_that_renders_tools_and_native_forced_on_one_that_does_not(
        tmp_path: Path, fake_server: FakeServer) -> None:
    fake_server.openai.enqueue(text='{"reply": "hi"}')
    forced, _, _ = make_agent(tmp_path / "a", "openai", fake_server.openai_base_url, model={"toolProtocol": "json"})
    asyncio.run(forced.run_turn("hello"))
    assert "tools" not in fake_server.requests[-1].body and "# Tools" in _system(fake_server.requests[-1].body)
    fake_server.get_routes["/props"] = NO_TOOLS_PROPS
    fake_server.openai.enqueue(text="hi")
    native, recorded, _ = make_agent(tmp_path / "b", "openai", fake_server.openai_base_url,
                                     model={"toolProtocol": "native"})
    asyncio.run(native.run_turn("hello"))
    body = fake_server.requests[-1].body
    assert body["tools"] and "response_format" not in body and "# Tools" not in _system(body)
    [note] = [w for w in recorded.inner.warnings if "does not show tools" in w]
    assert 'model.toolProtocol to "json"' in note


# -- the round trip ------------------------------------------------------------------------------

def test_a_protocol_call_runs_the_tool_its_result_reaches_the_next_request_and_the_transcript_is_canonical(
        tmp_path: Path, fake_server: FakeServer) -> None:
    fake_server.get_routes["/props"] = NO_TOOLS_PROPS
    agent, _, events = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    (agent.workspace / "code.txt").write_text("The code word is juniper4821.\n")
    fake_server.openai.enqueue(text='{"tool": "read_file", "arguments": {"path": "code.txt"}}')
    fake_server.openai.enqueue(text='{"reply": "juniper4821"}')
    result = asyncio.run(agent.run_turn("Read code.txt and reply with the code word"))
    assert result.outcome == "completed", result

    entries = agent.store.path()
    [call_entry, reply_entry] = [e for e in entries if e.role == "assistant"]
    [call] = call_entry.tool_calls
    assert (call.name, dict(call.arguments), call_entry.text) == ("read_file", {"path": "code.txt"}, "")
    assert call.id.startswith("call_")
    [result_entry] = [e for e in entries if e.role == "tool"]
    assert result_entry.message["toolCallId"] == call.id and "juniper4821" in result_entry.text
    assert reply_entry.text == "juniper4821" and not reply_entry.tool_calls

    second = fake_server.requests[-1].body
    assert all(m["role"] in ("system", "user", "assistant") for m in second["messages"])
    assert second["messages"][-2] == {"role": "assistant",
                                      "content": '{"tool": "read_file", "arguments": {"path": "code.txt"}}'}
    last = second["messages"][-1]
    assert last["role"] == "user" and last["content"].startswith(f"Result of tool read_file (call {call.id}):\n")
    assert "juniper4821" in last["content"]
    shown = "".join(str(e.data.get("text", "")) for e in events if e.type == "message_delta")
    assert "juniper4821" in shown and '{"reply"' not in shown and '{"tool"' not in shown, \
        "the reply is shown, the raw protocol JSON never"


def test_the_estimate_counts_the_tool_text_that_is_sent_and_the_exact_count_renders_the_protocol_request(
        tmp_path: Path, fake_server: FakeServer) -> None:
    fake_server.get_routes["/props"] = NO_TOOLS_PROPS
    native, _, _ = make_agent(tmp_path / "a", "openai", fake_server.openai_base_url, model={"toolProtocol": "native"})
    fake_server.openai.enqueue(text="ok")
    asyncio.run(native.run_turn("hello"))
    protocol, _, _ = make_agent(tmp_path / "b", "openai", fake_server.openai_base_url)
    fake_server.openai.enqueue(text='{"reply": "ok"}')
    asyncio.run(protocol.run_turn("hello"))
    [a], [b] = ([e.message["estimatedInput"] for e in agent.store.path() if e.role == "assistant"]
                for agent in (native, protocol))
    system = protocol.system_prompt()
    sent = _system(fake_server.requests[-1].body)
    counter = protocol.counter
    assert b - a == counter.count_text(sent) - counter.count_text(system) > 500, \
        "the estimate grows by exactly the tool text the system prompt carries"

    fake_server.post_routes["/apply-template"] = lambda body: _chatml(body, with_tools=False)
    fake_server.post_routes["/tokenize"] = lambda body: {"tokens": list(range(len(body["content"]) // 4))}
    counted, _, _ = make_agent(tmp_path / "c", "openai", fake_server.openai_base_url)
    fake_server.openai.enqueue(text='{"reply": "ok"}')
    asyncio.run(counted.run_turn("hello"))
    [rendered] = [body for path, body in fake_server.other_posts if path == "/apply-template"
                  and body["messages"][0]["content"] != "probe"]
    assert rendered["messages"] == fake_server.requests[-1].body["messages"] and "tools" not in rendered


def test_on_the_json_path_a_call_and_its_result_are_counted_as_the_protocol_sends_them(
        tmp_path: Path, fake_server: FakeServer) -> None:
    # The protocol sends a call as the model's JSON text and a result as a "Result of tool ..."
    # user message; counted from the canonical entries instead, a later request on the real
    # llama-server was 3.5% under the server's count (issue 22).
    fake_server.get_routes["/props"] = NO_TOOLS_PROPS
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    (agent.workspace / "code.txt").write_text("The code word is juniper4821.\n" * 20)
    fake_server.openai.enqueue(text='{"tool": "read_file", "arguments": {"path": "code.txt"}}')
    fake_server.openai.enqueue(text='{"reply": "juniper4821"}')
    assert asyncio.run(agent.run_turn("Read code.txt and reply with the code word")).outcome == "completed"
    sent_call, sent_result = fake_server.requests[-1].body["messages"][-2:]
    [call_entry] = [e for e in agent.store.path() if e.role == "assistant" and e.tool_calls]
    [result_entry] = [e for e in agent.store.path() if e.role == "tool"]
    counter = agent.counter
    for entry, sent in ((call_entry, sent_call), (result_entry, sent_result)):
        assert counter.count_entry(entry) == MESSAGE_OVERHEAD + counter.count_text(sent["content"]), sent


# -- reading the answer --------------------------------------------------------------------------

def test_an_answer_that_is_not_protocol_json_is_kept_as_a_plain_text_reply() -> None:
    assert parse_step("Hello there.").text == "Hello there." and not parse_step("Hello there.").valid
    assert parse_step('{"answer": 1}').text == '{"answer": 1}'
    assert parse_step('{"reply": "the word is amb').text == "the word is amb", "a reply cut at max_tokens"
    assert parse_step('{"reply": "caf\\u00e').text == "caf", "an escape cut mid-way"
    fenced = parse_step('```json\n{"tool": "glob", "arguments": {"pattern": "*"}}\n```')
    assert (fenced.tool, json.loads(fenced.arguments)) == ("glob", {"pattern": "*"})


def test_the_provider_streams_the_reply_text_once_and_never_the_raw_json(fake_server: FakeServer) -> None:
    provider = OpenAIChatProvider("m", base_url=fake_server.openai_base_url, tool_protocol="json", probe=False)
    request = ModelRequest(model="m", system="s", messages=({"role": "user", "content": "hi"},), tools=(READ,))
    seen: list[StreamEvent] = []

    async def ask(text: str, **options: Any) -> Any:
        fake_server.openai.enqueue(text=text, text_chunk=3, **options)
        return await provider.complete(request, on_event=seen.append)

    async def go() -> tuple[Any, Any, Any]:
        try:
            return (await ask('{"reply": "hello there"}'), await ask('{"tool": "read_file", "arguments": {"path": 7}}'),
                    await ask('{"reply": "cut sh', finish_reason="length"))
        finally:
            await provider.aclose()

    reply, call, cut = asyncio.run(go())
    assert [e.data["text"] for e in seen if e.kind == "text"] == ["hello there", "cut sh"]
    assert (reply.text, reply.tool_calls, reply.stop_reason) == ("hello there", (), "stop")
    [made] = call.tool_calls
    assert (made.name, dict(made.arguments), call.stop_reason) == ("read_file", {"path": 7}, "tool_use")
    assert [e.data["name"] for e in seen if e.kind == "tool_call_start"] == ["read_file"]
    assert (cut.text, cut.stop_reason) == ("cut sh", "length")
