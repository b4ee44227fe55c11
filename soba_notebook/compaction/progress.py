"""Live progress of one compaction: the monotonic percentage the cell and widget show.

Split from the barrier (which holds the pipeline) because progress is its own concern: a
percentage that only moves forward, emitted as ``compaction_progress`` events, and the wait for a
summary that keeps it moving while the model works (seed section 3: "Compacting context before
response · 82%").

While a summary is generated, the percent follows the summary's text as it streams in, against
the size the summary is expected to have (:func:`streamed_share`), so it reaches the end of its
band when the summary does. Before its first token arrives (a server still reading the prompt, or
one that does not stream) nothing measures how far along it is: the events then name the model
waited for (``waiting_for``), every display says "waiting for <model>", and the percent moves
only with the share of ``timeoutMs`` elapsed, an honest bound (at ``timeoutMs`` the deterministic
capsule takes over). A share of the timeout alone stalled at a third and jumped to the end when a
summary took a third of it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..events import EventBus
from ..session.payloads import CompactionProgressPayload

__all__ = ["Phase", "streamed_share", "wait_with_progress"]

#: The share of its band a summary reaches when exactly its expected size has streamed in; past
#: that it goes on towards the band's end without reaching it (:func:`streamed_share`).
EXPECTED_SHARE = 0.9


def streamed_share(streamed: int, expected: int) -> float:
    """How far along a summary is, 0..1, from its size so far and the size it is expected to have.

    Monotone in ``streamed``, and below 1 however long the summary runs: a summary larger than
    expected slows down near the end instead of stopping, and only its completion says 1."""
    if streamed <= 0 or expected <= 0:
        return 0.0
    ratio = streamed / expected
    if ratio <= 1:
        return EXPECTED_SHARE * ratio
    return EXPECTED_SHARE + (1 - EXPECTED_SHARE) * (1 - 1 / ratio)


class Phase:
    """Monotonic 0..100 progress for one operation; :attr:`waiting_for` names the model whose
    summary has not begun to arrive (every event says so while it is set)."""

    def __init__(self, bus: EventBus, operation_id: str) -> None:
        self.bus, self.operation_id, self.percent = bus, operation_id, 0
        self.waiting_for: str | None = None

    def __call__(self, phase: str, percent: float, *, say: bool = False) -> None:
        pct = max(self.percent, min(100, int(percent)))
        if pct != self.percent or say or phase in ("plan", "done"):
            self.percent = pct
            payload = CompactionProgressPayload(operation_id=self.operation_id, phase=phase, percent=pct)
            if self.waiting_for:
                payload["waiting_for"] = self.waiting_for
            self.bus.emit("compaction_progress", **payload)

    def summarizing(self, fraction: float) -> None:
        """The summarizer's figure (0..1 of the summary) in the summary's band, 10..80%: its text
        has begun to arrive, so nothing is waited for any more."""
        self.wait_for(None)
        self("summarize", 10 + 70 * max(0.0, min(1.0, fraction)))

    def wait_for(self, model: str | None) -> None:
        """Say that the summary of ``model`` is awaited (``None``: it has begun to arrive)."""
        if model != self.waiting_for:
            self.waiting_for = model
            self("summarize", self.percent, say=True)


async def wait_with_progress(task: asyncio.Future[Any], waiter: asyncio.Future[Any], timeout: float,
                             progress: Phase, interval: float) -> set[asyncio.Future[Any]]:
    """Wait for the summary (or the cancel signal) at most ``timeout`` seconds. Until its text
    begins to arrive (``progress.waiting_for`` is set) the share of ``timeoutMs`` elapsed moves the
    progress; after that the summary's own figure does (module docstring)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while True:
        remaining = start + timeout - loop.time()
        if remaining <= 0:
            return set()
        done, _ = await asyncio.wait({task, waiter}, timeout=min(interval, remaining),
                                     return_when=asyncio.FIRST_COMPLETED)
        if done:
            return done
        if progress.waiting_for:
            progress("summarize", 10 + 69 * min(1.0, (loop.time() - start) / timeout))
