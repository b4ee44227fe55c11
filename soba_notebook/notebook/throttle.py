"""Rate-limited, coalescing delivery of the newest value from a busy thread to a slow sink.

Owns :class:`Throttle`. Why it exists: the agent thread may emit thousands of budget and
compaction-progress events a second, and every widget trait change is a comm message to the
browser. The throttle sits between the two:

* ``push`` never blocks on the sink and never queues: a new value replaces the pending one
  (latest wins), so memory stays constant however fast the producer is;
* at most ``max_rate`` deliveries per second reach the sink (the first push after a quiet period is
  delivered at once; later ones wait for the next slot);
* the final value is always delivered: a trailing timer fires after the last push, and
  :meth:`Throttle.flush` delivers whatever is pending right now;
* deliveries are serialized and in push order, so the sink never sees an older value after a newer.

Clock and timer are injectable; :class:`ManualClock` provides both over simulated time, so tests
(here and in the runtime) prove rate limits without sleeping and without timing assertions.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

__all__ = [
    "Clock",
    "ManualClock",
    "Throttle",
    "ThrottleStats",
    "TimerFactory",
    "TimerHandle",
    "thread_timer",
]

T = TypeVar("T")

_log = logging.getLogger(__name__)

Clock = Callable[[], float]


class TimerHandle(Protocol):
    """What a timer factory returns: something that can be cancelled before it fires."""

    def cancel(self) -> None: ...


#: ``timer(delay_seconds, callback) -> handle``: start a one-shot timer that calls ``callback``
#: later, on any thread. It must never call ``callback`` synchronously from inside the factory.
TimerFactory = Callable[[float, Callable[[], None]], TimerHandle]


def thread_timer(delay: float, callback: Callable[[], None]) -> TimerHandle:
    """The production timer: a daemon :class:`threading.Timer` (it never keeps a kernel alive)."""
    timer = threading.Timer(delay, callback)
    timer.daemon = True
    timer.name = "soba-throttle-timer"
    timer.start()
    return timer


@dataclass(frozen=True, slots=True)
class ThrottleStats:
    """Counters since the throttle was created (for tests, ``%budget`` debugging, benchmarks)."""

    pushes: int
    deliveries: int
    coalesced: int
    errors: int


class Throttle(Generic[T]):
    """Deliver the latest pushed value to ``sink`` at most ``max_rate`` times per second.

    ``push`` may be called from any thread. ``sink`` runs on the pushing thread (leading edge,
    when a slot is free and no delivery is running) or on the timer's thread (trailing edge). A
    sink that raises is counted and passed to ``on_error`` (default: logged); it never breaks the
    producer.
    """

    def __init__(
        self,
        sink: Callable[[T], None],
        *,
        max_rate: float = 10.0,
        clock: Clock = time.monotonic,
        timer: TimerFactory = thread_timer,
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        if not (max_rate > 0 and math.isfinite(max_rate)):
            raise ValueError(f"max_rate must be a positive finite number, got {max_rate!r}")
        self._sink = sink
        self._interval = 1.0 / max_rate
        self._clock = clock
        self._timer_factory = timer
        self._on_error = on_error or self._log_error
        self._lock = threading.Lock()          # guards every field below
        self._deliver_lock = threading.Lock()  # serializes sink calls, keeps them in order
        self._pending: T | None = None
        self._has_pending = False
        self._last_delivery = -math.inf
        self._timer: TimerHandle | None = None
        self._delivering = False
        self._closed = False
        self._pushes = 0
        self._deliveries = 0
        self._coalesced = 0
        self._errors = 0

    @property
    def max_rate(self) -> float:
        return 1.0 / self._interval

    @property
    def pending(self) -> bool:
        """True while a pushed value has not reached the sink yet."""
        with self._lock:
            return self._has_pending

    @property
    def stats(self) -> ThrottleStats:
        with self._lock:
            return ThrottleStats(self._pushes, self._deliveries, self._coalesced, self._errors)

    def push(self, value: T) -> None:
        """Offer a new value; it replaces any value still waiting. Never blocks on the sink."""
        with self._lock:
            if self._closed:
                raise RuntimeError("Throttle is closed; create a new one to deliver more values")
            self._pushes += 1
            if self._has_pending:
                self._coalesced += 1
            self._pending = value
            self._has_pending = True
            now = self._clock()
            due = self._last_delivery + self._interval
            deliver_now = self._timer is None and not self._delivering and now >= due
            if deliver_now:
                self._last_delivery = now  # reserve this slot against a racing push
            elif self._timer is None:
                self._timer = self._timer_factory(max(0.0, due - now), self._on_timer)
        if deliver_now:
            self._deliver()

    def flush(self) -> bool:
        """Deliver the pending value now, ignoring the rate limit. Returns whether one was sent."""
        with self._lock:
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        return self._deliver()

    def close(self) -> None:
        """Deliver what is pending, stop the timer, and refuse further pushes."""
        with self._lock:
            self._closed = True
        self.flush()

    def _on_timer(self) -> None:
        with self._lock:
            self._timer = None
        self._deliver()

    def _deliver(self) -> bool:
        with self._deliver_lock:
            with self._lock:
                if not self._has_pending:
                    return False
                value = self._pending
                self._pending = None
                self._has_pending = False
                self._last_delivery = self._clock()
                self._delivering = True
            try:
                self._sink(value)  # type: ignore[arg-type]  # _has_pending guarantees a T
            except Exception as exc:
                with self._lock:
                    self._errors += 1
                self._on_error(exc)
            else:
                with self._lock:
                    self._deliveries += 1
            finally:
                with self._lock:
                    self._delivering = False
            return True

    @staticmethod
    def _log_error(exc: Exception) -> None:
        _log.warning("throttled sink failed: %r", exc, exc_info=exc)


@dataclass(order=True)
class _Scheduled:
    due: float
    seq: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """Simulated time: a clock (call it) and a timer factory (:meth:`timer`) for :class:`Throttle`.

    Time moves only through :meth:`advance` / :meth:`set`, which run every timer that came due, in
    due order, on the calling thread, with the clock reading each timer's due time while it runs.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._queue: list[_Scheduled] = []
        self._seq = itertools.count()
        self._lock = threading.RLock()

    def __call__(self) -> float:
        return self._now

    @property
    def now(self) -> float:
        return self._now

    @property
    def scheduled(self) -> int:
        """How many timers are waiting (cancelled ones excluded)."""
        with self._lock:
            return sum(not item.cancelled for item in self._queue)

    def timer(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        with self._lock:
            item = _Scheduled(self._now + max(0.0, delay), next(self._seq), callback)
            heapq.heappush(self._queue, item)
            return item

    def advance(self, seconds: float) -> None:
        self.set(self._now + seconds)

    def set(self, when: float) -> None:
        """Move the clock to ``when`` (never backwards), firing the timers due by then."""
        while True:
            with self._lock:
                if not self._queue or self._queue[0].due > when:
                    self._now = max(self._now, when)
                    return
                item = heapq.heappop(self._queue)
                self._now = max(self._now, item.due)
            if not item.cancelled:
                item.callback()
