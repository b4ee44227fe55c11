"""Live progress of one compaction: the monotonic percentage the cell and widget show.

Split from the barrier (which holds the pipeline) because progress is its own concern: a
percentage that only moves forward, emitted as ``compaction_progress`` events, and the wait for a
summary that keeps it moving while the model works (seed section 3: "Compacting context before
response · 82%").
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..events import EventBus
from ..session.payloads import CompactionProgressPayload

__all__ = ["Phase", "wait_with_progress"]


class Phase:
    """Monotonic 0..100 progress for one operation."""

    def __init__(self, bus: EventBus, operation_id: str) -> None:
        self.bus, self.operation_id, self.percent = bus, operation_id, 0

    def __call__(self, phase: str, percent: float) -> None:
        pct = max(self.percent, min(100, int(percent)))
        if pct != self.percent or phase in ("plan", "done"):
            self.percent = pct
            self.bus.emit("compaction_progress", **CompactionProgressPayload(operation_id=self.operation_id,
                                                                             phase=phase, percent=pct))


async def wait_with_progress(task: asyncio.Future[Any], waiter: asyncio.Future[Any], timeout: float,
                             progress: Phase, interval: float) -> set[asyncio.Future[Any]]:
    """Wait for the summary (or the cancel signal) at most ``timeout`` seconds, moving the
    progress while it is generated: the share of ``timeoutMs`` elapsed is an honest bound on
    how far along it is (at ``timeoutMs`` the deterministic capsule takes over), and the
    summarizer's own chunks-done figure moves it further when it is larger."""
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
        progress("summarize", 10 + 69 * min(1.0, (loop.time() - start) / timeout))
