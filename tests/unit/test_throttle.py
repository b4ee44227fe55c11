"""Throttle: bounded delivery rate, latest value wins, the final value always arrives.

Time is simulated with ManualClock; nothing here sleeps or asserts on a real clock.
"""

from __future__ import annotations

import itertools
import threading

import pytest

from soba_notebook.notebook.throttle import ManualClock, Throttle, ThrottleStats


class Recorder:
    """A sink that remembers what it got and when (on the simulated clock)."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.calls: list[tuple[float, object]] = []

    def __call__(self, value: object) -> None:
        self.calls.append((self.clock(), value))

    @property
    def values(self) -> list[object]:
        return [value for _, value in self.calls]


def make(max_rate: float = 10.0) -> tuple[ManualClock, Recorder, Throttle[object]]:
    clock = ManualClock()
    sink = Recorder(clock)
    return clock, sink, Throttle(sink, max_rate=max_rate, clock=clock, timer=clock.timer)


def max_calls_in_any_window(times: list[float], window: float) -> int:
    return max((sum(1 for t in times if start <= t < start + window) for start in times), default=0)


def test_ten_thousand_pushes_in_one_second_reach_the_sink_at_most_eleven_times_and_end_exact() -> None:
    clock, sink, throttle = make(max_rate=10)
    for i in range(10_000):
        clock.set(i / 10_000)  # fires any trailing timer that came due
        throttle.push(i)
    clock.advance(1.0)  # let the trailing flush run

    times = [t for t, _ in sink.calls]
    assert len(sink.calls) <= 11  # leading edge at 0.0 plus one per 100 ms slot
    assert max_calls_in_any_window(times, 1.0) <= 11
    assert sink.values[-1] == 9_999
    assert not throttle.pending


def test_deliveries_are_at_least_one_interval_apart() -> None:
    clock, sink, throttle = make(max_rate=10)
    for i in range(5_000):
        clock.set(i / 2_000)
        throttle.push(i)
    clock.advance(1.0)
    times = [t for t, _ in sink.calls]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps and min(gaps) >= 0.1 - 1e-9


def test_latest_value_wins_and_intermediate_values_are_dropped_not_queued() -> None:
    clock, sink, throttle = make()
    throttle.push("first")  # leading edge: delivered at once
    for value in ("a", "b", "c"):
        throttle.push(value)
    assert sink.values == ["first"]
    assert clock.scheduled == 1  # one trailing timer, however many pushes
    clock.advance(0.1)
    assert sink.values == ["first", "c"]
    assert throttle.stats == ThrottleStats(pushes=4, deliveries=2, coalesced=2, errors=0)


def test_first_push_after_a_quiet_period_is_delivered_immediately() -> None:
    clock, sink, throttle = make()
    throttle.push(1)
    clock.advance(5.0)
    throttle.push(2)
    assert sink.values == [1, 2]
    assert clock.scheduled == 0


def test_trailing_flush_delivers_the_final_value_without_another_push() -> None:
    clock, sink, throttle = make()
    throttle.push(1)
    throttle.push(2)
    assert sink.values == [1]
    clock.advance(0.05)
    assert sink.values == [1]  # the slot is not free yet
    clock.advance(0.05)
    assert sink.values == [1, 2]


def test_flush_forces_the_pending_value_out_and_cancels_the_timer() -> None:
    clock, sink, throttle = make()
    throttle.push(1)
    throttle.push(2)
    assert throttle.flush() is True
    assert sink.values == [1, 2]
    clock.advance(1.0)
    assert sink.values == [1, 2]  # the cancelled timer delivered nothing twice
    assert throttle.flush() is False


def test_close_delivers_pending_and_refuses_later_pushes() -> None:
    _, sink, throttle = make()
    throttle.push(1)
    throttle.push(2)
    throttle.close()
    assert sink.values == [1, 2]
    with pytest.raises(RuntimeError, match="closed"):
        throttle.push(3)


def test_a_failing_sink_is_reported_and_never_breaks_the_producer() -> None:
    clock = ManualClock()
    errors: list[Exception] = []

    def sink(value: object) -> None:
        raise ValueError(f"boom {value}")

    throttle: Throttle[int] = Throttle(sink, clock=clock, timer=clock.timer, on_error=errors.append)
    throttle.push(1)
    throttle.push(2)
    clock.advance(1.0)
    assert [str(e) for e in errors] == ["boom 1", "boom 2"]
    assert throttle.stats.errors == 2


def test_max_rate_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_rate"):
        Throttle(print, max_rate=0)


def test_concurrent_producers_end_with_the_exact_final_state_delivered_in_order() -> None:
    """Four threads mutate one shared state and push it (like the widget does); real timers."""

    class Counter:
        def __init__(self) -> None:
            self.lock = threading.Lock()
            self.value = 0

        def bump(self) -> None:
            with self.lock:
                self.value += 1

    counter = Counter()
    seen: list[int] = []
    throttle: Throttle[Counter] = Throttle(lambda c: seen.append(c.value), max_rate=50)

    def produce() -> None:
        for _ in range(2_500):
            counter.bump()
            throttle.push(counter)

    threads = [threading.Thread(target=produce) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    throttle.flush()

    assert seen[-1] == 10_000
    assert seen == sorted(seen)  # never an older state after a newer one
    assert len(seen) < 10_000  # coalesced, not queued
