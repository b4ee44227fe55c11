"""The OpenAI-compatible wire against the loopback fake server, plus the SSE framing both wires use."""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import warnings
from collections.abc import Mapping
from typing import Any

import pytest
from fakeserver import FakeServer, Reply, fake_server_fixture  # noqa: F401
from hypothesis import given
from hypothesis import strategies as st

from soba_notebook.errors import ProviderError
from soba_notebook.providers import ModelRequest, OpenAIChatProvider, StreamEvent, ToolSpec
from soba_notebook.providers.base import ModelResponse
from soba_notebook.providers.openai import to_openai_messages
from soba_notebook.providers.sse import SSEEvent, SSEParser, parse_sse
from soba_notebook.session.entries import Usage

READ_FILE = ToolSpec("read_file", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}},
                                                 "required": ["path"]})


def request(*messages: Mapping[str, Any], tools: tuple[ToolSpec, ...] = (), system: str = "be brief",
            max_output_tokens: int = 512, temperature: float | None = None) -> ModelRequest:
    msgs = messages or ({"role": "user", "content": "hi"},)
    return ModelRequest("gpt-test", system, tuple(msgs), tools, max_output_tokens, temperature)


def run(server: FakeServer, req: ModelRequest, events: list[StreamEvent] | None = None,
        **options: Any) -> ModelResponse:
    async def go() -> ModelResponse:
        provider = OpenAIChatProvider("gpt-test", base_url=server.openai_base_url, **options)
        try:
            return await provider.complete(req, on_event=events.append if events is not None else None)
        finally:
            await provider.aclose()

    return asyncio.run(go())


def texts(events: list[StreamEvent], kind: str = "text") -> list[str]:
    return [e.data["text"] for e in events if e.kind == kind]


# -- streaming ---------------------------------------------------------------------------------------

def test_text_arrives_as_deltas_and_assembles_into_the_response(fake_server: FakeServer) -> None:
    fake_server.openai.enqueue(text=["Hel", "lo, ", "world"])
    events: list[StreamEvent] = []
    response = run(fake_server, request(), events)
    assert texts(events) == ["Hel", "lo, ", "world"]
    assert response.text == "Hello, world"
    assert response.stop_reason == "stop"
    assert response.tool_calls == ()
    assert response.provider == "openai"
    assert response.model == "gpt-4o-mini-2024-07-18"


def test_request_body_streams_with_usage_max_tokens_and_function_tools(fake_server: FakeServer) -> None:
    fake_server.openai.enqueue(text="ok")
    run(fake_server, request(tools=(READ_FILE,), max_output_tokens=321, temperature=0.2))
    path, headers, body = fake_server.requests[0]
    assert path == "/v1/chat/completions"
    assert headers["content-type"] == "application/json"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 321
    assert body["temperature"] == 0.2
    assert body["model"] == "gpt-test"
    assert body["messages"][0] == {"role": "system", "content": "be brief"}
    assert body["tools"] == [{"type": "function", "function": {
        "name": "read_file", "description": "Read a file", "parameters": dict(READ_FILE.parameters)}}]


def test_no_authorization_header_is_sent_without_a_key(fake_server: FakeServer,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    fake_server.openai.enqueue(text="ok")
    run(fake_server, request())
    assert "authorization" not in fake_server.requests[0].headers


def test_the_key_from_the_environment_is_sent_as_bearer(fake_server: FakeServer,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_KEY", "sk-local-123")
    fake_server.openai.enqueue(text="ok")
    run(fake_server, request(), api_key_env="LOCAL_KEY")
    assert fake_server.requests[0].headers["authorization"] == "Bearer sk-local-123"


def test_fragmented_tool_call_arguments_are_reassembled(fake_server: FakeServer) -> None:
    calls = [{"id": "call_a", "name": "read_file", "arguments": {"path": "src/ä.py", "lines": [1, 20]}},
             {"id": "call_b", "name": "grep", "arguments": {"pattern": "def \\w+\\(", "glob": "*.py"}}]
    fake_server.openai.enqueue(text="Looking.", tool_calls=calls, split_args=[1, 2, 9, 10, 17])
    fake_server.openai.enqueue(tool_calls=calls, split_args=3, interleave=True, chunk_size=1)
    for _ in range(2):
        response = run(fake_server, request())
        assert [(c.id, c.name, dict(c.arguments)) for c in response.tool_calls] == [
            (c["id"], c["name"], c["arguments"]) for c in calls]
        assert response.stop_reason == "tool_use"


def test_tool_call_events_carry_id_name_and_argument_fragments(fake_server: FakeServer) -> None:
    fake_server.openai.enqueue(tool_calls=[{"id": "call_1", "name": "ls", "arguments": {"dir": "."}}],
                               split_args=4)
    events: list[StreamEvent] = []
    run(fake_server, request(), events)
    starts = [e.data for e in events if e.kind == "tool_call_start"]
    deltas = [e.data for e in events if e.kind == "tool_call_delta"]
    assert starts == [{"index": 0, "id": "call_1", "name": "ls"}]
    assert "".join(d["arguments"] for d in deltas) == '{"dir":"."}'
    assert all(d["index"] == 0 for d in deltas)


def test_arguments_that_are_not_a_json_object_are_kept_as_the_models_own_text(fake_server: FakeServer) -> None:
    fake_server.openai.enqueue(tool_calls=[{"id": "c", "name": "ls", "arguments": '{"dir": "unterminated'}])
    response = run(fake_server, request())
    call = response.tool_calls[0]
    assert call.arguments == {} and call.raw_arguments == '{"dir": "unterminated'
    # sent back as the model wrote it, not wrapped in a shape it never produced
    wire = to_openai_messages("", [{"role": "assistant", "content": "", "toolCalls": [call.to_json()]},
                                   {"role": "tool", "toolCallId": "c", "name": "ls", "content": "bad"}])
    assert wire[0]["tool_calls"][0]["function"]["arguments"] == '{"dir": "unterminated'
    assert "_raw_arguments" not in json.dumps(wire)


def test_cached_tokens_are_moved_out_of_input_tokens(fake_server: FakeServer) -> None:
    fake_server.openai.enqueue(text="ok", usage={"prompt_tokens": 1200, "completion_tokens": 34,
                                                 "cached_tokens": 1024})
    events: list[StreamEvent] = []
    response = run(fake_server, request(), events)
    assert response.usage == Usage(input=176, output=34, cache_read=1024, cache_write=0)
    assert response.usage.prompt_tokens == 1200
    assert [e.data for e in events if e.kind == "usage"] == [response.usage.to_json()]


def test_usage_is_none_when_the_server_reports_none(fake_server: FakeServer) -> None:
    fake_server.openai.enqueue(text="ok", usage=False)
    assert run(fake_server, request()).usage is None


@pytest.mark.parametrize(("wire", "normalized"), [
    ("stop", "stop"), ("length", "length"), ("tool_calls", "tool_use"), ("content_filter", "content_filter")])
def test_finish_reasons_are_normalized(fake_server: FakeServer, wire: str, normalized: str) -> None:
    fake_server.openai.enqueue(text="x", finish_reason=wire)
    assert run(fake_server, request()).stop_reason == normalized


def test_reasoning_content_is_streamed_as_thinking(fake_server: FakeServer) -> None:
    fake_server.openai.enqueue(thinking="Let me think.", text="42")
    events: list[StreamEvent] = []
    response = run(fake_server, request(), events)
    assert response.thinking == "Let me think."
    assert "".join(texts(events, "thinking")) == "Let me think."
    assert response.text == "42"


def test_tool_calls_without_index_or_id_are_still_assembled(fake_server: FakeServer) -> None:
    def frame(delta: Mapping[str, Any], finish: str | None = None) -> bytes:
        return f"data: {json.dumps({'choices': [{'index': 0, 'delta': delta, 'finish_reason': finish}]})}\n\n".encode()

    frames = (frame({"tool_calls": [{"id": "x1", "function": {"name": "a", "arguments": '{"k":'}}]}),
              frame({"tool_calls": [{"function": {"arguments": "1}"}}]}),
              frame({"tool_calls": [{"id": "x2", "function": {"name": "b", "arguments": {"j": 2}}}]}),
              frame({}, "tool_calls"), b"data: [DONE]\n\n")
    fake_server.enqueue("openai", Reply(headers=(("content-type", "text/event-stream"),), frames=frames))
    response = run(fake_server, request())
    assert [(c.id, c.name, dict(c.arguments)) for c in response.tool_calls] == [
        ("x1", "a", {"k": 1}), ("x2", "b", {"j": 2})]


def test_a_stream_cut_mid_body_raises_instead_of_returning_a_partial_answer(fake_server: FakeServer) -> None:
    frames = (b'data: {"choices":[{"index":0,"delta":{"content":"part"},"finish_reason":null}]}\n\n',)
    fake_server.enqueue("openai", Reply(headers=(("content-type", "text/event-stream"),), frames=frames,
                                        abort=True))
    with pytest.raises(ProviderError) as info:
        run(fake_server, request(), sleep=_no_sleep)
    assert info.value.retryable
    assert len(fake_server.requests) == 1  # bytes had streamed: not retried


def test_mid_stream_error_chunk_raises_provider_error(fake_server: FakeServer) -> None:
    fake_server.openai.enqueue(text="So far", error={"message": "The server had an error while processing "
                                                     "your request.", "type": "server_error"})
    events: list[StreamEvent] = []
    with pytest.raises(ProviderError, match="server had an error"):
        run(fake_server, request(), events)
    assert texts(events) == ["So fa", "r"]
    assert len(fake_server.requests) == 1


def test_max_completion_tokens_is_used_when_the_server_rejects_max_tokens(fake_server: FakeServer) -> None:
    fake_server.openai.enqueue_error(400, message="Unsupported parameter: 'max_tokens' is not supported with "
                                     "this model. Use 'max_completion_tokens' instead.",
                                     type="invalid_request_error", code="unsupported_parameter")
    fake_server.openai.enqueue(text="ok")
    fake_server.openai.enqueue(text="again")

    async def go() -> list[str]:
        provider = OpenAIChatProvider("o-test", base_url=fake_server.openai_base_url)
        try:
            return [(await provider.complete(request())).text, (await provider.complete(request())).text]
        finally:
            await provider.aclose()

    assert asyncio.run(go()) == ["ok", "again"]
    bodies = [r.body for r in fake_server.requests]
    assert "max_tokens" in bodies[0]
    assert bodies[1]["max_completion_tokens"] == 512 and "max_tokens" not in bodies[1]
    assert bodies[2]["max_completion_tokens"] == 512  # remembered


def test_one_provider_serves_several_event_loops(fake_server: FakeServer) -> None:
    provider = OpenAIChatProvider("gpt-test", base_url=fake_server.openai_base_url)
    fake_server.openai.enqueue(text="one")
    fake_server.openai.enqueue(text="two")
    assert asyncio.run(provider.complete(request())).text == "one"

    async def second() -> str:
        try:
            return (await provider.complete(request())).text
        finally:
            await provider.aclose()

    assert asyncio.run(second()) == "two"
    with warnings.catch_warnings():  # the first loop's client was abandoned, by design: collect it here
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def test_consecutive_requests_reuse_the_connection(fake_server: FakeServer) -> None:
    fake_server.openai.enqueue(text="one")
    fake_server.openai.enqueue(text="two")

    async def go() -> list[str]:
        provider = OpenAIChatProvider("gpt-test", base_url=fake_server.openai_base_url)
        try:
            return [(await provider.complete(request())).text for _ in range(2)]
        finally:
            await provider.aclose()

    assert asyncio.run(go()) == ["one", "two"]
    assert fake_server.connections_opened == 1


def test_fake_server_handler_computes_replies_when_the_queue_is_empty(fake_server: FakeServer) -> None:
    fake_server.openai.enqueue(text="queued first")
    fake_server.handler = lambda path, body: {"text": f"echo {body['messages'][-1]['content']} via {path}"}
    assert run(fake_server, request()).text == "queued first"
    assert run(fake_server, request({"role": "user", "content": "ping"})).text == "echo ping via /v1/chat/completions"
    fake_server.handler = lambda path, body: fake_server.openai.reply(tool_calls=[{"name": "ls", "arguments": {}}])
    assert run(fake_server, request()).tool_calls[0].name == "ls"


def test_fake_server_without_a_script_fails_fast_with_a_clear_error(fake_server: FakeServer) -> None:
    with pytest.raises(ProviderError, match="nothing scripted") as info:
        run(fake_server, request())
    assert info.value.status == 400 and len(fake_server.requests) == 1


# -- message conversion --------------------------------------------------------------------------------

def test_assistant_with_tool_calls_and_empty_text_sends_empty_string_content_never_null() -> None:
    wire = to_openai_messages("", [
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": "", "toolCalls": [{"id": "c1", "name": "ls", "arguments": {"d": "."}}]},
        {"role": "tool", "toolCallId": "c1", "name": "ls", "content": "a.py"},
    ])
    assert wire[1] == {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": '{"d": "."}'}}]}


def test_each_tool_result_is_its_own_tool_message_right_after_its_call() -> None:
    wire = to_openai_messages("sys", [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "two calls", "toolCalls": [
            {"id": "c1", "name": "a", "arguments": {}}, {"id": "c2", "name": "b", "arguments": {}}]},
        {"role": "user", "content": "(queued while tools ran)"},
        {"role": "tool", "toolCallId": "c1", "name": "a", "content": "A"},
        {"role": "tool", "toolCallId": "c2", "name": "b", "content": "B failed", "isError": True},
    ])
    assert [m["role"] for m in wire] == ["system", "user", "assistant", "tool", "tool", "user"]
    assert wire[3] == {"role": "tool", "tool_call_id": "c1", "content": "A"}
    assert wire[4] == {"role": "tool", "tool_call_id": "c2", "content": "Error: B failed"}


def test_orphan_tool_result_and_unanswered_call_become_text_notes() -> None:
    wire = to_openai_messages("", [
        {"role": "tool", "toolCallId": "gone", "name": "read_file", "content": "old text"},
        {"role": "assistant", "content": "", "toolCalls": [{"id": "c9", "name": "ls", "arguments": {"d": 1}}]},
        {"role": "user", "content": "next"},
    ])
    assert wire[0]["role"] == "user"
    assert wire[0]["content"].startswith("[result of tool read_file (call gone); its call is not in this context]")
    assert wire[0]["content"].endswith("old text")
    assert wire[1] == {"role": "assistant",
                       "content": '[tool call ls (id c9) with arguments {"d": 1} has no recorded result]'}
    assert all("tool_calls" not in m for m in wire)


def test_thinking_and_empty_assistant_messages_are_not_sent_back() -> None:
    wire = to_openai_messages("", [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "toolCalls": []},
        {"role": "assistant", "content": "a", "thinking": "secret reasoning"},
    ])
    assert wire == [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]


# -- SSE framing -------------------------------------------------------------------------------------------

def test_sse_parser_handles_crlf_cr_comments_multiline_data_and_event_names() -> None:
    stream = (b": comment\r\nevent: message_start\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n"
              b"data: two\r\rid: 7\ndata: three\n\n")
    assert parse_sse([stream]) == [SSEEvent("message_start", '{"a":\n1}'), SSEEvent("message", "two"),
                                   SSEEvent("message", "three", "7")]


def test_sse_parser_joins_lines_split_across_chunks_and_utf8_boundaries() -> None:
    data = 'data: {"text":"héllo ✓"}\r\n\r\n'.encode()
    parser = SSEParser()
    events: list[SSEEvent] = []
    for i in range(len(data)):
        events += parser.feed(data[i:i + 1])
    events += parser.close()
    assert events == [SSEEvent("message", '{"text":"héllo ✓"}')]


def test_sse_parser_delivers_a_final_event_without_trailing_blank_line() -> None:
    assert parse_sse([b"data: [DONE]\n"]) == [SSEEvent("message", "[DONE]")]
    assert parse_sse([b"data: x"]) == [SSEEvent("message", "x")]


def test_sse_parser_ignores_events_without_data_and_strips_one_leading_space() -> None:
    assert parse_sse([b"event: ping\n\n", b"data:  two spaces\n\n", b"data:none\n\n", b"data\n\n"]) == [
        SSEEvent("message", " two spaces"), SSEEvent("message", "none"), SSEEvent("message", "")]


def test_sse_parser_drops_a_leading_byte_order_mark() -> None:
    assert parse_sse([b"\xef\xbb", b"\xbfdata: x\n\n"]) == [SSEEvent("message", "x")]


_SSE_STREAM = ("event: a\r\ndata: 1\r\n\r\n: keep-alive\n\ndata: line one\ndata: line two\n\n"
               "event: b\rdata: ü ✓\r\r").encode()


@given(st.lists(st.integers(min_value=0, max_value=len(_SSE_STREAM)), max_size=12))
def test_sse_events_do_not_depend_on_where_the_bytes_are_split(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(_SSE_STREAM)]
    pieces = [_SSE_STREAM[a:b] for a, b in itertools.pairwise(bounds)]
    assert parse_sse(pieces) == parse_sse([_SSE_STREAM]) == [
        SSEEvent("a", "1"), SSEEvent("message", "line one\nline two"), SSEEvent("b", "ü ✓")]


async def _no_sleep(_seconds: float) -> None:
    return None



def test_deeply_nested_tool_arguments_are_a_parse_error_answered_to_the_model_not_a_crash() -> None:
    from soba_notebook.providers.base import arguments_error, tool_call_from_text

    call = tool_call_from_text("c", "ls", "[" * 100_000 + "]" * 100_000)
    assert call.arguments == {} and call.raw_arguments is not None
    assert "nested too deeply" in (arguments_error(call) or "")
