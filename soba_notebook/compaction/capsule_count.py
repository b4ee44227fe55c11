"""The server's own count of a new capsule's text, where the server tokenizes text on request.

A capsule is text no reply has counted yet, so the engine's "after" figure sizes it with the
local tokenizer and the ratio calibrated on the conversation. That ratio does not carry over to
every text: a 135M model's capsule full of made-up identifiers measured 597 tokens by tiktoken and
837 by the model's own tokenizer (1.40x, against about 1.0 for the conversation), and the
compaction's "after" figure came out 5.5% under the server's next prompt count (CI run 7 of
issue 26). Where the provider can count a text exactly (a local llama.cpp server:
``count_text_tokens``), the capsule's text is counted once as it is generated, and the difference
is kept with the capsule entry (``textTokens``), so every later measure of that capsule (the
"after" figure, the budget of the context that starts with it, a reopened session's) carries the
server's count.

A model's capsule is counted, and the local capsule that replaces one too large (the summary
finished, so the server is idle: a local capsule of file paths was 5.8% under the server's count in
CI run 15). A fallback after a summary that timed out, failed or was cancelled is not:
llama-cpp-python may still be generating the abandoned summary, and a count would wait behind it.
A count is bounded by :data:`TEXT_COUNT_TIMEOUT` and is an extra: a failed or slow one keeps the
estimate. Replays (no provider) never count, so their figures stay a pure function of the session.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ..tokens import TokenCounter

__all__ = ["TEXT_COUNT_TIMEOUT", "CapsuleTextCounts", "TextCount"]

log = logging.getLogger(__name__)

#: seconds a count may take: a local server answers in milliseconds; a busy one is not waited for
TEXT_COUNT_TIMEOUT = 5.0

TextCount = Callable[[str], Awaitable[int | None]]


class CapsuleTextCounts:
    """The server's counts of capsule texts (a few, the latest kept) and the corrections they make."""

    def __init__(self, counter: TokenCounter, count: TextCount | None = None) -> None:
        self.counter = counter
        #: the provider's exact count of a text (``None``: no server count, the estimate stands)
        self.count = count
        self.timeout = TEXT_COUNT_TIMEOUT
        self._exact: dict[str, int] = {}

    async def learn(self, text: str) -> int | None:
        """Ask the server's count of ``text`` and keep it; the count, or ``None`` when there was none."""
        if self.count is None or not text or text in self._exact:
            return None
        try:
            exact = await asyncio.wait_for(self.count(text), self.timeout)
        except TimeoutError:
            return None
        except Exception as exc:  # an extra: no failure of it may end a compaction
            log.debug("the server's count of a capsule failed", exc_info=exc)
            return None
        if not isinstance(exact, int) or isinstance(exact, bool) or exact <= 0:
            return None
        if len(self._exact) >= 8:  # one capsule is in force at a time; a long session never grows this
            self._exact.clear()
        self._exact[text] = exact
        return exact

    def counted(self, text: str) -> int | None:
        """The server's count of ``text``, if it was counted."""
        return self._exact.get(text)

    def scale(self, text: str) -> float:
        """How much larger the server's count of ``text`` is than the local count (1.0 when the
        server never counted it): the predictor learns a model capsule's size the way the "after"
        figure measures it (``barrier._observe``)."""
        local = self.counter.count_text(text)
        return (local + self.extra(text)) / local if local > 0 else 1.0

    def extra(self, text: str, counted: int | None = None) -> int:
        """Raw tokens to add to the local count of ``text`` so that, calibrated, it sizes to the
        server's count (``counted``, as a capsule entry keeps it, else the one learned here); 0
        when the server never counted it."""
        exact = counted if counted is not None else self._exact.get(text)
        ratio = self.counter.calibration.ratio(self.counter.model)
        if exact is None or ratio <= 0:
            return 0
        # in raw units: the budget calibrates raw counts, so the capsule then sizes to ``exact``
        return round(exact / ratio) - self.counter.count_text(text)
