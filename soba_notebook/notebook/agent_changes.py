"""The kernel thread's changes to the agent, made on the agent's thread at a point the magic states.

The magics run on the kernel's thread, often while a ``%%soba --background`` turn runs on the
agent's. A change the kernel made itself would race that turn (its next request would read a
config swapped under it), so every change is handed to the agent's thread, and the magic says
when it takes effect (:data:`WHEN`):

* **between jobs** (``next_turn``): a job queued on the runtime's FIFO, after the running turn and
  the jobs already queued. For what a turn must not change halfway: the model (``--model``), a
  config file's edits.
* **between steps** (``next_step``): posted to the engine's owner; the running turn applies it at
  the start of its next step (before that step's preflight, never between a tool call and its
  result), and a queued no-op job applies it if no step takes it. For what a user means to apply
  to the work already running: the approval mode, auto-compaction, a checkpoint.

With no job running either way the change runs at once and the kernel waits for it, at most
:data:`CHANGE_WAIT_SECONDS` (the agent's thread is idle, so it runs within milliseconds; the
bound only keeps a broken runtime from hanging the kernel).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ..agent import AgentRuntime

__all__ = ["CHANGE_WAIT_SECONDS", "WHEN", "Change", "When", "change_agent"]

#: The longest the kernel waits for a change the idle agent thread runs at once.
CHANGE_WAIT_SECONDS = 10.0

When = Literal["now", "next_turn", "next_step", "pending"]

#: What a magic prints after the change, for each point it takes effect.
WHEN: dict[When, str] = {
    "now": "applied now",
    "next_turn": "applies from the next turn (the running turn keeps the current setting)",
    "next_step": "applies from the running turn's next step",
    "pending": f"queued on the agent's thread, which did not take it within {CHANGE_WAIT_SECONDS:g} s",
}


@dataclass(frozen=True, slots=True)
class Change:
    """How a change went: when it takes effect, and (``now`` only) what it returned."""

    when: When
    result: Any = None

    @property
    def words(self) -> str:
        return WHEN[self.when]


def change_agent(runtime: AgentRuntime, change: Callable[[], Any], label: str, *, at_step: bool = False,
                 wait: float = CHANGE_WAIT_SECONDS) -> Change:
    """Run ``change`` on the agent's thread: now (and waited for) when no job runs, else between
    jobs, or with ``at_step`` at the running turn's next step. An error the change raises while
    waited for is raised here; later ones end the job (or turn) that applies it."""
    if runtime.busy and at_step:
        runtime.agent.engine.owner.post(change)
        runtime.submit_job(_apply_posted, label)  # applies it after the running job if no step took it
        return Change("next_step")

    async def job(_token: object) -> Any:
        return change()

    # Only the kernel thread submits jobs, so when it finds the runtime idle nothing can start ahead of this one.
    busy = runtime.busy
    queued = runtime.submit_job(job, label)
    if busy:
        return Change("next_turn")
    try:
        return Change("now", queued.future.result(wait))
    except concurrent.futures.TimeoutError:
        return Change("pending")


async def _apply_posted(_token: object) -> None:
    """A job that does nothing: the runtime applies what is posted before each job starts."""
