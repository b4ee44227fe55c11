"""The event bus between the engine and whoever watches it (widget, terminal, flight recorder).

The engine emits plain :class:`Event` values; it knows none of its subscribers. Event names are
the closed set in :data:`EVENT_TYPES`: DESIGN.md's ten ("Events") plus the three that say what an
inference is doing while nothing else moves (``request_start``: the request is out;
``response_start``: the model's reply began, or a new tool call in it; ``retry``: a failed attempt
is retried, a transient note and never an error) and ``cost``: what the session and its last turn
have cost in money, after every priced request. A subscriber that raises is reported once
through the ``error`` event and never breaks the agent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EVENT_TYPES", "Event", "EventBus", "Subscriber"]

EVENT_TYPES = frozenset({
    "turn_start", "message_delta", "tool_start", "tool_end", "budget",
    "compaction_start", "compaction_progress", "compaction_end", "turn_end", "error",
    "request_start", "response_start", "retry", "cost",
})


@dataclass(frozen=True, slots=True)
class Event:
    """One thing that happened. ``data`` is JSON-serializable (it may go to a widget)."""

    type: str
    data: Mapping[str, Any] = field(default_factory=dict)
    ts: float = field(default_factory=time.time)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)


Subscriber = Callable[[Event], None]


class EventBus:
    """Synchronous fan-out: ``emit`` calls every subscriber in order on the emitting thread."""

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []
        self._lock = threading.Lock()

    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        """Add a subscriber; returns a function that removes it."""
        with self._lock:
            self._subscribers.append(fn)

        def unsubscribe() -> None:
            with self._lock:
                if fn in self._subscribers:
                    self._subscribers.remove(fn)

        return unsubscribe

    def emit(self, type: str, **data: Any) -> Event:
        if type not in EVENT_TYPES:
            raise ValueError(f"unknown event type {type!r}; known: {sorted(EVENT_TYPES)}")
        event = Event(type, data)
        with self._lock:
            subscribers = list(self._subscribers)
        for fn in subscribers:
            try:
                fn(event)
            except Exception as exc:  # a broken display must never break the agent
                if type != "error":
                    self.emit("error", source="subscriber", message=f"{type} subscriber failed: {exc!r}")
        return event
