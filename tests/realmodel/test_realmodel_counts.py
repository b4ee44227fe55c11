"""The real-model tier's count and waste checks, on llama-cpp-python and on llama.cpp's own
``llama-server`` (``tests/realmodel_support.py``), with the agent in process:

* **counts the server agrees with**: on every request of real-model turns (llama-server on both
  tool paths: the native one with the Qwen2.5 template, SOBA's JSON protocol with SmolLM2's own), SOBA's input-token
  figure (the request's ``estimatedInput`` as the transcript records it) against the server's
  ``usage.prompt_tokens`` for that request: within 10% on a session's first request, within 2% on
  every request after the first reply (issue 22). The per-request errors are printed (``-s``) for
  ``docs/PROVIDERS.md``;
* **no waste on llama-cpp-python**: its server cannot stream a request with automatic tool choice
  (it answers 200 with an empty stream and closes the connection). After the first such request
  every tool step costs exactly one request, and no request is retried: the server's own log
  counts the requests, the agent's ``retry`` events the retries.

What the model says is not asserted (a 135M model is a protocol test). Nothing waits a fixed time:
each server is waited for until idle, and generation is bounded (``maxOutputTokens``, the
servers' ``n_ctx`` and llama-server's ``--n-predict``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from kernel_support import trust_project_config
from realmodel_support import (
    MODEL_ALIAS,
    TOOL_TEMPLATE,
    LlamaServer,
    LocalServer,
    project_config,
    running_llama_server,
    running_server,
)

from soba_notebook.agent.project import open_agent
from soba_notebook.compaction import Capsule, Decision
from soba_notebook.compaction.capsule import render
from soba_notebook.events import Event
from soba_notebook.providers.base import ModelRequest, ToolSpec
from soba_notebook.providers.openai import OpenAIChatProvider
from soba_notebook.session import SessionStore, list_sessions
from soba_notebook.tokens import TokenCounter

#: issue 22: SOBA's figure against the server's prompt count
FIRST_REQUEST_TOLERANCE = 0.10
LATER_REQUEST_TOLERANCE = 0.02
CALC = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
PROMPTS = ("Read the file calc.py", "List the files in the workspace", "Read calc.py again and say what add does")
#: a turn may end this way on llama-cpp-python (its automatic tool choice can run past n_ctx)
SERVER_RAN_PAST_ITS_CONTEXT = "the server ran past its own context"

Server = LocalServer | LlamaServer
SERVERS: dict[str, Callable[[Path], AbstractContextManager[Any]]] = {
    "llama-cpp-python": lambda log: running_server(log),
    # the native path: llama.cpp's tool-capable Qwen2.5 template
    "llama-server": lambda log: running_llama_server(log, template=TOOL_TEMPLATE),
    # SOBA's JSON tool protocol: SmolLM2's own template, which shows no tools (model.toolProtocol auto)
    "llama-server-json": lambda log: running_llama_server(log),
}


def _project(tmp_path: Path, server: Server) -> Path:
    project = tmp_path / "project"
    (project / ".soba").mkdir(parents=True)
    # no compaction here: every request's prompt is the transcript's own, one turn after another
    config = {**project_config(server, auto=False, compactOnTurnComplete=False),
              "tools": {"workspace": str(project), "approval": "never"}}
    (project / ".soba" / "config.json").write_text(json.dumps(config))
    (project / "calc.py").write_text(CALC)
    return project


def _run_turns(project: Path, home: Path, server: Server, prompts: tuple[str, ...],
               asked: list[str] | None = None) -> tuple[list[Event], list[Any]]:
    """Run ``prompts`` as turns of one session; the agent's events and the turn results.
    ``asked`` collects the purpose of each request the agent hands its providers (``complete``):
    the requests it means to make, model steps and summaries alike, before any transport."""
    from soba_notebook.config import load_config

    events: list[Event] = []
    results = []
    trust_project_config(project, home)  # its user points it at the local server
    handle = open_agent(project, config=load_config(home=home, project_dir=project))
    handle.agent.bus.subscribe(events.append)
    if asked is not None:
        agent = handle.agent
        for provider in {id(p): p for p in (agent.provider, agent.summary_provider)}.values():
            provider.complete = _counted(provider.complete, asked)  # type: ignore[method-assign]

    async def turns() -> None:
        try:
            for prompt in prompts:
                server.wait_until_idle()
                results.append(await handle.agent.run_turn(prompt))
        finally:
            await handle.agent.aclose()

    try:
        asyncio.run(turns())
    finally:
        handle.close()
    server.wait_until_idle()
    return events, results


def _counted(complete: Callable[..., Any], asked: list[str]) -> Callable[..., Any]:
    async def counted(request: ModelRequest, **kwargs: Any) -> Any:
        asked.append(request.purpose)
        return await complete(request, **kwargs)
    return counted


def _replies(project: Path) -> list[Any]:
    (info,) = list_sessions(project / ".soba" / "sessions")
    return [e for e in SessionStore.open(info.path).path() if e.role == "assistant" and e.usage is not None]


@pytest.fixture(params=sorted(SERVERS), ids=sorted(SERVERS))
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    with SERVERS[request.param](tmp_path / "server.log") as running:
        yield running


def test_soba_counts_every_request_within_two_percent_of_the_server_after_the_first_reply_and_ten_on_the_first(
        server: Server, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    project = _project(tmp_path, server)
    _, results = _run_turns(project, tmp_path / "home", server, PROMPTS)
    for result in results:
        assert result.outcome in ("completed", "stopped") or SERVER_RAN_PAST_ITS_CONTEXT in (result.error or ""), result
    _print_steps(project)
    pairs = [(e.message["estimatedInput"], e.usage.prompt_tokens) for e in _replies(project)]
    errors = [(estimate - real) / real for estimate, real in pairs]
    name = request.node.callspec.id
    print(f"\n{name}: {len(pairs)} requests, SOBA's figure / the server's prompt count: "
          + ", ".join(f"{a:,} / {b:,} ({e:+.1%})" for (a, b), e in zip(pairs, errors, strict=True)))
    assert len(pairs) >= 2, pairs
    assert abs(errors[0]) <= FIRST_REQUEST_TOLERANCE, (pairs[0], errors[0])
    later = [(p, e) for p, e in zip(pairs[1:], errors[1:], strict=True) if abs(e) > LATER_REQUEST_TOLERANCE]
    assert later == [], later


#: a capsule as the model reads it, of the kind a 135M model writes: made-up identifiers tokenize
#: unlike prose (issue 26, run 7), and the wrapper's tag, quotes and an ampersand are what an
#: HTML-escaping template rewrites (a CI run of issue 26: 45 tokens the raw text did not count)
CAPSULE_TEXT = render(Capsule(
    goal="Fix add in calc.py so that add(2, 3) == 5 & mul stays as it is",
    files_read=("calc.py",), next_steps=("run python calc.py",),
    decisions=(Decision("keep mul as it is", "checked by qZ7vK2pL9x and Wm3nR8tY1b; code word xq7Zk9-8fJq2"),)),
    checkpoint_id="ck_512e0cc404")
#: one tool, so a request offers tools: llama-cpp-python's answer to it names its template
READ = ToolSpec("read_file", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}},
                                              "required": ["path"]})


def test_the_servers_count_of_a_capsules_text_is_what_that_text_adds_to_its_prompt_count(
        server: Server, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """``count_text_tokens`` (what a new capsule's "after" figure rests on) against the server's own
    ``usage.prompt_tokens``: one message holding the text, less one holding a word of it. The
    provider has made a request with tools first, as the agent has before any capsule: that is how
    it learns llama-cpp-python's template, which HTML-escapes every message's text."""
    provider = OpenAIChatProvider(MODEL_ALIAS, base_url=server.base_url)

    async def counts() -> tuple[int | None, int, int]:
        try:
            await provider.complete(ModelRequest(
                model=MODEL_ALIAS, system="", messages=({"role": "user", "content": "Read calc.py"},),
                tools=(READ,), max_output_tokens=32))
            counted = await provider.count_text_tokens(CAPSULE_TEXT)
            provider.stream_mode = "never"  # each reply's usage, whatever the server streams
            prompts = []
            for content in (f"Read\n{CAPSULE_TEXT}", "Read\n"):
                reply = await provider.complete(ModelRequest(
                    model=MODEL_ALIAS, system="", messages=({"role": "user", "content": content},),
                    max_output_tokens=1))
                assert reply.usage is not None and reply.usage.reported, reply
                prompts.append(reply.usage.prompt_tokens)
            return counted, prompts[0], prompts[1]
        finally:
            await provider.aclose()

    counted, with_text, without = asyncio.run(counts())
    local = TokenCounter(MODEL_ALIAS).count_text(CAPSULE_TEXT)
    name = request.node.callspec.id
    print(f"\n{name}: capsule text {counted} tokens by the server's count, "
          f"{with_text - without} by its prompt counts, {local} by the local tokenizer")
    assert provider.escapes_text == (name == "llama-cpp-python"), "only chatml-function-calling escapes text"
    assert counted is not None, "a llama.cpp server counts text on request"
    assert abs(counted - (with_text - without)) <= 1, (counted, with_text, without)


def test_llama_cpp_python_tool_steps_cost_one_request_each_after_the_first_and_none_is_retried(
        tmp_path: Path) -> None:
    with running_server(tmp_path / "server.log") as server:
        project = _project(tmp_path, server)
        asked: list[str] = []
        events, results = _run_turns(project, tmp_path / "home", server, PROMPTS, asked)
        log = server.log_text()
    posts = log.count('"POST /v1/chat/completions HTTP/1.1"')
    inferences = sum(r.inferences for r in results)
    retries = [e for e in events if e.type == "retry"]
    calls = sum(len(e.tool_calls) for e in _replies(project))
    # a turn that ends "the server ran past its own context" made its request and got no reply
    ran_past = sum(1 for r in results if SERVER_RAN_PAST_ITS_CONTEXT in (r.error or ""))
    print(f"\nllama-cpp-python: {len(results)} turns ({[r.outcome for r in results]}), {inferences} model steps "
          f"({calls} tool calls), {ran_past} requests the server ran past its context on, {len(asked)} requests "
          f"asked ({', '.join(sorted(set(asked)))}), {posts} requests to the server, {len(retries)} retries")
    assert max(r.inferences for r in results) >= 2, "a turn with a tool step and a reply after it"
    assert retries == [], [e["reason"] for e in retries]
    # every step answered, every one the server ran past, and anything else asked (a context
    # overflow's refused request and its recovery's summary: a real outcome when a 135M model's
    # calls fill llama-cpp-python's context) is a request the agent meant to make
    assert len(asked) >= inferences + ran_past, (asked, inferences, ran_past)
    # the first request with tools: its empty stream, then the same request plain; then one each
    assert posts == len(asked) + 1, _request_story(log, events, results)


def _request_story(log: str, events: list[Event], results: list[Any]) -> str:
    """Why the requests the server saw differ from the steps the agent made: each turn's outcome,
    the agent's events other than streamed text, and the server's own request lines."""
    happened = [e.type if e.type not in ("compaction_end", "error") else f"{e.type}: {dict(e.data)}"
                for e in events if e.type not in ("message_delta", "budget", "compaction_progress")]
    requests = [line.strip() for line in log.splitlines() if '"POST ' in line or "Traceback" in line or "Error" in line]
    return "\n".join([f"turns: {[(r.outcome, r.inferences, r.error) for r in results]}",
                      "agent events: " + ", ".join(happened),
                      "server requests:", *requests])


def _print_steps(project: Path) -> None:
    """What each request added to the one before (for reading a miss)."""
    (info,) = list_sessions(project / ".soba" / "sessions")
    added: list[str] = []
    for entry in SessionStore.open(info.path).path():
        if entry.role == "assistant" and entry.usage is not None:
            print(f"  [{', '.join(added)}] -> {entry.message.get('estimatedInput')} / {entry.usage.prompt_tokens}")
            added = [f"reply {[c.name for c in entry.tool_calls] or len(entry.text)}"]
        elif entry.is_model_input:
            added.append(f"{entry.role} {len(entry.text)} chars")
