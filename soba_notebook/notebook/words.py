"""The words and numbers every front end shows (widget, cell, terminal), in one place.

Owns the small formatters that turn event data into what a person reads, so the browser, the
running cell and the terminal say exactly the same thing: token counts with thousands
separators, compaction progress, a change in percent with one true minus sign, seconds waited,
a retried request's note; and the defensive readers of event payload values (a payload may come
from an older writer, or hold a value of the wrong type). Pure functions, nothing imported above
the standard library.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TextIO

__all__ = ["as_float", "as_int", "as_str", "elapsed_text", "format_tokens", "isatty", "progress_text",
           "reclaimed_phrase", "retry_text", "signed_percent"]


def format_tokens(value: int | float | None) -> str:
    """``41230 -> "41,230"``; ``None`` (not measured yet) renders as an em dash."""
    if value is None:
        return "—"
    return f"{round(value):,}"


def progress_text(percent: float, trigger: str | None = None, waiting_for: str | None = None) -> str:
    """The live line during a barrier, e.g. ``Compacting context before response · 82%``.

    The percent is floored, so 100% only shows when the engine says 100. An explicit ``%compact``
    (trigger ``user``) has no response waiting and says ``Compacting context · 82%``. While the
    summary of ``waiting_for`` has not begun to arrive it says so: ``… · 12% · waiting for gpt-4o``.
    """
    pct = int(max(0.0, min(100.0, percent)))
    what = "Compacting context" if trigger == "user" else "Compacting context before response"
    return f"{what} · {pct}%" + (f" · waiting for {waiting_for}" if waiting_for else "")


def elapsed_text(seconds: float) -> str:
    """Whole seconds waited, as a person reads them: ``0 s``, ``12 s``, ``2 min 05 s``."""
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole} s"
    return f"{whole // 60:,} min {whole % 60:02d} s"


def _delay_text(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:,.0f} s"


def retry_text(data: Mapping[str, Any]) -> str:
    """A ``retry`` event as the transient note both front ends show, e.g. ``connection to the
    server failed (ReadError); retrying in 0.3 s (attempt 1 of 4)``."""
    reason = as_str(data.get("reason")) or "the request failed"
    delay = as_float(data.get("delay"))
    attempt, most = as_int(data.get("attempt")), as_int(data.get("max_retries"))
    when = f" in {_delay_text(delay)}" if delay is not None else ""
    which = f" (attempt {attempt:,} of {most:,})" if attempt and most else ""
    return f"{reason}; retrying{when}{which}"


def as_int(value: Any) -> int | None:
    """An integer payload value (a finite float rounded); ``None`` for anything else, bools included."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return round(value)
    return None


def as_float(value: Any) -> float | None:
    """A finite number payload value as a float; ``None`` for anything else, bools included."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def as_str(value: Any) -> str | None:
    """A payload value as text; ``None`` for a missing or empty one."""
    if value is None:
        return None
    text = str(value)
    return text or None


def signed_percent(change: float) -> str:
    """A change in percent with one sign, a true minus for a fall: ``−68.8%``, ``+15.8%``, ``0.0%``."""
    if round(change, 1) == 0:
        return "0.0%"
    return f"{'+' if change > 0 else '−'}{abs(change):.1f}%"


def reclaimed_phrase(percent: float) -> str:
    """``reclaimed 68.8%``, or ``grew 15.8%`` when the context came out larger (never ``-15.8%``)."""
    return f"grew {-percent:.1f}%" if round(percent, 1) < 0 else f"reclaimed {percent:.1f}%"


def isatty(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal (so a line may be rewritten in place with ANSI codes)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
