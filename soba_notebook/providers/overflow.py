"""Recognising a context overflow, and the figures it states.

Whether an error means "your prompt is longer than my context window" decides whether the agent
runs its one overflow-recovery compaction, so the recogniser is pure, lives in one place, and
errs on the side of the exact wordings servers really send (OpenAI, Anthropic and the common
OpenAI-compatible servers: vLLM, llama.cpp, Ollama, LM Studio, OpenRouter, Mistral, Groq…).
The figures a message states (requested tokens, the server's limit) let the recovery check that
its retry is smaller than the request that was refused.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from soba_notebook.errors import ContextOverflowError

__all__ = ["OVERFLOW_MARKERS", "generated_past_its_context", "is_context_overflow", "overflow_error",
           "overflow_figures"]

#: Lower-case fragments of real context-overflow messages. Sources: OpenAI (code and message),
#: Anthropic ("prompt is too long", "input length and `max_tokens` exceed context limit"), vLLM and
#: OpenRouter ("maximum context length"), llama.cpp ("exceeds the available context size"),
#: Ollama ("longer than the model's context length"), LM Studio ("context length of only"),
#: Bedrock ("input is too long"), Gemini's OpenAI endpoint ("exceeds the maximum number of tokens"),
#: Groq ("reduce the length of the messages"), xAI ("maximum prompt length").
OVERFLOW_MARKERS: tuple[str, ...] = (
    "context_length_exceeded",
    "maximum context length",
    "context length exceeded",
    "prompt is too long",
    "input is too long",
    "too many tokens",
    "exceeds the context window",
    "exceed context limit",
    "exceeds the available context size",
    "exceeds the context size",
    "longer than the model's context length",
    "longer than the maximum context length",
    "exceeds the maximum context length",
    "exceeds context length",
    "exceeds the context length",
    "context window exceeded",
    "context_window_exceeded",
    "exceeds the maximum number of tokens",
    "reduce the length of the messages",
    "maximum prompt length",
    "context length of only",
)

#: Fragments that mean a *rate* limit on tokens, which must not be mistaken for an overflow
#: ("Request too large ... on tokens per min (TPM)").
_RATE_LIMIT_MARKERS = ("per min", "rate limit", "rate_limit", "tokens per day", "(tpm)", "(tpd)")


def is_context_overflow(status: int | None, body_text: str) -> bool:
    """True when an error (HTTP ``status`` may be ``None`` for a mid-stream error event) says the
    request was longer than the model's context window.

    Rate limits (429) and authentication failures are never overflows, whatever their wording.
    """
    if status in (401, 403, 429):
        return False
    text = (body_text or "").lower()
    if not text or any(marker in text for marker in _RATE_LIMIT_MARKERS):
        return False
    return any(marker in text for marker in OVERFLOW_MARKERS)


_LIMIT_PATTERNS = (
    re.compile(r"maximum context length is (\d[\d,]*)"),
    re.compile(r"context (?:size|window|length) (?:of (?:only )?)?\(?(\d[\d,]*) tokens"),
    re.compile(r"> (\d[\d,]*) maximum"),
    re.compile(r'"n_ctx"\s*:\s*(\d+)'),
)
_REQUESTED_PATTERNS = (
    re.compile(r"messages resulted in (\d[\d,]*)"),
    re.compile(r"too long: (\d[\d,]*) tokens"),
    re.compile(r"input length \((\d[\d,]*) tokens\)"),
    re.compile(r'"n_prompt_tokens"\s*:\s*(\d+)'),
    re.compile(r"you requested (?:about )?(\d[\d,]*)"),
    re.compile(r"requested tokens \((\d+)\)"),
)


def _first_number(patterns: Sequence[re.Pattern[str]], text: str) -> int | None:
    for pattern in patterns:
        match = pattern.search(text)
        if match:
            return int(match.group(1).replace(",", ""))
    return None


def overflow_figures(body_text: str) -> tuple[int | None, int | None]:
    """``(requested tokens, context limit)`` as an overflow message states them; each ``None``
    when the message does not say. The requested count is what the server says the request came
    to; vLLM and llama-cpp-python include the reserved completion ("you requested 2311 tokens
    (2055 in the messages, 256 in the completion)")."""
    text = (body_text or "").lower()
    return _first_number(_REQUESTED_PATTERNS, text), _first_number(_LIMIT_PATTERNS, text)


_COMPLETION_PATTERN = re.compile(r"(\d[\d,]*) in the completion")


def overflow_error(message: str, body_text: str, status: int | None = None) -> ContextOverflowError:
    """A :class:`ContextOverflowError` carrying the figures its body states."""
    requested, limit = overflow_figures(body_text)
    completion = _first_number((_COMPLETION_PATTERN,), (body_text or "").lower())
    return ContextOverflowError(message, status=status, requested_tokens=requested, context_limit=limit,
                                completion_tokens=completion)


def generated_past_its_context(error: ContextOverflowError, max_output_tokens: int,
                               estimated_input: int | None = None) -> bool:
    """True when the overflow was the server's own generation, not the request that was sent.

    Two shapes of it are recognised. The server says it produced more completion tokens than
    ``max_output_tokens`` allowed while the prompt with that allowance fits its context; or the
    prompt it says overflowed is far larger (1.5x) than the request sent (``estimated_input``,
    SOBA's figure for it), which itself fits with its allowance. llama-cpp-python shows both: its
    automatic tool choice ignores ``max_tokens`` when the model answers in text, and keeps
    appending the model's function calls to its own prompt until that exceeds the context.
    Compacting would not help such a request; resending it would repeat it.
    """
    requested, limit, completion = error.requested_tokens, error.context_limit, error.completion_tokens
    if requested is None or limit is None:
        return False
    if completion is not None and completion > max_output_tokens:
        return requested - completion + max_output_tokens <= limit
    if completion is None or estimated_input is None:
        # only a message that splits prompt and completion (llama-cpp-python, vLLM) states a
        # prompt precise enough to hold against SOBA's figure
        return False
    stated_prompt = requested - completion
    return estimated_input + max_output_tokens <= 0.9 * limit and stated_prompt > 1.5 * estimated_input
