"""The offline demo model: a deterministic :class:`~soba_notebook.providers.base.Provider`.

It needs no network and no key, so tests, demos and a fresh install with no provider configured
all have a model to talk to. It goes through the same interface as the real providers: it
streams :class:`~soba_notebook.providers.base.StreamEvent` values (text deltas, tool-call starts
and argument fragments, usage), reports realistic :class:`~soba_notebook.session.entries.Usage`
(the request and the reply counted with the ``gpt-4o`` encoding, marked ``counted``: SOBA's count,
so the budget never calls it ``provider_usage``), and raises
:class:`~soba_notebook.errors.ContextOverflowError` when a request exceeds its ``context_window``,
like a provider that refuses a request that is too long. It is always labelled as what it is
(``label``, and a ``[offline scripted model]`` marker at the start of every turn's first reply
and final answer), so nobody mistakes its output for a language model's.

This module owns the two kinds of answer:

* **Agent requests** (``purpose == "agent"``): the next step of the scripted coding scenario,
  decided by :func:`soba_notebook.demo.scenario.decide` from the request's messages alone,
  so it keeps going after compaction.
* **Summarization requests**, recognised by their explicit kind (``purpose == "summarize"``),
  never by their prompt text: one JSON capsule object, the real extractor's deterministic capsule
  of the entries the request carries (``summary_source``), built by
  :func:`soba_notebook.demo.summary.summary_answer`. A summarize request without entries is an
  error: the model never guesses them back from the prompt.

Knobs for tests: ``stream_delay`` (seconds between stream events, so a turn can be cancelled
mid-stream), ``summary_delay`` and ``fail_summaries`` (a slow or failing summarizer), and
``context_window`` (the overflow error).
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from ..errors import ContextOverflowError, ProviderError
from ..providers.base import ModelRequest, ModelResponse, StreamEvent
from ..providers.capabilities import ProviderCapabilities
from ..session.entries import ToolCall, Usage
from ..tokens import MESSAGE_OVERHEAD, TokenCounter
from .scenario import MARKER, Step, decide
from .summary import summary_answer

__all__ = ["COUNTING_MODEL", "LABEL", "MARKER", "ScriptedModel"]

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
class ScriptedModel(ProviderCapabilities):
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
        if request.purpose == "summarize":
            step = await self._summarize(request)
        else:
            step = decide(request.messages, [t.name for t in request.tools] if request.tools else None)
        # counted, not reported: the budget calls what it builds on this an estimate
        usage = Usage(input=prompt_tokens, output=self.count_output(step.text, step.calls), counted=True)
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
        if request.summary_source is None:
            raise ProviderError("scripted: a summarize request must carry the entries it summarizes "
                                "(ModelRequest.summary_source); the offline model does not read them back "
                                "from the prompt text")
        return Step(summary_answer(request.summary_source))

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
