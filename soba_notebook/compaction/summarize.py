"""Model summarization into a Context Capsule: prompt, chunking, parsing back.

The summarizer is given the serialized history being replaced and the previous capsule's state,
and must answer with the capsule as one JSON object. What it is asked for, in the prompt and in
the constrained-output schema, is derived from the capsule's one field definition (every field of
:data:`~soba_notebook.session.capsule_schema.CAPSULE_FIELDS` with an ``ask``). The answer is
parsed, validated (:func:`~soba_notebook.session.capsule_schema.validate_capsule_json`) and
returned; the barrier then
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
import math
import re
import textwrap
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import CapsuleFormatError
from ..session.capsule_schema import CAPSULE_FIELDS, STATUSES, CapsuleField, FieldKind
from ..session.entries import Entry
from ..session.payloads import checkpoint_data
from ..tokens import TokenCounter
from .capsule import Capsule, roll
from .progress import streamed_share
from .summary_budget import SUMMARY_MARGIN, fitted_output_budget, schema_output_tokens, summary_output_budget

__all__ = [
    "ASKED_FIELDS",
    "PROMPT_INSTRUCTIONS",
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
    "smallest_capsule_schema",
    "summary_input_tokens",
    "summary_output_budget",
    "summary_system_prompt",
]

ProgressFn = Callable[[float], None]

TOOL_RESULT_CHARS = 2_000
TOOL_ARGS_CHARS = 1_000

#: The fields the model is asked to write, in order (``covers`` and ``rolledFrom`` are the code's).
ASKED_FIELDS: tuple[CapsuleField, ...] = tuple(f for f in CAPSULE_FIELDS if f.ask is not None)
_STATUS_CHOICES = "|".join(f'"{s}"' for s in STATUSES)
#: How each kind of field is written in the prompt's key list.
_PROMPT_SHAPES: dict[FieldKind, str] = {
    "text": "str", "strings": "[str]", "decisions": '[{"what": str, "why": str}]',
    "verification": f'[{{"command": str, "status": {_STATUS_CHOICES}, "detail": str}}]'}


def _said_as_list(items: Sequence[str]) -> str:
    return ", ".join(items[:-1]) + f" and {items[-1]}" if len(items) > 1 else "".join(items)


def _key_list(asked: Sequence[CapsuleField], width: int = 100) -> str:
    """``{"goal": str, "constraints": [str], ...}``, wrapped at ``width`` characters."""
    lines, line = [], "{"
    for n, f in enumerate(asked):
        item = f'"{f.key}": {_PROMPT_SHAPES[f.kind]}' + ("}" if n == len(asked) - 1 else ",")
        if len(line) > 1 and len(line) + 1 + len(item) > width:
            lines.append(line)
            line = " "
        line += ("" if line in ("{", " ") else " ") + item
    return "\n".join([*lines, line])


def summary_system_prompt(asked: Sequence[CapsuleField] = ASKED_FIELDS) -> str:
    """The summarizer's system prompt: what each of the ``asked`` fields holds, and their keys."""
    return "\n".join([
        "You compact the working history of a coding agent into a Context Capsule.",
        textwrap.fill("The capsule replaces the history in the agent's context, so it must hold everything needed "
                      f"to continue: {_said_as_list([f.ask or f.title for f in asked])}. Keep facts, drop chatter. "
                      "Never invent files or results.", width=104),
        "Answer with ONE JSON object and nothing else, with exactly these keys:",
        _key_list(asked)])


SUMMARY_SYSTEM_PROMPT = summary_system_prompt()
#: Keys of the fields the code fills (never asked): ignored in a model's answer.
_CODE_KEYS = frozenset(f.key for f in CAPSULE_FIELDS if f.ask is None)

#: characters a worst-case answer may use per output token (JSON is dense in punctuation)
_CHARS_PER_TOKEN = 3
#: strings one list item of each kind holds (a check's status is a short enum, not counted)
_STRINGS_PER_ITEM: dict[FieldKind, int] = {"strings": 1, "decisions": 2, "verification": 2}


#: the shortest string bound a schema is given (a path, a command, a short fact)
_MIN_TEXT = 40
#: strings shorten to this before lists drop items
_PREFERRED_TEXT = 80


def capsule_schema(max_output_tokens: int, asked: Sequence[CapsuleField] = ASKED_FIELDS) -> dict[str, Any]:
    """The capsule as a JSON schema for constrained output (OpenAI structured outputs, llama.cpp
    grammars). Every list and string is bounded so that even a model that fills every field to the
    limit finishes within ``max_output_tokens`` (:func:`~.summary_budget.schema_output_tokens`): a
    grammar-constrained small model otherwise keeps adding items until the output cap cuts its
    JSON in half. Below :func:`smallest_capsule_schema`'s size no schema fits: the request's
    budget is raised to it instead (:func:`~.summary_budget.fitted_output_budget`)."""
    chars = max_output_tokens * _CHARS_PER_TOKEN
    # strings per item over all the lists (14 for the seed's fields); 600 characters for keys and
    # punctuation; strings shorten before lists drop below one item
    per_item = sum(_STRINGS_PER_ITEM.get(f.kind, 0) for f in asked)
    text_len = max(_MIN_TEXT, min(160, (chars - 600) // per_item - 8))
    items = max(1, (chars - 600) // (per_item * (text_len + 8)))
    schema = _bounded_schema(text_len, items, asked)
    while schema_output_tokens(schema) > max_output_tokens and (items > 1 or text_len > _MIN_TEXT):
        if text_len > _PREFERRED_TEXT or items == 1:
            text_len = max(_MIN_TEXT, text_len * 9 // 10)
        else:
            items -= 1
        schema = _bounded_schema(text_len, items, asked)
    return schema


def smallest_capsule_schema(asked: Sequence[CapsuleField] = ASKED_FIELDS) -> dict[str, Any]:
    """The tightest capsule schema: one item per list, the shortest strings."""
    return _bounded_schema(_MIN_TEXT, 1, asked)


def _bounded_schema(text_len: int, items: int, asked: Sequence[CapsuleField]) -> dict[str, Any]:
    def text(limit: int = text_len) -> dict[str, Any]:
        return {"type": "string", "maxLength": limit}

    def listing(item: Mapping[str, Any]) -> dict[str, Any]:
        return {"type": "array", "items": dict(item), "maxItems": items}

    decision = {"type": "object", "properties": {"what": text(), "why": text()}, "required": ["what", "why"],
                "additionalProperties": False}
    check = {"type": "object",
             "properties": {"command": text(), "detail": text(), "status": {"type": "string", "enum": list(STATUSES)}},
             "required": ["command", "status", "detail"], "additionalProperties": False}
    items_of: dict[FieldKind, dict[str, Any]] = {"strings": text(), "decisions": decision, "verification": check}
    properties: dict[str, Any] = {
        f.key: text(min(400, 2 * text_len)) if f.kind == "text" else listing(items_of[f.kind]) for f in asked}
    return {"type": "object", "properties": properties, "required": list(properties),
            "additionalProperties": False}


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    """What to summarize; ``expected_chars``: the size the capsule's JSON is expected to have (0:
    unknown), what the live progress measures the streamed answer against."""

    entries: tuple[Entry, ...]
    previous: Capsule | None
    instructions: str | None = None
    expected_chars: int = 0


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
    #: told each piece of the answer's text as it streams in (the live progress), if the model streams
    on_text: Callable[[str], None] | None = field(default=None, compare=False)


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


_PREVIOUS_HEADING = "Previous capsule state (roll it forward; keep what is still true):"
_HISTORY_HEADING = "History to compact:"
_USER_INSTRUCTIONS = "Additional instructions from the user:"
_ANSWER_LINE = "Answer with the JSON object only."
#: The prompt's own instruction lines (system prompt and the user prompt's fixed lines): a capsule
#: item that repeats one is an echo of the prompt, not a fact about the work (:mod:`.claims`).
PROMPT_INSTRUCTIONS: tuple[str, ...] = (
    *(sentence for line in SUMMARY_SYSTEM_PROMPT.replace("\n", " ").split(". ") if (sentence := line.strip())),
    *(f.ask for f in ASKED_FIELDS if f.ask), _PREVIOUS_HEADING, _HISTORY_HEADING, _USER_INSTRUCTIONS, _ANSWER_LINE)


def build_summary_prompt(history: str, previous: Capsule | None, instructions: str | None) -> str:
    parts = []
    if previous is not None:
        parts.append(f"{_PREVIOUS_HEADING}\n" + json.dumps(previous.to_json(), ensure_ascii=False))
    parts.append(f"{_HISTORY_HEADING}\n<history>\n" + history + "\n</history>")
    if instructions:
        parts.append(f"{_USER_INSTRUCTIONS} {instructions}")
    parts.append(_ANSWER_LINE)
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
            obj = {k: v for k, v in obj.items() if k not in _CODE_KEYS}
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
    """Summarizes with a model through ``complete``; chunks when the input exceeds its window.

    ``context_window`` is the window every summary request must fit, prompt and answer: the agent
    sets the smaller of the configured window and the server's own once the provider knows it
    (:func:`~.summary_budget.summary_window`). Each request leaves :data:`~.summary_budget.
    SUMMARY_MARGIN` of it unused, and its prompt is measured in the server's tokens as far as the
    counter's calibration knows them.
    """

    def __init__(self, complete: CompleteFn, counter: TokenCounter, *, context_window: int,
                 max_output_tokens: int = 4_000) -> None:
        self.complete = complete
        self.counter = counter
        self.context_window = context_window
        self.max_output_tokens = max_output_tokens

    def fit(self, window: int) -> None:
        """Size every later request to ``window`` (the smaller of the configured window and the
        server's): its output budget, raised where the smallest capsule schema needs more."""
        self.context_window = window
        self.max_output_tokens = fitted_output_budget(summary_output_budget(window), smallest_capsule_schema())

    @property
    def input_budget(self) -> int:
        """The most prompt tokens (the counter's raw units) one summary request may carry, system
        prompt included."""
        usable = math.floor(self.context_window * (1 - SUMMARY_MARGIN)) - self.max_output_tokens
        ratio = self.counter.calibration.ratio(self.counter.model)
        return max(0, math.floor(usable / max(ratio, 1e-6)))

    async def summarize(self, request: SummaryRequest, progress: ProgressFn) -> Capsule:
        entries = list(request.entries)
        costs = [self.counter.count_text(serialize_entries([e])) + 2 for e in entries]
        state, done = request.previous, 0
        while done < len(entries):
            # sized with the state as it now is: a rolled state grows from chunk to chunk
            room = self.input_budget - self.counter.count_text(SUMMARY_SYSTEM_PROMPT) - self.counter.count_text(
                build_summary_prompt("", state, request.instructions))
            end, used = done, 0
            while end < len(entries) and (end == done or used + costs[end] <= room):
                used += costs[end]
                end += 1
            chunk = entries[done:end]
            history = _fit(serialize_entries(chunk), room, self.counter)
            prompt = build_summary_prompt(history, state, request.instructions)
            answer = await self.complete(SummaryCall(
                SUMMARY_SYSTEM_PROMPT, prompt, self.max_output_tokens, tuple(chunk), state,
                on_text=_streamed(progress, done / len(entries), (end - done) / len(entries), request.expected_chars)))
            summary = parse_capsule_answer(answer)
            # the model saw the previous state; rolling keeps anything it forgot to carry over
            state = roll(state, summary)
            done = max(end, 1)
            progress(min(1.0, done / max(1, len(entries))))
        return state or Capsule()


def _streamed(progress: ProgressFn, start: float, span: float, expected: int) -> Callable[[str], None]:
    """A chunk's text as it streams in, as progress: from ``start``, ``span`` of the whole when its
    answer is done; each chunk's answer is a whole capsule, of about ``expected`` characters."""
    size = 0

    def on_text(piece: str) -> None:
        nonlocal size
        size += len(piece)
        progress(start + span * streamed_share(size, expected))  # 0 of its span with no size expected

    return on_text


def _fit(history: str, budget: int, counter: TokenCounter) -> str:
    """``history`` clipped in its middle until it counts at most ``budget`` tokens: one entry too
    large for a request on its own (a long user message) is summarized from its head and tail,
    rather than sent past the server's context."""
    budget = max(budget, 50)
    tokens = counter.count_text(history)
    while tokens > budget:
        limit = max(100, int(len(history) * budget / tokens * 0.9))
        clipped = _clip(history, limit)
        if len(clipped) >= len(history):  # the omission marker ate the saving: it would clip forever
            clipped = _clip(history, 100)
        history = clipped
        tokens = counter.count_text(history)
        if len(history) <= 200:
            break
    return history
