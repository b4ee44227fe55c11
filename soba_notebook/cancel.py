"""A cancellation signal that crosses threads: the notebook's stop button to the agent's loop.

The kernel thread calls :meth:`CancelToken.cancel`; the agent and the compaction barrier, running
on the runtime's event loop, check :attr:`CancelToken.cancelled` before every irreversible step
(an append, a tool run, a request) and can await it alongside other work.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

__all__ = ["CancelToken", "abandon"]


class CancelToken:
    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ""

    def cancel(self, reason: str = "cancelled by the user") -> None:
        self.reason = self.reason or reason
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    async def wait(self, poll_seconds: float = 0.01) -> None:
        """Returns once cancelled (polls: the setter may be on any thread, with no loop at hand)."""
        while not self._event.is_set():
            await asyncio.sleep(poll_seconds)


async def abandon(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` if it is still running and wait until it has unwound, so nothing it holds
    (a model request, a prompt) outlives the step that gave up on it; what it raises is dropped:
    the caller already decided the outcome (a timeout, a cancel, the first of two to finish)."""
    if not task.done():
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
