"""Which thread may change an agent and its compaction engine, and the changes waiting for it.

The agent and its engine are not thread-safe. Once a runtime adopts an agent (``agent/runtime.py``)
one thread runs its turns and compactions, and only that thread changes their state: the config,
compaction intents, the entries the agent appends. Any thread may read what is published for it
(a ``BudgetSnapshot``, the config's current value); every other change is sent to the agent's
thread as a job, or posted here for the running turn's next step.

:class:`Owner` enforces the rule instead of trusting every caller to remember it: after
:meth:`Owner.bind` a guarded change made on another thread raises :class:`WrongThread` at once,
so a magic that forgets to go through the agent's thread fails its test rather than racing a
running turn. Before a runtime binds it (a script, a test, the replay simulator) the thread that
calls is the owner. The posted changes are applied in the order posted by :meth:`apply_posted`,
which the agent calls at the start of each step and the runtime before each job.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

__all__ = ["Owner", "WrongThread"]


class WrongThread(RuntimeError):
    """A change to the agent's state was made on a thread that does not own it: a bug, never a user's mistake."""


class Owner:
    """The thread that owns one agent and its engine (none until bound), and the changes posted for it."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._posted: deque[Callable[[], object]] = deque()  # appended and taken atomically, from any thread

    def bind(self, thread: threading.Thread) -> None:
        """From now on only ``thread`` may make a guarded change."""
        self._thread = thread

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def check(self, what: str) -> None:
        """Raise :class:`WrongThread` unless the calling thread may change the state (``what`` names the change)."""
        owner, here = self._thread, threading.current_thread()
        if owner is not None and here is not owner:
            raise WrongThread(f"{what} changes the agent's state and runs only on its thread ({owner.name}), "
                              f"not on {here.name}: submit it as a job or post it for the next step")

    def post(self, change: Callable[[], object]) -> None:
        """Keep ``change`` for the owner's next step (or next job); callable from any thread."""
        self._posted.append(change)

    def apply_posted(self) -> int:
        """Apply the posted changes, oldest first, on the owning thread; how many there were."""
        self.check("applying posted changes")
        applied = 0
        while self._posted:
            self._posted.popleft()()
            applied += 1
        return applied
