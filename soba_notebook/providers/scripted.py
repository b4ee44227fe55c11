"""The offline scripted model: a deterministic :class:`~soba_notebook.providers.base.Provider`.

It needs no network and no key, so tests, demos and a fresh install with no provider configured
all have a model to talk to. It goes through the same interface as the real providers: it
streams :class:`~soba_notebook.providers.base.StreamEvent` values (text deltas, tool-call starts
and argument fragments, usage), reports realistic :class:`~soba_notebook.session.entries.Usage`
(the request and the reply counted with the ``gpt-4o`` encoding), and raises
:class:`~soba_notebook.errors.ContextOverflowError` when a request exceeds its ``context_window``,
like a provider that refuses a request that is too long. It is always labelled as what it is
(``label``, and a ``[offline scripted model]`` marker at the start of every turn's first reply
and final answer), so nobody mistakes its output for a language model's.

This module owns the two kinds of answer:

* **Agent requests** (``purpose == "agent"``): the next step of the scripted coding scenario,
  decided by :func:`soba_notebook.providers.scenario.decide` from the request's messages alone,
  so it keeps going after compaction.
* **Summarization requests** (``purpose == "summarize"``, or the summarizer's system prompt):
  one JSON capsule object built deterministically from the ``<history>`` text by
  :func:`summarize_history`. Goal from the first user block, files from the file-tool calls,
  verification from unittest/pytest commands and their exit codes, decisions from plan_pivot
  checkpoints, and the previous capsule state rolled forward.

Knobs for tests: ``stream_delay`` (seconds between stream events, so a turn can be cancelled
mid-stream), ``summary_delay`` and ``fail_summaries`` (a slow or failing summarizer), and
``context_window`` (the overflow error).
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..compaction.capsule import Capsule, Decision, Verification, merge_unique, roll
from ..compaction.summarize import SUMMARY_SYSTEM_PROMPT
from ..errors import CapsuleFormatError, ContextOverflowError, ProviderError
from ..session.entries import ToolCall, Usage
from ..tokens import MESSAGE_OVERHEAD, TokenCounter
from .base import ModelRequest, ModelResponse, StreamEvent, message_text
from .scenario import MARKER, Step, decide

__all__ = ["COUNTING_MODEL", "LABEL", "MARKER", "ScriptedModel", "summarize_history"]

LABEL = "offline scripted model (deterministic, no network)"
#: The encoding family usage is counted with (o200k), whatever model name the request carries.
COUNTING_MODEL = "gpt-4o"
DEFAULT_MODEL = "soba-scripted"

_TEXT_PIECES = 4
_ARGUMENT_PIECES = 3


@functools.cache
def _shared_counter() -> TokenCounter:
    return TokenCounter(COUNTING_MODEL)


def _pieces(text: str, parts: int) -> list[str]:
    """``text`` cut into at most ``parts`` consecutive pieces (deltas of a stream)."""
    if not text:
        return []
    size = max(1, -(-len(text) // parts))
    return [text[i:i + size] for i in range(0, len(text), size)]


@dataclass(frozen=True, slots=True, kw_only=True)
class ScriptedModel:
    """The offline model. Every knob defaults to a fast, well-behaved model.

    ``context_window``: when set, a request whose counted input exceeds it raises
    :class:`ContextOverflowError` (before anything streams). ``stream_delay``: seconds awaited
    before every stream event (0 still yields to the event loop, so cancellation is prompt).
    ``summary_delay``: seconds a summarization takes. ``fail_summaries``: summarization raises
    :class:`ProviderError` instead of answering. The model keeps no state between requests.
    """

    name: ClassVar[str] = "scripted"
    label: ClassVar[str] = LABEL
    offline: ClassVar[bool] = True

    context_window: int | None = None
    stream_delay: float = 0.0
    summary_delay: float = 0.0
    fail_summaries: bool = False

    def __post_init__(self) -> None:
        if self.context_window is not None and self.context_window <= 0:
            raise ValueError(f"context_window must be positive, got {self.context_window}")
        if self.stream_delay < 0 or self.summary_delay < 0:
            raise ValueError("delays must not be negative")

    # -- token accounting --------------------------------------------------------------------
    @staticmethod
    def count_input(request: ModelRequest) -> int:
        """The request's prompt tokens: system prompt, messages and tool schemas."""
        counter = _shared_counter()
        system = counter.count_text(request.system) + MESSAGE_OVERHEAD if request.system else 0
        return system + counter.count_messages(request.messages) + counter.count_tools(request.tools)

    @staticmethod
    def count_output(text: str, calls: Sequence[ToolCall]) -> int:
        message = {"role": "assistant", "content": text, "toolCalls": [c.to_json() for c in calls]}
        return _shared_counter().count_message(message) - MESSAGE_OVERHEAD

    # -- the provider interface --------------------------------------------------------------
    async def complete(self, request: ModelRequest, *,
                       on_event: Callable[[StreamEvent], None] | None = None) -> ModelResponse:
        prompt_tokens = self.count_input(request)
        if self.context_window is not None and prompt_tokens > self.context_window:
            raise ContextOverflowError(
                f"scripted: prompt is too long: the request has {prompt_tokens:,} input tokens, which exceeds "
                f"the context window of {self.context_window:,} tokens", status=400)
        if _is_summary_request(request):
            step = await self._summarize(request)
        else:
            step = decide(request.messages, [t.name for t in request.tools] if request.tools else None)
        usage = Usage(input=prompt_tokens, output=self.count_output(step.text, step.calls))
        await self._stream(step, usage, on_event or (lambda _event: None))
        return ModelResponse(text=step.text, tool_calls=step.calls, usage=usage,
                             stop_reason="stop" if step.final else "tool_use",
                             model=request.model or DEFAULT_MODEL, provider=self.name)

    async def aclose(self) -> None:
        return None

    async def _summarize(self, request: ModelRequest) -> Step:
        if self.summary_delay:
            await asyncio.sleep(self.summary_delay)
        if self.fail_summaries:
            raise ProviderError("scripted: summarization failed on purpose (fail_summaries=True)")
        prompt = "\n\n".join(message_text(m.get("content")) for m in request.messages if m.get("role") == "user")
        return Step(summarize_history(prompt))

    async def _stream(self, step: Step, usage: Usage, emit: Callable[[StreamEvent], None]) -> None:
        for piece in _pieces(step.text, _TEXT_PIECES):
            await self._tick()
            emit(StreamEvent("text", {"text": piece}))
        for index, call in enumerate(step.calls):
            await self._tick()
            emit(StreamEvent("tool_call_start", {"index": index, "id": call.id, "name": call.name}))
            arguments = json.dumps(dict(call.arguments), ensure_ascii=False)
            for piece in _pieces(arguments, _ARGUMENT_PIECES):
                await self._tick()
                emit(StreamEvent("tool_call_delta", {"index": index, "arguments": piece}))
        await self._tick()
        emit(StreamEvent("usage", usage.to_json()))

    async def _tick(self) -> None:
        await asyncio.sleep(self.stream_delay)


def _is_summary_request(request: ModelRequest) -> bool:
    return request.purpose == "summarize" or request.system.strip() == SUMMARY_SYSTEM_PROMPT.strip()


# -- summarization -------------------------------------------------------------------------------

_PREVIOUS = "Previous capsule state"
_ROLE_HEADER = re.compile(r"^\[(user|assistant) [^\]\s]+\]$")
_TOOL_HEADER = re.compile(r"^\[tool result ?([^\]\s]*)( ERROR)?\]$")
_CHECKPOINT_HEADER = re.compile(r"^\[checkpoint (\w+)\] ?(.*)$")
_CALL = re.compile(r"^-> ([\w.-]+)\((.*)\)$", re.DOTALL)
_STRING_FIELD = r'"{0}": "((?:[^"\\]|\\.)*)"'
_EXIT = re.compile(r"\[exit code (-?\d+)\]\s*$")
_TEST_COMMAND = re.compile(r"\b(?:pytest|py\.test|unittest|tox|nox)\b")
_SUMMARY_LINE = re.compile(r"^(?:Ran \d+ tests?.*|OK(?: \(.*\))?|FAILED \(.*\)|=+ .*(?:passed|failed|error).* =+|"
                           r"\d+ (?:passed|failed).*)$", re.MULTILINE)
_CONSTRAINT = re.compile(r"\b(?:must|must not|do not|don't|never|only|without|keep)\b", re.IGNORECASE)
_FILE_READERS = {"read_file"}
_FILE_WRITERS = {"write_file", "edit_file"}
_CLIP = 300


@dataclass(frozen=True, slots=True)
class _Block:
    kind: str  # user | assistant | tool | checkpoint
    text: str
    name: str = ""
    error: bool = False


@dataclass(frozen=True, slots=True)
class _HistoryCall:
    name: str
    args: Mapping[str, Any]
    text: str  # the assistant text of the message that made the call
    block: int  # index of that message's block
    result: _Block | None


def _clip(text: str, limit: int = _CLIP) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _blocks(history: str) -> list[_Block]:
    blocks: list[_Block] = []
    kind, name, error, lines = "", "", False, []

    def flush() -> None:
        if kind:
            blocks.append(_Block(kind, "\n".join(lines).strip("\n"), name, error))

    for line in history.splitlines():
        role, tool, checkpoint = _ROLE_HEADER.match(line), _TOOL_HEADER.match(line), _CHECKPOINT_HEADER.match(line)
        if role is None and tool is None and checkpoint is None:
            lines.append(line)
            continue
        flush()
        if role is not None:
            kind, name, error, lines = role.group(1), "", False, []
        elif tool is not None:
            kind, name, error, lines = "tool", tool.group(1), bool(tool.group(2)), []
        elif checkpoint is not None:
            kind, name, error, lines = "checkpoint", checkpoint.group(1), False, [checkpoint.group(2)]
    flush()
    return blocks


def _parse_call(raw: str) -> tuple[str, dict[str, Any]] | None:
    match = _CALL.match(raw.strip())
    if match is None:
        return None
    name, inner = match.groups()
    try:
        value = json.loads(inner)
        if isinstance(value, dict):
            return name, value
    except ValueError:
        pass
    args: dict[str, Any] = {}  # clipped arguments: recover the fields that matter
    for key in ("path", "command", "kind", "note", "name", "pattern"):
        found = re.search(_STRING_FIELD.format(key), inner)
        if found:
            try:
                args[key] = json.loads(f'"{found.group(1)}"')
            except ValueError:
                args[key] = found.group(1)
    return name, args


def _calls(blocks: Sequence[_Block]) -> list[_HistoryCall]:
    """Tool calls in order, each paired with the next unclaimed result of the same tool."""
    calls: list[_HistoryCall] = []
    waiting: list[int] = []
    for index, block in enumerate(blocks):
        if block.kind == "assistant":
            text_lines: list[str] = []
            raws: list[str] = []
            for line in block.text.splitlines():
                if line.startswith("-> "):
                    raws.append(line)
                elif raws:
                    raws[-1] += "\n" + line
                else:
                    text_lines.append(line)
            text = "\n".join(text_lines).strip()
            waiting = []
            for raw in raws:
                parsed = _parse_call(raw)
                if parsed is not None:
                    waiting.append(len(calls))
                    calls.append(_HistoryCall(parsed[0], parsed[1], text, index, None))
        elif block.kind == "tool":
            for position in waiting:
                call = calls[position]
                if call.result is None and (call.name == block.name or not block.name):
                    calls[position] = _HistoryCall(call.name, call.args, call.text, call.block, block)
                    waiting.remove(position)
                    break
    return calls


def _previous_state(prompt: str) -> Capsule | None:
    at = prompt.find(_PREVIOUS)
    if at < 0:
        return None
    start = prompt.find("{", at)
    if start < 0:
        return None
    try:
        raw, _ = json.JSONDecoder().raw_decode(prompt, start)
        return Capsule.from_json(raw, where="previous capsule state")
    except (ValueError, CapsuleFormatError):
        return None


def _history_text(prompt: str) -> str:
    start, end = prompt.find("<history>"), prompt.rfind("</history>")
    if start < 0:
        return prompt
    return prompt[start + len("<history>"):end if end > start else len(prompt)]


def _verification(command: str, result: _Block | None) -> Verification:
    if result is None:
        return Verification(command, "unknown", "no result recorded")
    exit_code = _EXIT.search(result.text)
    lines = _SUMMARY_LINE.findall(result.text)
    detail = "; ".join(re.sub(r" in [\d.]+s$", "", line.strip()) for line in lines[-2:])
    if exit_code is None:
        return Verification(command, "unknown", _clip(detail or "no exit code in the output", 200))
    status = "passed" if exit_code.group(1) == "0" else "failed"
    return Verification(command, status, _clip(detail or f"exit code {exit_code.group(1)}", 200))


def summarize_history(prompt: str) -> str:
    """The capsule JSON answer for a summarizer prompt (see :func:`build_summary_prompt`).

    Deterministic: the same prompt always gives the same answer. The answer validates with
    :func:`~soba_notebook.compaction.summarize.parse_capsule_answer`.
    """
    previous = _previous_state(prompt)
    blocks = _blocks(_history_text(prompt))
    calls = _calls(blocks)
    prompts = [(i, b.text) for i, b in enumerate(blocks)
               if b.kind == "user" and b.text.strip() and not b.text.lstrip().startswith("<context_capsule")]

    files_read: list[str] = []
    files_modified: list[str] = []
    checks: list[Verification] = []
    milestones: list[str] = []
    decisions: list[Decision] = []
    skills: list[str] = list(previous.active_skills) if previous else []
    milestone_blocks = [i for i, b in enumerate(blocks) if b.kind == "checkpoint" and b.name == "milestone"]
    for call in calls:
        ok = call.result is not None and not call.result.error
        path = str(call.args.get("path", "")).strip()
        if call.name in _FILE_READERS and ok and path:
            files_read.append(path)
        elif call.name in _FILE_WRITERS and ok and path:
            files_modified.append(path)
        elif call.name == "shell":
            command = str(call.args.get("command", "")).strip()
            if command and _TEST_COMMAND.search(command):
                checks.append(_verification(command, call.result))
        elif call.name == "checkpoint" and call.result is not None and not call.result.error:
            note = str(call.args.get("note", "")).strip()
            if call.args.get("kind") == "milestone" and note:
                milestones.append(note)
                milestone_blocks.append(call.block)
            elif call.args.get("kind") == "plan_pivot" and note:
                decisions.append(Decision(note, _clip(call.text, 400)))
        elif call.name == "activate_skill" and ok and call.args.get("name"):
            skills.append(str(call.args["name"]))
        elif call.name == "deactivate_skill" and ok and call.args.get("name"):
            skills = [s for s in skills if s != call.args["name"]]
    for block in blocks:  # checkpoint entries recorded by the agent, in case the calls were clipped away
        if block.kind == "checkpoint" and block.name == "milestone" and block.text.strip():
            milestones.append(block.text.strip())

    last_prompt = prompts[-1] if prompts else None
    last_milestone = max(milestone_blocks, default=-1)
    # finished: a milestone after the latest request (or, with no request in this part of the
    # history, any milestone); unknown otherwise, and then the previous capsule's active work rolls on
    finished = last_milestone >= 0 and last_milestone > (last_prompt[0] if last_prompt else -1)
    last_check = checks[-1] if checks else None

    goal = (previous.goal if previous and previous.goal else "") or (_clip(prompts[0][1], 400) if prompts else "")
    constraints = [_clip(line, 200) for _, text in prompts for line in text.splitlines()
                   if _CONSTRAINT.search(line)][:5]
    if finished:
        active = ["Waiting for the next user request"]
    else:
        active = [f"Latest request: {_clip(last_prompt[1], 300)}"] if last_prompt else []
    blockers = []
    next_steps: list[str] = []
    if last_check is not None and last_check.status == "failed":
        blockers.append(_clip(f"`{last_check.command}` fails: {last_check.detail}", 300))
        next_steps.append(f"Read the failing output, fix the cause, then re-run `{last_check.command}`.")
    elif not finished:
        next_steps.append("Re-read the files listed under Files modified before changing them; finish the latest "
                          "request and verify it.")
    else:
        next_steps.append("The latest request is finished and verified; wait for the next user request.")

    summary = Capsule(
        goal=goal,
        constraints=merge_unique(constraints),
        done=merge_unique(milestones),
        active=tuple(active),
        decisions=tuple(decisions),
        blockers=tuple(blockers),
        next_steps=tuple(next_steps),
        files_read=merge_unique(files_read),
        files_modified=merge_unique(files_modified),
        verification=tuple(checks),
        active_skills=merge_unique(skills),
    )
    state = roll(previous, summary) if previous is not None else summary
    answer = state.to_json()
    for key in ("schemaVersion", "covers", "rolledFrom"):
        answer.pop(key, None)
    return json.dumps(answer, ensure_ascii=False)

