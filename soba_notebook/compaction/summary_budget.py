"""How large a summary request may be: its input sized to the context the server really has, its
output to a capsule whose schema bounds fit the output budget.

A summary request is a request like any other: the server refuses it (or cuts it off) when its
prompt and its reply do not fit the server's context. Sizing it from ``model.contextWindow`` alone
overflowed a llama-server whose ``n_ctx`` was 4,096 while the config said 32,000 (issue 22), so the
window here is the smaller of the two (:func:`summary_window`), less a margin for the estimate's
error (:data:`SUMMARY_MARGIN`).

A schema-constrained answer (``response_format``, a grammar on llama.cpp servers) cannot stop
early: the model writes until the schema's bounds or the output budget end it, and a budget that
ends first cuts the JSON in half (the capsule then falls back to ``degraded``). So the schema's
bounds are chosen to fit the budget at a pessimistic rate (:func:`schema_output_tokens`), and a
budget too small for the smallest useful schema is raised to fit it (:func:`fitted_output_budget`).
Pure functions: no provider, no session.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = [
    "SUMMARY_MARGIN",
    "WORST_CHARS_PER_TOKEN",
    "fitted_output_budget",
    "schema_output_tokens",
    "summary_output_budget",
    "summary_window",
]

#: share of the window a summary request leaves unused: the estimate's error in the server's
#: tokenizer, and the chat template's own tokens around the messages
SUMMARY_MARGIN = 0.10
#: characters per token a worst-case constrained answer is counted at: a small model under a
#: grammar writes odd text (digits, punctuation, rare words) that tokenizes far denser than prose
WORST_CHARS_PER_TOKEN = 2.0
#: tokens of the separator and whitespace a JSON writer may put between two values
_SEPARATOR_TOKENS = 2


def summary_window(configured: int, server: int | None) -> int:
    """The window a summary request must fit: the configured one, or the server's own when the
    provider learned a smaller one (llama.cpp's ``/props``, a ``/v1/models`` entry)."""
    return min(configured, server) if server else configured


def summary_output_budget(context_window: int) -> int:
    """Output tokens a summary may use: sized to a capsule, not to the model's reply budget (a
    capsule needs about a thousand tokens whatever ``maxOutputTokens`` is), and at most a quarter
    of the window so the history still fits beside it."""
    return max(256, min(4_000, context_window // 4))


def _string_tokens(length: int) -> int:
    return math.ceil(length / WORST_CHARS_PER_TOKEN) + 2  # the quotes, an escape


def schema_output_tokens(schema: Mapping[str, Any]) -> int:
    """The most tokens a JSON answer that keeps to ``schema``'s bounds can take, counted at
    :data:`WORST_CHARS_PER_TOKEN` with room for separators and whitespace. A string needs
    ``maxLength``, an array ``maxItems``; an unbounded one counts as 10,000 tokens (it does not
    fit any summary budget, which is the point)."""
    kind = schema.get("type")
    if kind == "string":
        if "enum" in schema:
            return max(_string_tokens(len(str(option))) for option in schema["enum"])
        length = schema.get("maxLength")
        return _string_tokens(length) if isinstance(length, int) else 10_000
    if kind == "array":
        items = schema.get("maxItems")
        if not isinstance(items, int):
            return 10_000
        return 2 + items * (schema_output_tokens(schema.get("items") or {}) + _SEPARATOR_TOKENS)
    if kind == "object":
        properties: Mapping[str, Any] = schema.get("properties") or {}
        return 2 + sum(_string_tokens(len(key)) + _SEPARATOR_TOKENS + schema_output_tokens(value)
                       for key, value in properties.items())
    return 4  # a number, a boolean, null


def fitted_output_budget(budget: int, smallest_schema: Mapping[str, Any]) -> int:
    """``budget``, raised to what the smallest capsule schema needs when it is less: an answer the
    budget cuts off is worth nothing, one a little longer than planned is a capsule."""
    return max(budget, schema_output_tokens(smallest_schema))
