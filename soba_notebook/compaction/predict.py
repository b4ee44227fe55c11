"""The prediction made before a soft summary is requested, and what each summary request cost.

Issue 20 item 8: on the real-model tier three soft summaries were generated (87 s, 101 s, 39 s)
and thrown away, because the continuation measured after generation reclaimed 97 tokens, under
``minReclaimableTokens``. The seed's pre-generation estimate (``effective - keepRecentTokens``,
seed section 6) cannot see the capsule's own size, nor a retained tail longer than
``keepRecentTokens`` (the cut lands on a message boundary). That estimate stays exactly as
written, a necessary condition; after it passes, the barrier adds a stricter one: it builds the
deterministic capsule of the same plan (local, milliseconds, no model) and, when a model will
write the capsule, puts it through what the model's answer goes through (grounded in the history,
rolled over the capsule in force: a model capsule carries the previous one's work lists back in,
so without this its size drifts away from the bare deterministic capsule's over a session). It
measures the continuation that *baseline* gives, scales the capsule's share by
:attr:`SavingsPredictor.factor` (then caps it at the capsule's reserve, as the fit will:
:meth:`SavingsPredictor.fitted_capsule_tokens`), and requests no summary when that predicted
continuation already misses the post-generation ROI.

**The factor** is how large a model's capsule is against the baseline of the same plan (both
measured the same way, rendered as model input, both before the fit trims them to the reserve). It starts at
:data:`DEFAULT_FACTOR` and, once a model capsule has been seen, is the *largest* ratio among the
last :data:`WINDOW` model capsules of this engine (every trigger's: a user or hard-limit compact
teaches it too). With no summarizer the capsule *is* the deterministic one, the factor is 1 and
the prediction is exact.

**The bound.** A generated soft summary can still be thrown away only when its capsule is larger,
against the baseline, than every one of the last :data:`WINDOW` (or than
:data:`DEFAULT_FACTOR` before the first): when the ratios vary at random around a steady size
(exchangeable), the chance that the next one exceeds the largest of the last ``k`` is at most
``1 / (k + 1)``, so at most 1 in ``WINDOW + 1`` generations once the window is full, and it costs a
summary only when the prediction was also within that excess of the minimum. Being conservative
has a price too: a prediction that misses where the model's capsule would have passed skips a
soft compact that could have run; the soft limit and the hard limit still compact as before.
``bench/bench_predict.py`` measures both on the shared real transcripts.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_FACTOR", "WINDOW", "SavingsPredictor", "SummaryAttempt"]

#: the model-capsule factor before any model capsule was seen: a model restates the deterministic
#: facts (files, checks and skills are grounded to them) and adds its own prose around them
DEFAULT_FACTOR = 1.25
#: how many recent model capsules the factor is the maximum of
WINDOW = 8


class SavingsPredictor:
    """The learned model-capsule factor of one engine (session); in memory, so a new kernel
    starts again from :data:`DEFAULT_FACTOR`."""

    def __init__(self, default: float = DEFAULT_FACTOR, window: int = WINDOW) -> None:
        if default <= 0 or window < 1:
            raise ValueError(f"SavingsPredictor needs default > 0 and window >= 1, got {default} and {window}")
        self.default = default
        self._ratios: deque[float] = deque(maxlen=window)

    @property
    def factor(self) -> float:
        return max(self._ratios) if self._ratios else self.default

    @property
    def observed(self) -> tuple[float, ...]:
        return tuple(self._ratios)

    def observe(self, model_capsule_tokens: int, local_capsule_tokens: int) -> None:
        """A model capsule cost ``model_capsule_tokens`` where the deterministic capsule of the
        same plan costs ``local_capsule_tokens``."""
        if local_capsule_tokens > 0 and model_capsule_tokens >= 0:
            self._ratios.append(model_capsule_tokens / local_capsule_tokens)

    def capsule_tokens(self, local_capsule_tokens: int, *, model: bool) -> int:
        """The predicted cost of the capsule a compaction will append, from the deterministic
        capsule's: scaled when a model writes it (``model``), exact when it is the local one."""
        return math.ceil(local_capsule_tokens * self.factor) if model else local_capsule_tokens

    def fitted_capsule_tokens(self, baseline_tokens: int, fitted_tokens: int, reserve: int) -> int:
        """The predicted cost of a model's capsule after the fit (:mod:`.capsule_fit`): the baseline
        as grounded, *before* the fit (``baseline_tokens``), scaled; at most the ``reserve`` the fit
        trims to, unless the baseline after its own fit (``fitted_tokens``), scaled, is more (the model's
        extra text may be in what the fit never trims: pending work, the newest items).

        Not the fitted baseline scaled: the fit drops whole items, the largest list's first, so two
        capsules a few tokens apart can come out hundreds apart (the pi replay: 4,638 and 4,641 tokens
        fitted to 3,963 and 4,236 under a 4,250 reserve, and the summary was thrown away)."""
        return min(self.capsule_tokens(baseline_tokens, model=True),
                   max(reserve, self.capsule_tokens(fitted_tokens, model=True)))


@dataclass(frozen=True, slots=True)
class SummaryAttempt:
    """What one compaction predicted, requested and measured: the flight record's account of
    the summary, so misses and their cost can be counted on any tier (never the summary text)."""

    #: a summary request was made to the summarizer (a model call; the local capsule is not one)
    generated: bool = False
    #: the continuation predicted before generation (soft triggers whose seed gate passed)
    predicted_after: int | None = None
    #: the model-capsule factor that prediction used
    factor: float | None = None
    #: the continuation measured after generation, whatever the outcome
    measured_after: int | None = None
    #: estimated input tokens of the summary request (the serialized history and previous state)
    input_tokens: int | None = None
    #: estimated output tokens of the summary (the model's capsule as JSON)
    output_tokens: int | None = None

    def to_record(self) -> dict[str, Any]:
        return {"generated": self.generated, "predicted_after": self.predicted_after,
                "prediction_factor": None if self.factor is None else round(self.factor, 3),
                "measured_after": self.measured_after, "summary_input_tokens": self.input_tokens,
                "summary_output_tokens": self.output_tokens}
