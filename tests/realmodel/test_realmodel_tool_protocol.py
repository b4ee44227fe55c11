"""SOBA's own JSON tool protocol on the real ``llama-server --jinja`` serving SmolLM2-135M with its
own chat template (no tool syntax: the native ``tools`` list never reaches the model), and the
code-word round trip on both paths:

* **json** (SmolLM2's own template, ``model.toolProtocol`` ``"auto"``): the tools reach the
  model's prompt as text, the model's constrained answer is a tool call SOBA runs, and the
  tool's result reaches the next prompt. Shown by re-rendering the transcript's requests in the
  protocol's wire form through the server's ``/apply-template`` + ``/tokenize``: the count equals
  the server's ``usage.prompt_tokens`` for that request, so the rendered prompt is the one sent;
* **native** (llama.cpp's tool-capable Qwen2.5 template): the tools reach the prompt natively.

On each path ``%soba``'s task, "Read the file code.txt and reply with the code word", runs
``SOBA_CODE_WORD_RUNS`` times (default 1), each with a fresh random word in a fresh project, and
the test prints how often the 135M model said the word: reported, never asserted (a 135M model is
a protocol test, not a capable agent; the rates are in ``docs/PROVIDERS.md``). Every reply is
bounded by the server's ``--n-predict`` and ``maxOutputTokens``; between runs the test waits for
the server to be idle, never a fixed time.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from realmodel_support import TOOL_TEMPLATE, LlamaServer, open_trusted_agent, project_config, running_llama_server

from realmodel.test_realmodel_llama_server import _entries, _rendered
from soba_notebook.providers.openai import to_openai_messages, to_openai_tools
from soba_notebook.providers.tool_protocol import to_protocol_messages
from soba_notebook.session.entries import Entry

RUNS = int(os.environ.get("SOBA_CODE_WORD_RUNS", "1"))
TASK = "Read the file code.txt and reply with the code word"
#: room for one JSON tool call of a 135M model, which pretty-prints (the server's -n 256 bounds it too)
MAX_OUTPUT = 200


def _word() -> str:
    return f"{secrets.choice(['amber', 'cobalt', 'saffron', 'juniper', 'quartz'])}{secrets.randbelow(9000) + 1000}"


class Run:
    """One code-word turn in a fresh project, and the requests it sent, rebuilt from its transcript."""

    def __init__(self, root: Path, server: LlamaServer, protocol: str) -> None:
        self.word = _word()
        self.project = root / "project"
        (self.project / ".soba").mkdir(parents=True)
        config = project_config(server)
        config["model"] = {**config["model"], "maxOutputTokens": MAX_OUTPUT}
        # the code word needs reading only: the prompt holds the read tools, as a read-only agent's would
        config["tools"] = {"workspace": str(self.project), "approval": "never", "allowShell": False,
                           "allowPython": False, "allowWrite": False}
        (self.project / ".soba" / "config.json").write_text(json.dumps(config))
        (self.project / "code.txt").write_text(f"The code word is {self.word}.\n")
        handle = open_trusted_agent(self.project, new=True)
        try:
            self.result = asyncio.run(handle.agent.run_turn(TASK))
            self.system = handle.agent.system_prompt()
            self.specs = handle.agent.tools.specs()
            self.json_tools = bool(getattr(handle.agent.provider, "json_tools", False))
        finally:
            handle.close()
        self.protocol = protocol
        self.entries = _entries(self.project)

    @property
    def replies(self) -> list[Entry]:
        return [e for e in self.entries if e.role == "assistant"]

    @property
    def results(self) -> list[Entry]:
        return [e for e in self.entries if e.role == "tool"]

    @property
    def said_the_word(self) -> bool:
        return any(self.word in e.text for e in self.replies)

    def wire(self, upto: Entry | None) -> tuple[list[dict[str, Any]], list[Any]]:
        """The messages and native tools of the request that ``upto`` answered (``None``: the
        request that would follow the whole transcript), in the wire form of this run's path."""
        inputs: list[Mapping[str, Any]] = []
        for entry in self.entries:
            if entry is upto:
                break
            if entry.is_model_input:
                inputs.append(entry.message)
        if self.protocol == "json":
            return to_protocol_messages(self.system, inputs, self.specs), []
        return to_openai_messages(self.system, inputs), to_openai_tools(self.specs)


@pytest.mark.parametrize("protocol", ["json", "native"])
def test_the_code_word_round_trip_reaches_the_prompt_on_each_tool_path(tmp_path: Path, protocol: str) -> None:
    template = TOOL_TEMPLATE if protocol == "native" else None
    runs: list[Run] = []
    with running_llama_server(tmp_path / "server.log", template=template) as server:
        assert server.get("/props")["chat_template_caps"]["supports_tools"] is (protocol == "native")
        for n in range(RUNS):
            runs.append(Run(tmp_path / f"run{n}", server, protocol))
            server.wait_until_idle()
        first = runs[0]
        assert first.json_tools is (protocol == "json"), "auto picks the JSON protocol exactly where tools are dropped"

        # the first request, re-rendered in this path's wire form, is the one the server counted, tools and all
        messages, tools = first.wire(first.replies[0])
        prompt, tokens = _rendered(server, messages, tools)
        assert all(spec.name in prompt for spec in first.specs), "every tool reaches the model's prompt"
        usage = first.replies[0].usage
        assert usage is not None and tokens == usage.prompt_tokens, (tokens, usage)
        counts = [(e.message["estimatedInput"], e.usage.prompt_tokens) for r in runs for e in r.replies if e.usage]

        # a tool that ran has its result in the next prompt (the transcript's own next request, if any)
        checked = 0
        for run in runs:
            for result in run.results[:1]:
                after = next((e for e in run.replies if run.entries.index(e) > run.entries.index(result)), None)
                messages, tools = run.wire(after)
                prompt, tokens = _rendered(server, messages, tools)
                assert result.text.strip()[:60] in prompt, "the tool's result is in the model's prompt"
                if after is not None and after.usage is not None:
                    assert tokens == after.usage.prompt_tokens, "and that prompt is the one the server counted"
                checked += 1

    calls = [c.name for r in runs for e in r.replies for c in e.tool_calls]
    said = sum(r.said_the_word for r in runs)
    read = sum(any(r.word in e.text for e in r.results) for r in runs)
    print(f"\nllama-server, {protocol} tool path ({'SmolLM2 template' if template is None else template.name}): "
          f"code word said in {said} of {len(runs)} runs; read by a tool in {read} of {len(runs)}; tool calls "
          f"{calls}; outcomes {[r.result.outcome for r in runs]}; SOBA's estimate / the server's count: "
          + ", ".join(f"{a:,} / {b:,} ({(a - b) / b:+.1%})" for a, b in counts))
    if protocol == "json":
        # SmolLM2 at temperature 0 calls read_file on this task's first step under the protocol
        # (its first prompt is the same in every run); before the protocol it could call nothing
        assert calls and checked, f"no tool ran through the JSON protocol: {[r.result for r in runs]}"
