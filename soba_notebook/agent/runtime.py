"""The agent's home: one dedicated thread with its own asyncio loop, and a queue of jobs.

A Jupyter kernel already runs an event loop on its main thread, magics cannot be async, and
``asyncio.run`` fails there; so the agent runs on a thread of its own. The kernel thread submits
jobs and gets :class:`concurrent.futures.Future` objects back. A job is a turn (``submit``) or
any other model work on the session, an explicit compaction or a capsule summary
(``submit_job``): they share one FIFO queue, so a summary is never generated while a turn's
model request is in flight (seed section 3) and nothing is appended mid-turn. A job submitted
while another runs waits and is taken after it; its queue position is returned.
``cancel_current`` cancels the running job (turn or compaction) from any thread through its
cancel token. ``stop`` cancels everything and *waits* for the running job to end, so a session is
never switched or closed under a running turn: its tool is stopped and gets its recorded
``cancelled`` result first. A job may carry a ``tag`` (anything: the notebook's per-cell event
queue); :meth:`AgentRuntime.job_tag`, asked on the runtime's thread, names the running job's tag,
so whoever subscribes to the agent's events knows which job emitted each one and can send its
output to the cell that started it. Nothing here knows IPython, so scripts and tests use it as it is.

Once a runtime adopts an agent, its thread is the only one that changes the agent and its engine
(:mod:`~soba_notebook.ownership`; a guarded change from another thread raises): other threads
submit a job, or post a change that the running turn applies at its next step and that this
runtime applies before its next job when no step took it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..cancel import CancelToken
from .loop import Agent

__all__ = ["AgentRuntime", "QueuedTurn", "Stopped"]

#: A job: given the cancel token the runtime holds for it, the coroutine to run.
Job = Callable[[CancelToken], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class QueuedTurn:
    prompt: str  # the turn's prompt, or a label for another job (``%compact``)
    future: concurrent.futures.Future[Any]
    position: int  # jobs ahead of it when it was queued (0: runs at once)
    cancel: CancelToken | None = None


@dataclass(frozen=True, slots=True)
class Stopped:
    """What :meth:`AgentRuntime.stop` stopped."""

    label: str | None  # the running job's prompt or label; None when nothing ran
    result: Any = None  # what it returned (a ``TurnResult``, a ``CompactionOutcome``); None if it raised
    ended: bool = True  # it ended within the wait
    dropped: int = 0  # queued jobs dropped before they started


class AgentRuntime:
    """Runs turns of one :class:`Agent` on a background thread, one at a time, in FIFO order."""

    def __init__(self, agent: Agent, *, name: str = "soba-agent") -> None:
        self.agent = agent
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()
        agent.engine.owner.bind(self._thread)  # from now on only this thread changes the agent (ownership.py)
        self._lock = threading.Lock()
        self._queue: deque[tuple[Job, concurrent.futures.Future[Any], CancelToken, str, object]] = deque()
        self._current: CancelToken | None = None
        self._current_tag: object = None
        self._current_job: QueuedTurn | None = None
        self._running = False
        self._closed = False

    # -- turns -------------------------------------------------------------------------------
    def submit(self, prompt: str, *, tag: object = None) -> QueuedTurn:
        """Queue a turn; it starts at once when nothing runs, else after the jobs ahead of it."""
        return self.submit_job(lambda token: self.agent.run_turn(prompt, token), prompt, tag=tag)

    def submit_job(self, job: Job, label: str = "", *, tag: object = None) -> QueuedTurn:
        """Queue any model work on the session (``%compact``, ``%capsule create``) behind the
        running turn and the jobs already queued; it is cancelled exactly like a turn. ``tag``
        is what :meth:`job_tag` says while it runs."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        token = CancelToken()
        with self._lock:
            if self._closed:
                raise RuntimeError("the agent runtime is closed")
            position = len(self._queue) + (1 if self._current is not None else 0)
            self._queue.append((job, future, token, label, tag))
            start = not self._running
            self._running = True
        if start:
            self._loop.call_soon_threadsafe(lambda: self._loop.create_task(self._drain()))
        return QueuedTurn(label, future, position, token)

    async def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._running = False
                    self._current = None
                    self._current_job = None
                    self._current_tag = None
                    return
                job, future, token, label, self._current_tag = self._queue.popleft()
                self._current = token
                self._current_job = QueuedTurn(label, future, 0, token)
            if not future.set_running_or_notify_cancel():
                continue
            try:
                self.agent.engine.owner.apply_posted()  # posted for a step no turn took: applied before the job
                result = await job(token)
            except BaseException as exc:  # the future carries it to whoever waits
                future.set_exception(exc)
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    raise
            else:
                future.set_result(result)

    def cancel_current(self, reason: str = "cancelled by the user") -> bool:
        """Cancel the running job, turn or compaction (not the queued ones); True if one was running."""
        with self._lock:
            token = self._current
        if token is None:
            return False
        token.cancel(reason)
        return True

    def withdraw(self, queued: QueuedTurn, reason: str = "cancelled by the user") -> None:
        """Cancel one job: dropped from the queue if it has not started, else its token is set."""
        with self._lock:
            for item in list(self._queue):
                if item[1] is queued.future:
                    self._queue.remove(item)
                    break
        if not queued.future.cancel() and queued.cancel is not None:
            queued.cancel.cancel(reason)

    def cancel_all(self) -> int:
        """Cancel the running job and drop the queued ones (``%soba stop``); returns how many were dropped."""
        with self._lock:
            dropped = list(self._queue)
            self._queue.clear()
        for _, future, _, _, _ in dropped:
            future.cancel()
        self.cancel_current()
        return len(dropped)

    def stop(self, reason: str = "cancelled by the user", timeout: float = 30.0) -> Stopped:
        """Drop the queued jobs, cancel the running one and wait (up to ``timeout`` seconds) until
        it has ended: a running tool is stopped and its call answered before this returns."""
        with self._lock:
            current = self._current_job
            dropped = list(self._queue)
            self._queue.clear()
        for _, future, _, _, _ in dropped:
            future.cancel()
        if current is None or current.future.done():
            return Stopped(None, dropped=len(dropped))
        if current.cancel is not None:
            current.cancel.cancel(reason)
        try:
            result = current.future.result(timeout)
        except concurrent.futures.TimeoutError:
            return Stopped(current.prompt, ended=False, dropped=len(dropped))
        except BaseException:  # it ended by raising (or was cancelled): it ended all the same
            result = None
        return Stopped(current.prompt, result, dropped=len(dropped))

    def job_tag(self) -> object:
        """The running job's ``tag``, when asked on the runtime's own thread (an event the job
        emitted); ``None`` on any other thread, where an event belongs to no job."""
        if threading.current_thread() is not self._thread:
            return None
        with self._lock:
            return self._current_tag

    @property
    def busy(self) -> bool:
        with self._lock:
            return self._running

    @property
    def queued(self) -> int:
        with self._lock:
            return len(self._queue)

    def close(self, timeout: float = 5.0) -> None:
        with self._lock:
            self._closed = True
        self.stop("the session was closed", timeout)  # never abandon a running tool call

        try:  # the providers' HTTP clients belong to this loop: closed on it
            asyncio.run_coroutine_threadsafe(self.agent.aclose(), self._loop).result(timeout)
        except Exception:  # closing is best effort; the thread is a daemon
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
