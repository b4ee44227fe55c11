"""The agent's home: one dedicated thread with its own asyncio loop, and a queue of prompts.

A Jupyter kernel already runs an event loop on its main thread, magics cannot be async, and
``asyncio.run`` fails there; so the agent runs on a thread of its own. The kernel thread submits
prompts and gets :class:`concurrent.futures.Future` objects back; a prompt submitted while a turn
runs waits in the queue and is taken after it. ``cancel_current`` stops the running turn from
any thread. Nothing here knows IPython, so scripts and tests use it as it is.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ..cancel import CancelToken
from .loop import Agent, TurnResult

__all__ = ["AgentRuntime", "QueuedTurn"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class QueuedTurn:
    prompt: str
    future: concurrent.futures.Future[TurnResult]
    position: int  # turns ahead of it when it was queued (0: runs at once)


class AgentRuntime:
    """Runs turns of one :class:`Agent` on a background thread, one at a time, in FIFO order."""

    def __init__(self, agent: Agent, *, name: str = "soba-agent") -> None:
        self.agent = agent
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()
        self._lock = threading.Lock()
        self._queue: deque[tuple[str, concurrent.futures.Future[TurnResult], CancelToken]] = deque()
        self._current: CancelToken | None = None
        self._running = False
        self._closed = False

    # -- turns -------------------------------------------------------------------------------
    def submit(self, prompt: str) -> QueuedTurn:
        """Queue a turn; it starts at once when nothing runs, else after the turns ahead of it."""
        future: concurrent.futures.Future[TurnResult] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the agent runtime is closed")
            position = len(self._queue) + (1 if self._current is not None else 0)
            self._queue.append((prompt, future, CancelToken()))
            start = not self._running
            self._running = True
        if start:
            self._loop.call_soon_threadsafe(lambda: self._loop.create_task(self._drain()))
        return QueuedTurn(prompt, future, position)

    async def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._running = False
                    self._current = None
                    return
                prompt, future, token = self._queue.popleft()
                self._current = token
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = await self.agent.run_turn(prompt, token)
            except BaseException as exc:  # the future carries it to whoever waits
                future.set_exception(exc)
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    raise
            else:
                future.set_result(result)

    def cancel_current(self, reason: str = "cancelled by the user") -> bool:
        """Cancel the running turn (not the queued ones); True if one was running."""
        with self._lock:
            token = self._current
        if token is None:
            return False
        token.cancel(reason)
        return True

    def cancel_all(self) -> int:
        """Cancel the running turn and drop the queued ones; returns how many were dropped."""
        with self._lock:
            dropped = list(self._queue)
            self._queue.clear()
        for _, future, _ in dropped:
            future.cancel()
        self.cancel_current()
        return len(dropped)

    @property
    def busy(self) -> bool:
        with self._lock:
            return self._running

    @property
    def queued(self) -> int:
        with self._lock:
            return len(self._queue)

    # -- other coroutines on the agent's loop ------------------------------------------------
    def call(self, fn: Callable[[], Awaitable[T]], timeout: float | None = None) -> T:
        """Run a coroutine (``%compact``) on the agent's loop and wait for it."""
        return asyncio.run_coroutine_threadsafe(fn(), self._loop).result(timeout)  # type: ignore[arg-type]

    def spawn(self, fn: Callable[[], Awaitable[Any]]) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(fn(), self._loop)  # type: ignore[arg-type]

    def close(self, timeout: float = 5.0) -> None:
        with self._lock:
            self._closed = True
        self.cancel_all()

        async def shutdown() -> None:
            with_aclose = getattr(self.agent.provider, "aclose", None)
            if with_aclose is not None:
                await with_aclose()

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout)
        except Exception:  # closing is best effort; the thread is a daemon
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
