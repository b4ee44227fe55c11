"""OpenAI-compatible servers as they really behave, reproduced on the loopback fake server: the
cases the real llama-cpp-python server showed (tests/realmodel/test_realmodel.py runs against it) and the
ones a real server of this machine cannot produce (vLLM's tool_choice refusal, OpenAI's
structured outputs, a server that sends nothing at all)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from agent_support import is_summary_request, make_agent
from fakeserver import FakeServer, Reply, _json_reply, fake_server_fixture  # noqa: F401
from IPython.core.interactiveshell import InteractiveShell

from soba_notebook.compaction.summarize import capsule_schema, summary_output_budget
from soba_notebook.errors import ContextOverflowError
from soba_notebook.providers import ModelRequest, OpenAIChatProvider, ToolSpec
from soba_notebook.providers.openai_compat import (
    ServerQuirks,
    adapt_request,
    context_window_from_models,
    context_window_from_props,
)
from soba_notebook.session.context import pair_problems
from unit.test_magics import _soba_outputs, _use_fake_server, shell  # noqa: F401

LS = ToolSpec("list_files", "List files", {"type": "object", "properties": {"path": {"type": "string"}}})


def _provider(server: FakeServer, **options: Any) -> OpenAIChatProvider:
    return OpenAIChatProvider("m", base_url=server.openai_base_url, **options)


def _complete(provider: OpenAIChatProvider, request: ModelRequest) -> Any:
    async def go() -> Any:
        try:
            return await provider.complete(request)
        finally:
            await provider.aclose()

    return asyncio.run(go())


def _request(**fields: Any) -> ModelRequest:
    return ModelRequest("m", "sys", ({"role": "user", "content": "hi"},), **fields)


# -- 1. tools reach the model ----------------------------------------------------------------------

def test_a_tool_list_is_sent_with_tool_choice_auto(fake_server: FakeServer) -> None:
    fake_server.openai.enqueue(text="ok")
    _complete(_provider(fake_server), _request(tools=(LS,)))
    body = fake_server.requests[0].body
    assert body["tool_choice"] == "auto" and body["tools"][0]["function"]["name"] == "list_files"


def test_a_server_that_refuses_tool_choice_gets_the_tools_without_it_and_the_provider_remembers(
        fake_server: FakeServer) -> None:
    fake_server.openai.enqueue_error(400, message='"auto" tool choice requires --enable-auto-tool-choice and '
                                                  "--tool-call-parser to be set", type="BadRequestError")
    fake_server.openai.enqueue(text="ok")
    fake_server.openai.enqueue(text="again")
    provider = _provider(fake_server)

    async def two() -> None:
        await provider.complete(_request(tools=(LS,)))
        await provider.complete(_request(tools=(LS,)))
        await provider.aclose()

    asyncio.run(two())
    bodies = [r.body for r in fake_server.requests]
    assert "tool_choice" in bodies[0] and "tool_choice" not in bodies[1] and "tool_choice" not in bodies[2]
    assert all(b["tools"] for b in bodies)


# -- 2. one bad request never bricks a session ------------------------------------------------------

def _null_content_is_a_500(path: str, body: dict[str, Any]) -> Any:
    """What llama-cpp-python's chat templates do with ``content: null`` on an assistant message."""
    if any(m.get("role") == "assistant" and m.get("content") is None for m in body.get("messages", [])):
        return _json_reply(500, {"error": {"message": "can only concatenate str (not \"NoneType\") to str"}})
    return None


def test_an_assistant_message_that_only_calls_tools_never_sends_null_content(tmp_path: Path,
                                                                            fake_server: FakeServer) -> None:
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    replies = iter([{"tool_calls": [{"id": "c1", "name": "list_files", "arguments": {}}]}, {"text": "done"},
                    {"text": "second turn works"}])

    def handler(path: str, body: dict[str, Any]) -> Any:
        return _null_content_is_a_500(path, body) or next(replies)

    fake_server.handler = handler
    assert asyncio.run(agent.run_turn("list")).outcome == "completed"
    assert asyncio.run(agent.run_turn("and again")).outcome == "completed"
    sent = [m for r in fake_server.requests for m in r.body["messages"] if m["role"] == "assistant"]
    assert sent and all(m["content"] == "" or m["content"] for m in sent)


def test_a_failed_request_does_not_fail_the_turns_after_it(tmp_path: Path, fake_server: FakeServer) -> None:
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    agent.provider.inner._policy = type(agent.provider.inner._policy)(max_retries=0)  # type: ignore[attr-defined]
    fake_server.openai.enqueue_error(503, message="overloaded")
    failed = asyncio.run(agent.run_turn("first"))
    assert failed.outcome == "failed" and "503" in (failed.error or "")
    fake_server.openai.enqueue(text="fine now")
    assert asyncio.run(agent.run_turn("second")).outcome == "completed"
    assert pair_problems([e for e in agent.store.path() if e.is_model_input]) == []


# -- 3. usage when streams carry none --------------------------------------------------------------

def test_a_server_that_streams_no_usage_is_asked_without_streaming_and_the_budget_uses_its_counts(
        tmp_path: Path, fake_server: FakeServer) -> None:
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    fake_server.openai.enqueue(text="streamed, no usage", usage=False)
    fake_server.openai.enqueue(text="plain", usage={"prompt_tokens": 1234, "completion_tokens": 5})
    asyncio.run(agent.run_turn("one"))
    asyncio.run(agent.run_turn("two"))
    first, second = (r.body for r in fake_server.requests)
    assert first["stream"] is True and second["stream"] is False and "stream_options" not in second
    check = agent.engine.tracker.check()
    assert check.source == "provider_usage" and check.effective >= 1234
    assert any("streams no token usage" in w for w in agent.provider.inner.warnings)  # type: ignore[attr-defined]


def test_stream_always_keeps_streaming_without_usage(fake_server: FakeServer) -> None:
    fake_server.openai.enqueue(text="a", usage=False)
    fake_server.openai.enqueue(text="b", usage=False)
    provider = _provider(fake_server, stream="always")

    async def two() -> None:
        await provider.complete(_request())
        await provider.complete(_request())
        await provider.aclose()

    asyncio.run(two())
    assert [r.body["stream"] for r in fake_server.requests] == [True, True]


# -- 5. overflow a server does not name -------------------------------------------------------------

def _empty_stream() -> Reply:
    return Reply(headers=(("content-type", "text/event-stream"),), frames=())


def test_an_empty_stream_is_asked_again_without_streaming_and_its_overflow_error_is_recognised(
        fake_server: FakeServer) -> None:
    fake_server.enqueue("openai", _empty_stream())
    fake_server.enqueue("openai", _json_reply(400, {"error": {
        "message": "This model's maximum context length is 4096 tokens. However, you requested 4311 tokens "
                   "(4247 in the messages, 64 in the completion).", "type": "invalid_request_error"}}))
    with pytest.raises(ContextOverflowError) as info:
        _complete(_provider(fake_server, stream="always"), _request())
    assert [r.body["stream"] for r in fake_server.requests] == [True, False]
    assert (info.value.requested_tokens, info.value.context_limit) == (4311, 4096)


def test_an_empty_reply_to_a_request_near_the_servers_context_is_an_overflow(fake_server: FakeServer) -> None:
    empty = {"id": "x", "object": "chat.completion", "choices": []}
    fake_server.enqueue("openai", _empty_stream())
    fake_server.enqueue("openai", _json_reply(200, empty))
    with pytest.raises(ContextOverflowError, match=r"empty reply to a request of about 3,900 tokens.*4,096"):
        _complete(_provider(fake_server, context_window=4096), _request(estimated_input_tokens=3900))
    # far below the context, the same empty reply is just an empty answer
    fake_server.enqueue("openai", _empty_stream())
    fake_server.enqueue("openai", _json_reply(200, empty))
    response = _complete(_provider(fake_server, context_window=4096), _request(estimated_input_tokens=500))
    assert response.text == "" and response.tool_calls == ()


def test_the_servers_own_context_is_probed_and_a_larger_configured_window_is_warned_about(
        fake_server: FakeServer) -> None:
    fake_server.openai.enqueue(text="ok")
    fake_server.get_routes["/props"] = {"default_generation_settings": {"n_ctx": 8192}}
    provider = _provider(fake_server, context_window=32768)
    _complete(provider, _request())
    assert fake_server.gets == ["/props"]
    assert provider.effective_context_window == 8192
    assert any("8,192" in w and "32,768" in w for w in provider.warnings)


def test_context_sizes_are_read_from_each_servers_own_listing() -> None:
    assert context_window_from_props({"default_generation_settings": {"n_ctx": 4096}}) == 4096
    assert context_window_from_props({"n_ctx": 2048}) == 2048
    assert context_window_from_props({"detail": "Not Found"}) is None
    vllm = {"data": [{"id": "qwen", "max_model_len": 32768}]}
    llama_server = {"data": [{"id": "m.gguf", "meta": {"n_ctx_train": 8192}}]}
    assert context_window_from_models(vllm, "qwen") == 32768
    assert context_window_from_models(llama_server, "other") == 8192  # the only model served
    assert context_window_from_models({"data": [{"id": "a"}, {"id": "b"}]}, "c") is None


# -- 6. per-turn limits ------------------------------------------------------------------------------

def test_a_turn_stops_at_max_steps_per_turn_with_a_clear_message_and_a_paired_transcript(
        tmp_path: Path, fake_server: FakeServer) -> None:
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    agent.config = agent.config.with_overrides({"agent": {"maxStepsPerTurn": 3}})
    n = iter(range(100))
    fake_server.handler = lambda path, body: {
        "tool_calls": [{"id": f"c{next(n)}", "name": "list_files", "arguments": {"path": f"d{next(n)}"}}]}
    result = asyncio.run(agent.run_turn("loop"))
    assert result.outcome == "stopped" and result.inferences == 3
    assert "3 model steps" in (result.error or "") and "agent.maxStepsPerTurn" in (result.error or "")
    assert pair_problems([e for e in agent.store.path() if e.is_model_input]) == []


def test_the_same_call_repeated_with_nothing_changed_in_between_ends_the_turn_and_is_not_run(
        tmp_path: Path, fake_server: FakeServer) -> None:
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    n = iter(range(100))
    # read_file / list_files alternating, as the real small model looped
    calls = [("read_file", {"path": "a.txt"}), ("list_files", {})]
    fake_server.handler = lambda path, body: {"tool_calls": [
        dict(zip(("name", "arguments"), calls[(i := next(n)) % 2], strict=True), id=f"c{i}")]}
    (agent.workspace / "a.txt").write_text("x")
    result = asyncio.run(agent.run_turn("loop"))
    assert result.outcome == "stopped" and "agent.maxRepeatedToolCalls" in (result.error or "")
    results = [e for e in agent.store.path() if e.role == "tool"]
    assert results[-1].message.get("isError") and results[-1].text.startswith("not run")
    assert sum(1 for e in results if e.message.get("name") == "read_file" and not e.message.get("isError")) == 3
    assert pair_problems([e for e in agent.store.path() if e.is_model_input]) == []


def test_repeating_a_call_after_a_state_changing_call_is_not_a_loop(tmp_path: Path,
                                                                    fake_server: FakeServer) -> None:
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    edits = [{"tool_calls": [{"id": f"r{i}", "name": "read_file", "arguments": {"path": "a.txt"}}]} if i % 2 == 0
             else {"tool_calls": [{"id": f"w{i}", "name": "write_file",
                                   "arguments": {"path": "a.txt", "content": f"v{i}"}}]} for i in range(10)]
    replies = iter([*edits, {"text": "done"}])
    fake_server.handler = lambda path, body: next(replies)
    result = asyncio.run(agent.run_turn("read, edit, read again"))
    assert result.outcome == "completed", result.error


# -- malformed arguments ----------------------------------------------------------------------------

def test_malformed_arguments_are_answered_with_the_parse_error_and_shown_back_as_the_model_wrote_them(
        tmp_path: Path, fake_server: FakeServer) -> None:
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    fake_server.openai.enqueue(tool_calls=[{"id": "bad", "name": "list_files", "arguments": '{"path": "src'}])
    fake_server.openai.enqueue(text="sorry")
    asyncio.run(agent.run_turn("list src"))
    result = next(e for e in agent.store.path() if e.role == "tool")
    assert result.message.get("isError") and "not a valid JSON object" in result.text
    assert "nothing was run" in result.text
    second = fake_server.requests[1].body["messages"]
    call = next(m for m in second if m.get("tool_calls"))["tool_calls"][0]
    assert call["function"]["arguments"] == '{"path": "src'


# -- 7. structured summaries -------------------------------------------------------------------------

def test_summaries_ask_for_the_capsule_schema_and_fall_back_to_each_form_a_server_accepts(
        tmp_path: Path, fake_server: FakeServer) -> None:
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url,
                             compaction={"keepRecentTokens": 100, "timeoutMs": 10000})
    fake_server.openai.enqueue(text="x " * 400)
    asyncio.run(agent.run_turn("talk " * 300))
    # llama-cpp-python's refusal of the OpenAI form, as its validation error really reads (HTTP 500)
    fake_server.openai.enqueue_error(500, message="1 validation error: ('body', 'response_format', 'type') "
                                                  "Input should be 'text' or 'json_object'")
    fake_server.openai.enqueue(text=json.dumps({"goal": "talk", "done": ["talked"]}))
    outcome = asyncio.run(agent.compact())
    assert outcome.outcome == "completed" and outcome.quality == "ok"
    summaries = [r.body for r in fake_server.requests if is_summary_request(r.body)]
    assert summaries[0]["response_format"]["type"] == "json_schema"
    schema = summaries[0]["response_format"]["json_schema"]["schema"]
    assert summaries[1]["response_format"] == {"type": "json_object", "schema": schema}
    assert summaries[1]["max_tokens"] == summary_output_budget(agent.config.model.context_window)


def test_the_capsule_schema_bounds_every_list_and_string_so_a_filled_answer_fits_its_budget() -> None:
    for budget in (256, 1024, 4000):
        schema = capsule_schema(budget)
        worst = 0
        for name, prop in schema["properties"].items():
            if prop["type"] == "string":
                worst += prop["maxLength"] + len(name) + 6
                continue
            item = prop["items"]
            strings = [item] if item["type"] == "string" else [p for p in item["properties"].values()
                                                              if "maxLength" in p]
            per_item = sum(s["maxLength"] + 8 for s in strings) + (20 if item["type"] == "object" else 0)
            worst += prop["maxItems"] * per_item + len(name) + 6
            assert prop["maxItems"] >= 1
        assert worst <= budget * 4, budget  # even at one token per four characters of worst case
        assert set(schema["required"]) == set(schema["properties"])


def test_summary_output_budget_is_sized_to_a_capsule_not_to_the_models_reply_budget() -> None:
    assert summary_output_budget(4096) == 1024
    assert summary_output_budget(200_000) == 4000
    assert summary_output_budget(800) == 256


def test_adapting_a_request_changes_only_the_refused_parameter() -> None:
    quirks = ServerQuirks()
    body = {"model": "m", "messages": [], "max_tokens": 5, "stream": True, "stream_options": {"include_usage": True}}
    assert adapt_request(400, "Unrecognized request argument supplied: stream_options", body, quirks) == {
        k: v for k, v in body.items() if k != "stream_options"}
    assert quirks.stream_options is False
    assert adapt_request(429, "tool_choice", {"tool_choice": "auto"}, quirks) is None
    assert adapt_request(400, "something else entirely", body, quirks) is None


# -- what the user is told ---------------------------------------------------------------------------

def test_what_the_provider_learned_about_its_server_is_said_once_in_the_cell_and_in_status(
        shell: InteractiveShell, tmp_path: Path, fake_server: FakeServer,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SOBA_TEST_KEY", "k" * 12)
    _use_fake_server(tmp_path, fake_server)
    fake_server.openai.enqueue(text="one", usage=False)
    fake_server.openai.enqueue(text="two", usage={"prompt_tokens": 900, "completion_tokens": 2})
    first, second, status = _soba_outputs(shell, capsys, "first", "second", "status")
    assert "Model server: the server at" in first and "streams no token usage" in first
    assert "streams no token usage" not in second, "said once"
    assert "streams no token usage" in status


def test_a_server_that_generated_past_max_tokens_into_its_context_is_not_a_context_overflow(
        tmp_path: Path, fake_server: FakeServer) -> None:
    # llama-cpp-python's automatic tool choice ignores max_tokens when the model answers in text,
    # generates until its context is full, then reports the whole as a context overflow
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url, model={"maxOutputTokens": 400})
    fake_server.openai.enqueue_error(400, message=(
        "This model's maximum context length is 4096 tokens. However, you requested 4096 tokens "
        "(1267 in the messages, 2829 in the completion). Please reduce the length of the messages or completion."),
        type="invalid_request_error")
    result = asyncio.run(agent.run_turn("hello"))
    assert result.outcome == "failed" and "ran past its own context of 4,096 tokens" in (result.error or "")
    assert "2,829 of them completion" in (result.error or "")
    assert not [e for e in agent.store.entries() if e.type == "capsule"], "nothing was compacted"
    fake_server.openai.enqueue(text="fine")
    assert asyncio.run(agent.run_turn("again")).outcome == "completed"


def test_a_server_whose_own_prompt_grew_past_its_context_is_not_a_context_overflow_of_the_request(
        tmp_path: Path, fake_server: FakeServer) -> None:
    # llama-cpp-python appends the model's function calls to its own prompt until it overflows
    # ("Requested tokens (4975) exceed context window of 4096"), for a request of ~1,400 tokens
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url, model={"maxOutputTokens": 400})
    fake_server.openai.enqueue_error(400, message=(
        "This model's maximum context length is 4096 tokens. However, you requested 5375 tokens "
        "(4975 in the messages, 400 in the completion). Please reduce the length of the messages or completion."),
        type="invalid_request_error")
    result = asyncio.run(agent.run_turn("hello"))
    assert result.outcome == "failed" and "ran past its own context" in (result.error or "")
    assert not [e for e in agent.store.entries() if e.type == "capsule"], "nothing was compacted"


def test_a_real_overflow_of_the_request_is_still_an_overflow() -> None:
    from soba_notebook.providers.overflow import generated_past_its_context, overflow_error

    body = ("This model's maximum context length is 4096 tokens. However, you requested 4400 tokens "
            "(4336 in the messages, 64 in the completion).")
    assert not generated_past_its_context(overflow_error("x", body), 64, estimated_input=4300)
    assert generated_past_its_context(overflow_error("x", body), 64, estimated_input=1400)
