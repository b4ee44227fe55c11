"""What a turn says about itself, as pure functions: a retry note, an internal error, a call's key.

Kept apart from the agent loop (:mod:`.loop`) so the loop holds the turn's control flow only.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..providers.capabilities import CapableProvider
from ..session.payloads import RetryPayload

__all__ = ["canonical_arguments", "internal_error", "known_window", "retry_payload"]


def retry_payload(data: Mapping[str, Any]) -> RetryPayload:
    """A provider's ``retry`` stream event as the bus's typed ``retry`` payload (plain reason first)."""
    detail = str(data.get("reason") or "")
    delay, attempt, most = data.get("delay"), data.get("attempt"), data.get("maxRetries")
    status = data.get("status")
    return RetryPayload(provider=str(data.get("provider") or ""),
                        attempt=attempt if isinstance(attempt, int) else 0,
                        max_retries=most if isinstance(most, int) else 0,
                        delay=float(delay) if isinstance(delay, int | float) else 0.0,
                        status=status if isinstance(status, int) else None,
                        reason=str(data.get("say") or detail or "the request failed"), detail=detail)


def known_window(provider: CapableProvider) -> int | None:
    """The context the provider knows its server has (the configured one if it learned none)."""
    window = provider.effective_context_window
    return window if isinstance(window, int) and window > 0 else None


def internal_error(exc: Exception) -> str:
    """The turn's error for a bug: what was raised and where, without a traceback on screen."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
    return (f"internal error: {type(exc).__name__}: {exc}{where}. This is a bug in soba_notebook or in a tool, not "
            "in your request; the turn was ended, its tool calls were answered and the transcript is intact")


def canonical_arguments(arguments: Mapping[str, Any]) -> str:
    """One text per argument value, whatever the key order the model used."""
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)
