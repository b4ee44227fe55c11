"""Model summarization into a Context Capsule: prompt, chunking, parsing back.

The summarizer is given the serialized history being replaced and the previous capsule's state,
and must answer with the capsule as one JSON object. The answer is parsed, validated
(:func:`~soba_notebook.session.capsule_schema.validate_capsule_json`) and returned; the barrier then
grounds it in the history (:mod:`.grounding`): files, verification results and skills are the
deterministic extractor's, whatever the model claimed.

It does not know providers: it is handed a ``complete`` coroutine (a :class:`SummaryCall` -> the
answer text), which the agent layer binds to the configured model, or to a separate compaction
model. The call carries the texts a language model reads (system prompt and user prompt) and
what the prompt was made from (the chunk's entries and the previous state), so a model without
language understanding, the offline demo model, can answer from the entries themselves.

History larger than the summarizer's own window is summarized in chunks, each rolling the state
from the previous chunk, so compaction never fails for being too big. Long tool results are
truncated in the summarizer's input (the transcript keeps them whole).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import CapsuleFormatError
from ..session.entries import Entry
from ..session.payloads import checkpoint_data
from ..tokens import TokenCounter
from .capsule import Capsule, roll

__all__ = [
    "SUMMARY_SYSTEM_PROMPT",
    "CompleteFn",
    "ModelSummarizer",
    "Summarizer",
    "SummaryCall",
    "SummaryRequest",
    "build_summary_prompt",
    "capsule_schema",
    "chunk_entries",
    "parse_capsule_answer",
    "serialize_entries",
    "summary_input_tokens",
    "summary_output_budget",
]

ProgressFn = Callable[[float], None]

TOOL_RESULT_CHARS = 2_000
TOOL_ARGS_CHARS = 1_000

SUMMARY_SYSTEM_PROMPT = """You compact the working history of a coding agent into a Context Capsule.
The capsule replaces the history in the agent's context, so it must hold everything needed to continue:
the goal, constraints the user set, what is done, active and pending, decisions and why, unresolved
blockers, concrete next steps, files read and modified, verification commands with their last result,
active skills and artifacts. Keep facts, drop chatter. Never invent files or results.
Answer with ONE JSON object and nothing else, with exactly these keys:
{"goal": str, "constraints": [str], "done": [str], "active": [str], "pending": [str],
 "decisions": [{"what": str, "why": str}], "blockers": [str], "nextSteps": [str],
 "filesRead": [str], "filesModified": [str],
 "verification": [{"command": str, "status": "passed"|"failed"|"unknown", "detail": str}],
 "activeSkills": [str], "artifacts": [str]}"""


_SCHEMA_ORDER = ("constraints", "done", "active", "pending", "decisions", "blockers", "nextSteps", "filesRead",
                 "filesModified", "verification", "activeSkills", "artifacts")
#: characters a worst-case answer may use per output token (JSON is dense in punctuation)
_CHARS_PER_TOKEN = 3


def summary_output_budget(context_window: int) -> int:
    """Output tokens a summary may use: sized to a capsule, not to the model's reply budget (a
    capsule needs about a thousand tokens whatever ``maxOutputTokens`` is), and at most a quarter
    of the window so the history still fits beside it."""
    return max(256, min(4_000, context_window // 4))


def capsule_schema(max_output_tokens: int) -> dict[str, Any]:
    """The capsule as a JSON schema for constrained output (OpenAI structured outputs, llama.cpp
    grammars). Every list and string is bounded so that even a model that fills every field to the
    limit finishes within ``max_output_tokens``: a grammar-constrained small model otherwise keeps
    adding items until the output cap cuts its JSON in half."""
    chars = max_output_tokens * _CHARS_PER_TOKEN
    # 10 string lists + 2 object lists of two strings each: 14 strings per item; 600 characters
    # for keys and punctuation; strings shorten before lists drop below one item
    text_len = max(40, min(160, (chars - 600) // 14 - 8))
    items = max(1, (chars - 600) // (14 * (text_len + 8)))

    def text(limit: int = text_len) -> dict[str, Any]:
        return {"type": "string", "maxLength": limit}

    def listing(item: Mapping[str, Any]) -> dict[str, Any]:
        return {"type": "array", "items": dict(item), "maxItems": items}

    decision = {"type": "object", "properties": {"what": text(), "why": text()}, "required": ["what", "why"],
                "additionalProperties": False}
    check = {"type": "object",
             "properties": {"command": text(), "detail": text(),
                            "status": {"type": "string", "enum": ["passed", "failed", "unknown"]}},
             "required": ["command", "status", "detail"], "additionalProperties": False}
    properties: dict[str, Any] = {"goal": text(min(400, 2 * text_len))}
    for name in _SCHEMA_ORDER:  # the order the system prompt lists them in
        item = decision if name == "decisions" else check if name == "verification" else text()
        properties[name] = listing(item)
    return {"type": "object", "properties": properties, "required": list(properties),
            "additionalProperties": False}


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    entries: tuple[Entry, ...]
    previous: Capsule | None
    instructions: str | None = None


@dataclass(frozen=True, slots=True)
class SummaryCall:
    """One request to the summarizing model.

    ``system`` and ``prompt`` are the texts a language model reads; ``entries`` (the chunk
    serialized into ``prompt``) and ``previous`` (the state ``prompt`` asks to roll forward) are
    what those texts were made from, for a model that answers from data instead.
    """

    system: str
    prompt: str
    max_output_tokens: int
    entries: tuple[Entry, ...]
    previous: Capsule | None


#: a :class:`SummaryCall` -> the model's text answer
CompleteFn = Callable[[SummaryCall], Awaitable[str]]


class Summarizer(Protocol):
    async def summarize(self, request: SummaryRequest, progress: ProgressFn) -> Capsule: ...


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: limit // 2] + f"\n[... {len(text) - limit} characters omitted ...]\n" + text[-limit // 2:]


def serialize_entries(entries: Sequence[Entry]) -> str:
    """History as plain text for the summarizer; tool results and arguments clipped."""
    out: list[str] = []
    for e in entries:
        if e.type == "checkpoint":
            mark = checkpoint_data(e)
            out.append(f"[checkpoint {mark.get('kind')}] {mark.get('note', '')}")
            continue
        if not e.is_model_input:
            continue
        role = e.role
        if role == "user":
            out.append(f"[user {e.id}]\n{e.text}")
        elif role == "assistant":
            parts = [f"[assistant {e.id}]"]
            if e.text:
                parts.append(e.text)
            for call in e.tool_calls:
                args = json.dumps(dict(call.arguments), ensure_ascii=False)
                parts.append(f"-> {call.name}({_clip(args, TOOL_ARGS_CHARS)})")
            out.append("\n".join(parts))
        elif role == "tool":
            flag = " ERROR" if e.message.get("isError") else ""
            out.append(f"[tool result {e.message.get('name', '')}{flag}]\n{_clip(e.text, TOOL_RESULT_CHARS)}")
    return "\n\n".join(out)


def build_summary_prompt(history: str, previous: Capsule | None, instructions: str | None) -> str:
    parts = []
    if previous is not None:
        parts.append("Previous capsule state (roll it forward; keep what is still true):\n"
                     + json.dumps(previous.to_json(), ensure_ascii=False))
    parts.append("History to compact:\n<history>\n" + history + "\n</history>")
    if instructions:
        parts.append(f"Additional instructions from the user: {instructions}")
    parts.append("Answer with the JSON object only.")
    return "\n\n".join(parts)


def summary_input_tokens(request: SummaryRequest, counter: TokenCounter) -> int:
    """Estimated input tokens of the summary request for ``request``: the system prompt and the
    prompt of one chunk holding all of it (a chunked request also repeats the rolling state)."""
    prompt = build_summary_prompt(serialize_entries(request.entries), request.previous, request.instructions)
    return counter.count_text(SUMMARY_SYSTEM_PROMPT) + counter.count_text(prompt)


_FENCE = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)


def parse_capsule_answer(text: str) -> Capsule:
    """The capsule in a model's answer: a bare JSON object, or one inside a code fence."""
    candidates: list[str] = [m.group(1) for m in _FENCE.finditer(text)]
    start, end = text.find("{"), text.rfind("}")
    if start >= 0 and end > start:
        candidates.append(text[start:end + 1])
    last_error = "no JSON object in the answer"
    for raw in candidates:
        try:
            # strict=False: a raw newline or tab inside a string (grammar-constrained local models
            # emit them) is the model's text, not a reason to throw the whole capsule away
            obj: Any = json.loads(raw, strict=False)
        except ValueError as exc:
            last_error = f"not valid JSON ({exc})"
            continue
        if isinstance(obj, dict):
            obj.setdefault("schemaVersion", 1)
            obj = {k: v for k, v in obj.items() if k != "covers"}
            return Capsule.from_json(obj, where="summarizer answer")
    raise CapsuleFormatError(f"summarizer answer: {last_error}")


def chunk_entries(entries: Sequence[Entry], counter: TokenCounter, budget_tokens: int) -> list[list[Entry]]:
    """Split ``entries`` into runs whose serialized text fits ``budget_tokens`` each."""
    chunks: list[list[Entry]] = [[]]
    used = 0
    for e in entries:
        cost = counter.count_text(serialize_entries([e])) + 2
        if chunks[-1] and used + cost > budget_tokens:
            chunks.append([])
            used = 0
        chunks[-1].append(e)
        used += cost
    return [c for c in chunks if c]


class ModelSummarizer:
    """Summarizes with a model through ``complete``; chunks when the input exceeds its window."""

    def __init__(self, complete: CompleteFn, counter: TokenCounter, *, context_window: int,
                 max_output_tokens: int = 4_000) -> None:
        self.complete = complete
        self.counter = counter
        self.context_window = context_window
        self.max_output_tokens = max_output_tokens

    @property
    def input_budget(self) -> int:
        fixed = self.counter.count_text(SUMMARY_SYSTEM_PROMPT) + 500
        return max(1_000, self.context_window - self.max_output_tokens - fixed)

    async def summarize(self, request: SummaryRequest, progress: ProgressFn) -> Capsule:
        previous = request.previous
        prev_cost = self.counter.count_text(json.dumps(previous.to_json())) if previous else 0
        budget = max(500, self.input_budget - prev_cost - 2_000)  # room for the rolling state
        chunks = chunk_entries(request.entries, self.counter, budget)
        state = previous
        for n, chunk in enumerate(chunks):
            prompt = build_summary_prompt(serialize_entries(chunk), state, request.instructions)
            answer = await self.complete(SummaryCall(SUMMARY_SYSTEM_PROMPT, prompt, self.max_output_tokens,
                                                     tuple(chunk), state))
            summary = parse_capsule_answer(answer)
            # the model saw the previous state; rolling keeps anything it forgot to carry over
            state = roll(state, summary)
            progress((n + 1) / len(chunks))
        return state or Capsule()
