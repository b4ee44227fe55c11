"""The overflow retry rule: after a provider context overflow, resend only a smaller request.

Seed section 4: a real context-overflow error gets one mandatory recovery compact and at most one
retry, and "failure does not send the same oversized request again". A recovery that completes
but leaves the request as large as the rejected one (a capsule bigger than what it replaced) is
such a failure: :func:`retry_budget` says how large the retry may be, :func:`retry_refusal` why
it may not be sent. Pure functions; they know no provider.

Sizes are SOBA's estimates in the budget check's units (:func:`request_tokens` with the
tracker's ``sized``: anchored on the server's latest reported prompt), the units the recovery
compaction measures its result in. When the provider's error states its limit and what the
request came to, the limit is converted into the same units by that ratio (the provider may
count differently, and some count the reserved completion as well).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..tokens import MESSAGE_OVERHEAD, TokenCounter

__all__ = ["RETRY_MARGIN", "overflow_figures", "request_tokens", "retry_budget", "retry_refusal"]

#: share of the server's context a retry leaves unused: the estimate's error in the server's
#: tokenizer (a retry budget that fits only on paper overflowed again, issue 22)
RETRY_MARGIN = 0.05


def overflow_figures(error: BaseException) -> tuple[int | None, int | None]:
    """``(requested, limit)`` tokens as the provider stated them in ``error``, each None if unsaid.

    The provider layer reads them from its wire's error body (``ContextOverflowError.
    requested_tokens`` / ``context_limit``); an error without them states nothing. A requested
    figure that includes the reserved completion (vLLM, llama-cpp-python: "2055 in the messages,
    256 in the completion") is the prompt's part only here: the rejected request is measured
    without its completion too.
    """
    requested = getattr(error, "requested_tokens", None)
    limit = getattr(error, "context_limit", None)
    completion = getattr(error, "completion_tokens", None)
    if isinstance(requested, int) and isinstance(completion, int) and 0 < completion < requested:
        requested -= completion
    return (requested if isinstance(requested, int) else None, limit if isinstance(limit, int) else None)


def retry_budget(rejected: int, requested: int | None = None, limit: int | None = None, *,
                 window: int | None = None, reply: int = 0, next_turn: int = 0, margin: float = RETRY_MARGIN) -> int:
    """The most tokens (SOBA's estimate) the retry may have: fewer than the rejected request and,
    where the server's context is known, small enough to leave the reply and the next turn room.

    The context is the limit the error states (converted into SOBA's units by the ratio of the
    rejected request to what the server says it came to) or ``window``, the server's context as
    the provider learned it, whichever is smaller. Of it, ``margin`` is left for the estimate's
    error, ``reply`` for the reply (``maxOutputTokens``) and ``next_turn`` for what the next turn
    adds (the safety reserve, at most a tenth of the context): a retry that fills the context to
    the last token leaves the next short turn overflowing again.
    """
    budget = rejected - 1
    context: int | None = None
    if requested is not None and requested > 0 and not 0.2 <= requested / max(rejected, 1) <= 5.0:
        limit = None  # no tokenizer differs this much: the figures describe some other request
    if limit is not None and limit > 0:
        context = rejected * limit // requested if requested is not None and requested > 0 else limit
    if window is not None and window > 0:
        context = min(context, window) if context is not None else window
    if context is not None:
        budget = min(budget, math.floor(context * (1 - margin)) - reply - min(next_turn, context // 10))
    return max(0, budget)


def retry_refusal(retry: int, budget: int, rejected: int) -> str | None:
    """Why the retry may not be sent, or None when it is small enough."""
    if retry <= budget:
        return None
    return (f"the context overflow recovery compaction left the request at {retry:,} tokens, not under the "
            f"{budget + 1:,} it had to get below (the provider rejected {rejected:,}); the oversized request "
            f"was not resent")


def request_tokens(counter: TokenCounter, system: str, tools: Iterable[Any], messages: Iterable[Mapping[str, Any]],
                   *, sized: Callable[[int], int] | None = None) -> int:
    """SOBA's estimate of one whole request: ``sized`` applied to its raw count (the budget
    tracker's, anchored on the server's latest reported prompt), else the calibrated count.

    The raw count is the tracker's own (system prompt with its message overhead, tools, messages
    with the reply priming), so the anchor's difference is exact. Without ``sized`` the figure
    is in other units than the recovery compaction's: where the server counts the system prompt
    and tools unlike the calibration (issue 22), a budget of the rejected request's calibrated
    size was less than the compaction's own measure of any continuation, and the recovery failed.
    """
    raw = (counter.count_text(system) + (MESSAGE_OVERHEAD if system else 0) + counter.count_tools(tools)
           + counter.count_messages(messages))
    return sized(raw) if sized is not None else counter.calibrated(raw)
