"""The server's own count of the next request, where the server tells it without generating.

llama.cpp's ``llama-server`` renders and tokenizes a chat request on demand (``/apply-template`` +
``/tokenize``: :meth:`~soba_notebook.providers.openai.OpenAIChatProvider.count_request_tokens`),
two local requests and no generation. The agent asks for it where its figure has nothing to rest
on:

* **a session's first request**, before any reply reported usage: the count calibrates the token
  counter on a whole request and anchors the estimate (:attr:`BudgetTracker.anchor`);
* **the first request after a compaction**: the model input now starts with a capsule no reply
  has counted, so the figure would be the calibrated estimate of text in another tokenizer; the
  count anchors it instead (the calibration keeps learning from spans, not from this).

A count is bounded by :data:`COUNT_TIMEOUT`; one that does not come (a busy or older server, an
error, a server without the endpoints) keeps the estimate and never fails or holds up the turn.
Each attempt leaves a flight record ``exact_count`` (when, outcome, the server's count and SOBA's
estimate), so what happened is visible, also on a machine too loaded to answer in time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ..budget import BudgetTracker
from ..flight import FlightRecorder
from ..providers.base import ModelRequest
from ..tokens import TokenCounter

__all__ = ["COUNT_TIMEOUT", "ExactCounts"]

log = logging.getLogger(__name__)

#: seconds one count (both requests) may take: far above the few milliseconds a local server
#: needs to render and tokenize, short enough that a turn never waits long for a count it can do without
COUNT_TIMEOUT = 10.0

Count = Callable[[ModelRequest], Awaitable[int | None]]


class ExactCounts:
    """Asks the server's count where it is worth it, at most once per model input."""

    def __init__(self, tracker: BudgetTracker, counter: TokenCounter, flight: FlightRecorder | None) -> None:
        self.tracker, self.counter, self.flight = tracker, counter, flight
        self.timeout = COUNT_TIMEOUT
        self._counted: set[str] = set()  # context keys whose first request was counted (or tried)

    def after_compaction_due(self) -> bool:
        """Whether the next request is the first on a model input that starts with a capsule and
        that no reply has reported usage on yet (and it was not counted already)."""
        tracker = self.tracker
        return (tracker.inputs.capsule is not None and tracker.context_key not in self._counted
                and tracker.usage_span() is None)

    async def count(self, count: Count | None, request: ModelRequest, *, when: str) -> int | None:
        """The server's count of ``request`` (the next request as it will be sent), anchoring the
        tracker's figure on it (and, ``when`` it is the ``"first_request"``, calibrating the
        counter on it); ``None`` when the server did not count it, the estimate kept."""
        self._counted.add(self.tracker.context_key)
        if count is None:
            return None
        outcome, exact = "counted", None
        try:
            found = await asyncio.wait_for(count(request), self.timeout)
        except TimeoutError:
            outcome = "timeout"
        except Exception as exc:  # a count is an extra: no failure of it may end a turn
            log.debug("the server's exact count failed", exc_info=exc)
            outcome = "failed"
        else:
            exact = found if isinstance(found, int) and found > 0 else None
            outcome = "counted" if exact is not None else "unavailable"
        raw = self.tracker.estimate_raw()
        estimate = self.tracker.sized(raw)
        if exact is not None:  # a whole request, counted as the server renders it
            if when == "first_request":
                self.counter.observe_usage(raw, exact, whole=True)
            self.tracker.anchor = (exact, raw)
        if self.flight is not None:
            self.flight.record("exact_count", {"when": when, "outcome": outcome, "server_tokens": exact,
                                               "estimate": estimate, "context_key": self.tracker.context_key})
        return exact
