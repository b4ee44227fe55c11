"""The overflow retry rule: after a provider context overflow, resend only a smaller request.

Seed section 4: a real context-overflow error gets one mandatory recovery compact and at most one
retry, and "failure does not send the same oversized request again". A recovery that completes
but leaves the request as large as the rejected one (a capsule bigger than what it replaced) is
such a failure: :func:`retry_budget` says how large the retry may be, :func:`retry_refusal` why
it may not be sent. Pure functions; they know no provider.

Sizes are SOBA's own calibrated estimates. When the provider's error states its limit and what
the request came to, the limit is converted into the same units by that ratio (the provider
may count differently, and some count the reserved completion as well).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..tokens import MESSAGE_OVERHEAD, TokenCounter

__all__ = ["overflow_figures", "request_tokens", "retry_budget", "retry_refusal"]

def overflow_figures(error: BaseException) -> tuple[int | None, int | None]:
    """``(requested, limit)`` tokens as the provider stated them in ``error``, each None if unsaid.

    The provider layer reads them from its wire's error body (``ContextOverflowError.
    requested_tokens`` / ``context_limit``); an error without them states nothing.
    """
    requested = getattr(error, "requested_tokens", None)
    limit = getattr(error, "context_limit", None)
    return (requested if isinstance(requested, int) else None, limit if isinstance(limit, int) else None)


def retry_budget(rejected: int, requested: int | None = None, limit: int | None = None) -> int:
    """The most tokens (SOBA's estimate) the retry may have: fewer than the rejected request,
    and, when the provider stated its limit, under that limit in SOBA's units."""
    budget = rejected - 1
    if limit is not None and limit > 0:
        if requested is not None and requested > 0:
            budget = min(budget, rejected * limit // requested)
        else:
            budget = min(budget, limit)
    return max(0, budget)


def retry_refusal(retry: int, budget: int, rejected: int) -> str | None:
    """Why the retry may not be sent, or None when it is small enough."""
    if retry <= budget:
        return None
    return (f"the context overflow recovery compaction left the request at {retry:,} tokens, not under the "
            f"{budget + 1:,} it had to get below (the provider rejected {rejected:,}); the oversized request "
            f"was not resent")


def request_tokens(counter: TokenCounter, system: str, tools: Iterable[Any],
                   messages: Iterable[Mapping[str, Any]]) -> int:
    """SOBA's calibrated estimate of one whole request."""
    raw = (counter.count_text(system) + (MESSAGE_OVERHEAD if system else 0) + counter.count_tools(tools)
           + counter.count_messages(messages))
    return counter.calibrated(raw)
