"""The Anthropic Messages wire against the loopback fake server, and its message conversion."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
from fakeserver import FakeServer, Reply, fake_server_fixture  # noqa: F401
from hypothesis import given, settings
from hypothesis import strategies as st

from soba_notebook.errors import AuthError, ContextOverflowError, ProviderError
from soba_notebook.providers import AnthropicProvider, ModelRequest, StreamEvent, ToolSpec
from soba_notebook.providers.anthropic import CONTINUE_NOTE, to_anthropic_messages
from soba_notebook.providers.base import ModelResponse, repair_tool_pairing
from soba_notebook.providers.openai import to_openai_messages
from soba_notebook.session.entries import Usage

READ_FILE = ToolSpec("read_file", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}})


def request(*messages: Mapping[str, Any], tools: tuple[ToolSpec, ...] = (), system: str = "be brief",
            max_output_tokens: int = 512, temperature: float | None = None) -> ModelRequest:
    msgs = messages or ({"role": "user", "content": "hi"},)
    return ModelRequest("claude-test", system, tuple(msgs), tools, max_output_tokens, temperature)


def run(server: FakeServer, req: ModelRequest, events: list[StreamEvent] | None = None,
        **options: Any) -> ModelResponse:
    options.setdefault("api_key", "sk-ant-test-key")

    async def go() -> ModelResponse:
        provider = AnthropicProvider("claude-test", base_url=server.anthropic_base_url, **options)
        try:
            return await provider.complete(req, on_event=events.append if events is not None else None)
        finally:
            await provider.aclose()

    return asyncio.run(go())


def texts(events: list[StreamEvent], kind: str = "text") -> list[str]:
    return [e.data["text"] for e in events if e.kind == kind]


# -- streaming ---------------------------------------------------------------------------------------

def test_text_arrives_as_deltas_and_pings_are_ignored(fake_server: FakeServer) -> None:
    fake_server.anthropic.enqueue(text=["Hel", "lo"], ping=True)
    events: list[StreamEvent] = []
    response = run(fake_server, request(), events)
    assert [e.kind for e in events] == ["text", "text", "usage"]
    assert texts(events) == ["Hel", "lo"]
    assert response.text == "Hello"
    assert response.stop_reason == "stop"
    assert response.model == "claude-sonnet-4-20250514"
    assert response.provider == "anthropic"


def test_request_has_version_key_header_system_max_tokens_and_input_schema(fake_server: FakeServer) -> None:
    fake_server.anthropic.enqueue(text="ok")
    run(fake_server, request(tools=(READ_FILE,), max_output_tokens=777, temperature=0.0))
    path, headers, body = fake_server.requests[0]
    assert path == "/v1/messages"
    assert headers["x-api-key"] == "sk-ant-test-key"
    assert headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in headers
    assert body["stream"] is True
    assert body["max_tokens"] == 777
    assert body["temperature"] == 0.0
    assert body["system"] == [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}]
    assert body["tools"] == [{"name": "read_file", "description": "Read a file",
                              "input_schema": dict(READ_FILE.parameters)}]
    assert body["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}]


def test_consecutive_requests_reuse_the_connection(fake_server: FakeServer) -> None:
    fake_server.anthropic.enqueue(text="one")
    fake_server.anthropic.enqueue(text="two")

    async def go() -> list[str]:
        provider = AnthropicProvider("claude-test", base_url=fake_server.anthropic_base_url, api_key="k")
        try:
            return [(await provider.complete(request())).text for _ in range(2)]
        finally:
            await provider.aclose()

    assert asyncio.run(go()) == ["one", "two"]
    assert fake_server.connections_opened == 1


def test_prompt_caching_markers_can_be_turned_off(fake_server: FakeServer) -> None:
    fake_server.anthropic.enqueue(text="ok")
    run(fake_server, request(), cache_prompts=False)
    body = fake_server.requests[0].body
    assert body["system"] == [{"type": "text", "text": "be brief"}]
    assert "cache_control" not in str(body)


def test_fragmented_tool_use_input_is_reassembled_for_parallel_calls(fake_server: FakeServer) -> None:
    calls = [{"id": "toolu_01", "name": "read_file", "arguments": {"path": "a/ß.py", "n": [1, 2]}},
             {"id": "toolu_02", "name": "grep", "arguments": {"pattern": "x\"y", "deep": {"k": None}}}]
    fake_server.anthropic.enqueue(text="Checking.", tool_calls=calls, split_args=[1, 5, 6, 13], chunk_size=1)
    events: list[StreamEvent] = []
    response = run(fake_server, request(), events)
    assert response.text == "Checking."
    assert [(c.id, c.name, dict(c.arguments)) for c in response.tool_calls] == [
        (c["id"], c["name"], c["arguments"]) for c in calls]
    assert response.stop_reason == "tool_use"
    starts = [e.data for e in events if e.kind == "tool_call_start"]
    assert starts == [{"index": 1, "id": "toolu_01", "name": "read_file"},
                      {"index": 2, "id": "toolu_02", "name": "grep"}]
    assert all(e.data["arguments"] for e in events if e.kind == "tool_call_delta")


def test_tool_use_without_input_deltas_has_empty_arguments(fake_server: FakeServer) -> None:
    fake_server.anthropic.enqueue(tool_calls=[{"id": "toolu_9", "name": "ls", "arguments": ""}])
    response = run(fake_server, request())
    assert response.tool_calls[0].arguments == {}


def test_thinking_blocks_stream_as_thinking_and_signatures_are_skipped(fake_server: FakeServer) -> None:
    fake_server.anthropic.enqueue(thinking="Consider the file.", text="Done")
    events: list[StreamEvent] = []
    response = run(fake_server, request(), events)
    assert response.thinking == "Consider the file."
    assert "".join(texts(events, "thinking")) == "Consider the file."
    assert response.text == "Done"


def test_usage_combines_message_start_and_message_delta_with_cache_tokens(fake_server: FakeServer) -> None:
    fake_server.anthropic.enqueue(text="ok", usage={"input_tokens": 50, "cache_read_input_tokens": 3000,
                                                    "cache_creation_input_tokens": 200, "output_tokens": 42})
    events: list[StreamEvent] = []
    response = run(fake_server, request(), events)
    assert response.usage == Usage(input=50, output=42, cache_read=3000, cache_write=200)
    assert response.usage.prompt_tokens == 3250
    assert [e.data for e in events if e.kind == "usage"] == [response.usage.to_json()]


@pytest.mark.parametrize(("wire", "normalized"), [
    ("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"), ("tool_use", "tool_use"),
    ("refusal", "refusal")])
def test_stop_reasons_are_normalized(fake_server: FakeServer, wire: str, normalized: str) -> None:
    fake_server.anthropic.enqueue(text="x", stop_reason=wire)
    assert run(fake_server, request()).stop_reason == normalized


def test_mid_stream_overloaded_error_event_raises_retryable_provider_error(fake_server: FakeServer) -> None:
    fake_server.anthropic.enqueue(text="Part", error={"type": "overloaded_error", "message": "Overloaded"})
    events: list[StreamEvent] = []
    with pytest.raises(ProviderError, match="Overloaded") as info:
        run(fake_server, request(), events)
    assert type(info.value) is ProviderError
    assert info.value.retryable and info.value.status == 529
    assert texts(events) == ["Part"]
    assert len(fake_server.requests) == 1


def test_mid_stream_prompt_too_long_error_is_a_context_overflow(fake_server: FakeServer) -> None:
    fake_server.anthropic.enqueue(error={"type": "invalid_request_error",
                                         "message": "prompt is too long: 201000 tokens > 200000 maximum"})
    with pytest.raises(ContextOverflowError):
        run(fake_server, request())


def test_mid_stream_authentication_error_is_an_auth_error(fake_server: FakeServer) -> None:
    fake_server.anthropic.enqueue(error={"type": "authentication_error", "message": "invalid x-api-key"})
    with pytest.raises(AuthError, match="ANTHROPIC_API_KEY"):
        run(fake_server, request())


def test_a_stream_that_ends_before_message_stop_raises(fake_server: FakeServer) -> None:
    frames = (b'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":1}}}\n\n',
              b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
              b'"content_block":{"type":"text","text":""}}\n\n')
    fake_server.enqueue("anthropic", Reply(headers=(("content-type", "text/event-stream"),), frames=frames))
    with pytest.raises(ProviderError, match="message_stop"):
        run(fake_server, request())


# -- message conversion ----------------------------------------------------------------------------------

def test_consecutive_tool_results_are_merged_into_one_user_message() -> None:
    wire = to_anthropic_messages([
        {"role": "user", "content": "do two things"},
        {"role": "assistant", "content": "", "toolCalls": [
            {"id": "toolu_a", "name": "a", "arguments": {"x": 1}}, {"id": "toolu_b", "name": "b", "arguments": {}}]},
        {"role": "tool", "toolCallId": "toolu_a", "name": "a", "content": "A"},
        {"role": "tool", "toolCallId": "toolu_b", "name": "b", "content": "B broke", "isError": True},
        {"role": "user", "content": "thanks"},
    ])
    assert wire == [
        {"role": "user", "content": [{"type": "text", "text": "do two things"}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_a", "name": "a", "input": {"x": 1}},
            {"type": "tool_use", "id": "toolu_b", "name": "b", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": "A"},
            {"type": "tool_result", "tool_use_id": "toolu_b", "content": "B broke", "is_error": True},
            {"type": "text", "text": "thanks"}]},
    ]


def test_roles_alternate_and_the_first_message_is_from_the_user() -> None:
    wire = to_anthropic_messages([
        {"role": "assistant", "content": "resuming"},
        {"role": "assistant", "content": "still me"},
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
        {"role": "user", "content": ""},
    ])
    assert [m["role"] for m in wire] == ["user", "assistant", "user"]
    assert wire[0]["content"] == [{"type": "text", "text": CONTINUE_NOTE}]
    assert [b["text"] for b in wire[1]["content"]] == ["resuming", "still me"]
    assert [b["text"] for b in wire[2]["content"]] == ["one", "two"]
    assert to_anthropic_messages([]) == [{"role": "user", "content": [{"type": "text", "text": CONTINUE_NOTE}]}]


def test_tool_results_lead_their_user_message_even_after_a_queued_user_message() -> None:
    wire = to_anthropic_messages([
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "calling", "toolCalls": [{"id": "t1", "name": "ls", "arguments": {}}]},
        {"role": "user", "content": "queued while the tool ran"},
        {"role": "tool", "toolCallId": "t1", "name": "ls", "content": "a.py"},
    ])
    assert [b["type"] for b in wire[2]["content"]] == ["tool_result", "text"]


def test_orphans_become_text_notes_instead_of_invalid_blocks() -> None:
    wire = to_anthropic_messages([
        {"role": "user", "content": "start"},
        {"role": "tool", "toolCallId": "lost", "name": "read_file", "content": "old"},
        {"role": "assistant", "content": "", "toolCalls": [{"id": "t2", "name": "ls", "arguments": {}}]},
    ])
    assert [m["role"] for m in wire] == ["user", "assistant"]
    assert wire[0]["content"][1]["text"].startswith("[result of tool read_file (call lost)")
    assert wire[1]["content"] == [
        {"type": "text", "text": "[tool call ls (id t2) with arguments {} has no recorded result]"}]
    assert "tool_use" not in str(wire) and "tool_result" not in str(wire)


def test_tool_ids_are_reduced_to_allowed_characters_consistently() -> None:
    wire = to_anthropic_messages([
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "toolCalls": [{"id": "call:1/x", "name": "ls", "arguments": {}}]},
        {"role": "tool", "toolCallId": "call:1/x", "name": "ls", "content": ""},
    ])
    assert wire[1]["content"][0]["id"] == "call_1_x"
    assert wire[2]["content"] == [{"type": "tool_result", "tool_use_id": "call_1_x"}]


def test_repair_moves_late_results_up_and_keeps_the_transcript_untouched() -> None:
    messages = (
        {"role": "assistant", "content": "x", "toolCalls": [{"id": "c1", "name": "a", "arguments": {}},
                                                            {"id": "c1", "name": "a", "arguments": {"dup": 1}}]},
        {"role": "user", "content": "u"},
        {"role": "tool", "toolCallId": "c1", "name": "a", "content": "r"},
        {"role": "tool", "toolCallId": "c1", "name": "a", "content": "second answer"},
    )
    before = repr(messages)
    repaired = repair_tool_pairing(messages)
    assert repr(messages) == before
    assert [m["role"] for m in repaired] == ["assistant", "tool", "user", "user"]
    assert repaired[0]["toolCalls"] == [{"id": "c1", "name": "a", "arguments": {}}]
    assert repaired[0]["content"].endswith('[tool call a (id c1) with arguments {"dup": 1} has no recorded result]')
    assert repaired[3]["content"].startswith("[result of tool a (call c1)")


def test_reused_tool_ids_are_made_unique_per_request() -> None:
    turn = [{"role": "assistant", "content": "", "toolCalls": [{"id": "call_0", "name": "ls", "arguments": {}}]},
            {"role": "tool", "toolCallId": "call_0", "name": "ls", "content": "x"}]
    wire = to_anthropic_messages([{"role": "user", "content": "go"}, *turn, *turn])
    ids = [b["id"] for m in wire for b in m["content"] if b["type"] == "tool_use"]
    results = [b["tool_use_id"] for m in wire for b in m["content"] if b["type"] == "tool_result"]
    assert ids == results == ["call_0", "call_0_2"]


# -- any message list becomes a valid request on both wires --------------------------------------------------

_IDS = st.sampled_from(["c1", "c2", "c3", "x:y"])
_CALL = st.fixed_dictionaries({"id": _IDS, "name": st.sampled_from(["ls", "read"]),
                               "arguments": st.dictionaries(st.sampled_from("ab"), st.integers(0, 3), max_size=2)})
_MESSAGE = st.one_of(
    st.fixed_dictionaries({"role": st.just("user"), "content": st.sampled_from(["", "u"])}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.sampled_from(["", "a"]),
                           "toolCalls": st.lists(_CALL, max_size=3)}),
    st.fixed_dictionaries({"role": st.just("tool"), "toolCallId": _IDS, "name": st.just("ls"),
                           "content": st.sampled_from(["", "RESULT-1", "RESULT-2"]),
                           "isError": st.booleans()}),
)


def _assert_valid_anthropic(wire: list[dict[str, Any]]) -> None:
    assert wire and wire[0]["role"] == "user"
    seen: set[str] = set()
    for i, message in enumerate(wire):
        assert message["content"], "no empty messages"
        if i:
            assert message["role"] != wire[i - 1]["role"], "roles alternate"
        types_ = [b["type"] for b in message["content"]]
        assert all(b.get("text", "x") for b in message["content"]), "no empty text blocks"
        uses = [b["id"] for b in message["content"] if b["type"] == "tool_use"]
        assert not set(uses) & seen and len(set(uses)) == len(uses), "tool_use ids are unique"
        seen |= set(uses)
        results = [b["tool_use_id"] for b in message["content"] if b["type"] == "tool_result"]
        if message["role"] == "user":
            assert types_ == sorted(types_, key=lambda t: t != "tool_result"), "results lead"
            previous = wire[i - 1]["content"] if i else []
            assert sorted(results) == sorted(b["id"] for b in previous if b["type"] == "tool_use")
        elif uses:
            assert i + 1 < len(wire), "calls are answered"


def _assert_valid_openai(wire: list[dict[str, Any]]) -> None:
    pending: list[str] = []
    for message in wire:
        if message["role"] == "tool":
            assert message["tool_call_id"] in pending, "a result answers an open call"
            pending.remove(message["tool_call_id"])
            continue
        assert not pending, "every call is answered before the next message"
        if message["role"] == "assistant":
            assert message["content"] or message.get("tool_calls")
            pending = [c["id"] for c in message.get("tool_calls", [])]
    assert not pending


@settings(max_examples=300, deadline=None)
@given(st.lists(_MESSAGE, max_size=10))
def test_any_message_list_converts_to_a_valid_request_on_both_wires(messages: list[dict[str, Any]]) -> None:
    _assert_valid_anthropic(to_anthropic_messages(messages))
    _assert_valid_openai(to_openai_messages("sys", messages))
    # nothing is dropped silently: every non-empty text and result survives somewhere
    anthropic_text = str(to_anthropic_messages(messages))
    for message in messages:
        if message["role"] == "tool" and message["content"]:
            assert message["content"] in anthropic_text
