"""What the server renders of the messages SOBA appends, learned from its replies.

A server counts the prompt its chat template renders, not the messages SOBA sends. Most
templates render every message as sent, and the token calibration absorbs the tokenizer's
difference. Some do not, and no endpoint says so: llama-cpp-python's ``chatml-function-calling``
format drops every tool result's content (``<|im_start|>tool`` and nothing after it) and
HTML-escapes each ``"`` of a call's arguments as ``&#34;``. SOBA's figure for a request after a
tool step would then miss the server's either way.

So each reply that follows another on the same model input is a measurement: the server's prompt
grew by ``grown`` tokens over a span of appended messages whose tool-result content and argument
quotes SOBA knows. Over the last :data:`SPANS` spans, two fits of ``grown ≈ r·counted + k·quotes``
(least squares) — one counting the tool results' content, one not — say which the server does,
and ``k`` what each quote costs. A fit is adopted only on clear evidence (:func:`decide`): a server
that renders everything as sent keeps the plain count. The counter then counts as the server
renders (:meth:`~soba_notebook.tokens.TokenCounter.set_rendering`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..budget import BudgetTracker
from ..relearn import reported_replies
from ..session.entries import Entry
from ..session.store import SessionStore
from ..tokens import MESSAGE_OVERHEAD, TokenCounter, arguments_as_sent, template_escapes

__all__ = ["SPANS", "RenderingLearner", "Span", "decide", "measure_span", "relearn_rendering"]

#: how many recent spans a decision rests on
SPANS = 20
#: fewest spans, and fewest tokens of tool-result content among them, before a decision
MIN_SPANS = 3
MIN_TOOL_TOKENS = 40
#: a hypothesis is adopted when its squared error is under this share of the other's
CLEAR = 0.5
#: the most a ``"`` can cost beyond itself: an entity (``&#34;``, ``&quot;``) of at most six
#: characters, one token each at worst. A fit wanting more is explaining another difference that
#: comes with the quotes (a span whose tool result always follows the same quoted call), not them.
MAX_QUOTE_TOKENS = 5.0


@dataclass(frozen=True, slots=True)
class Span:
    """One measured span: SOBA's count of what was appended as sent, the tool results' content
    within it, the ``"`` characters of its calls' arguments, and the server's growth over it."""

    counted: int
    tool: int
    quotes: int
    grown: int


def measure_span(entries: Iterable[Entry], counter: TokenCounter, grown: int) -> Span:
    """The :class:`Span` of ``entries`` (model input appended between two replies), counted as
    sent, whatever the counter currently assumes about the server."""
    counted = tool = quotes = 0
    for entry in entries:
        if not entry.is_model_input:
            continue
        message = entry.message
        if counter.message_form is not None:  # sent in another form (a tool result as a user message)
            counted += counter.count_message(message)
            continue
        if entry.role == "tool":
            content = counter.count_text(entry.text) + counter.count_text(str(message.get("name", ""))) + 2
            tool += content
            counted += MESSAGE_OVERHEAD + content
            continue
        n = counter.count_message(message)
        for call in message.get("toolCalls") or ():
            q = template_escapes(arguments_as_sent(call))
            quotes += q
            n -= round(counter.quote_tokens * q)
        counted += n
    return Span(counted, tool, quotes, grown)


def _fit(spans: Sequence[Span], rendered: bool) -> tuple[float, float]:
    """``(k, squared error)`` of ``grown ≈ r·base + k·quotes`` (``0 <= k <= MAX_QUOTE_TOKENS``),
    base counting the tool results' content or not."""
    base = [s.counted - (0 if rendered else s.tool) for s in spans]
    quotes = [s.quotes for s in spans]
    grown = [s.grown for s in spans]
    bb = sum(b * b for b in base)
    qq = sum(q * q for q in quotes)
    bq = sum(b * q for b, q in zip(base, quotes, strict=True))
    gb = sum(g * b for g, b in zip(grown, base, strict=True))
    gq = sum(g * q for g, q in zip(grown, quotes, strict=True))
    det = bb * qq - bq * bq
    k = (bb * gq - bq * gb) / det if det > 0 else 0.0
    if k <= 0:
        k = 0.0
        r = gb / bb if bb else 1.0
    elif k > MAX_QUOTE_TOKENS:  # the best r with k held at the most a quote can cost
        k = MAX_QUOTE_TOKENS
        r = (gb - k * bq) / bb if bb else 1.0
    else:
        r = (gb * qq - bq * gq) / det
    error = sum((g - r * b - k * q) ** 2 for g, b, q in zip(grown, base, quotes, strict=True))
    return k, error


def decide(spans: Sequence[Span], current: tuple[bool, float] = (True, 0.0)) -> tuple[bool, float] | None:
    """``(tool results rendered, tokens per quote)`` the spans show, each kept at ``current``
    where they do not show it clearly (too little tool content, no quotes, two fits alike);
    ``None`` while there are too few spans to say anything."""
    if len(spans) < MIN_SPANS:
        return None
    rendered, k = current
    if sum(s.tool for s in spans) >= MIN_TOOL_TOKENS:
        kept = _fit(spans, True)[1]
        dropped = _fit(spans, False)[1]
        rendered = False if dropped < CLEAR * kept else True if kept < CLEAR * dropped else rendered
    if any(s.quotes for s in spans):
        fitted, error = _fit(spans, rendered)
        ratio = _ratio(spans, rendered)
        plain = sum((s.grown - ratio * (s.counted - (0 if rendered else s.tool))) ** 2 for s in spans)
        found = round(fitted * 2) / 2 if fitted >= 1.0 and error < CLEAR * plain else 0.0
        # a refit that moves less than a token per quote is noise: re-counting the whole input for it is not worth it
        k = found if abs(found - k) >= 1.0 or found == 0.0 else k
    return rendered, k


def _ratio(spans: Sequence[Span], rendered: bool) -> float:
    base = [s.counted - (0 if rendered else s.tool) for s in spans]
    bb = sum(b * b for b in base)
    return sum(s.grown * b for s, b in zip(spans, base, strict=True)) / bb if bb else 1.0


class RenderingLearner:
    """Feeds measured spans to :func:`decide` and sets the counter accordingly."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self.spans: deque[Span] = deque(maxlen=SPANS)
        self._hinted = False

    def after_reply(self, tracker: BudgetTracker, span: tuple[list[Entry], int] | None, prompt_tokens: int,
                    hint: tuple[bool, float] | None = None) -> None:
        """A reply reported ``prompt_tokens`` for a request whose model input was ``span`` (the
        entries since the previous reply with usage, and that reply's count) appended to an
        earlier one: learn from it, and have ``tracker`` re-count when the counter changed.
        ``hint`` is what the provider already knows of its server's rendering (applied once,
        before any span says otherwise)."""
        changed = False
        if hint is not None and not self._hinted:
            self._hinted = True
            if not self.spans:
                changed = self.counter.set_rendering(tool_results_rendered=hint[0], quote_tokens=hint[1])
        if span is not None:
            entries, before = span
            changed = self.observe(entries, prompt_tokens - before) or changed
        if changed:
            tracker.invalidate()

    def observe(self, entries: Iterable[Entry], grown: int) -> bool:
        """One more span; ``True`` when the counter now counts differently (re-count)."""
        if grown <= 0:
            return False
        self.spans.append(measure_span(entries, self.counter, grown))
        decision = decide(list(self.spans), (self.counter.tool_results_rendered, self.counter.quote_tokens))
        if decision is None:
            return False
        rendered, quote_tokens = decision
        return self.counter.set_rendering(tool_results_rendered=rendered, quote_tokens=quote_tokens)


def relearn_rendering(store: SessionStore, learner: RenderingLearner) -> bool:
    """Replay into ``learner`` the spans of the last :data:`SPANS` replies on ``store``'s path
    that follow another reply with reported usage on the same context, as the live agent took
    them (that reply and the entries after it, against the growth of the reported prompt).

    A reopened session counts as the kernel that wrote it did: the counter's rendering lived only
    in memory, and the calibration relearned from the transcript (``relearn.py``) is only the old
    one when the entries are counted alike. ``True`` when the counter now counts differently.
    """
    path = store.path_ids()
    replies, _ = reported_replies(store, path, SPANS + 1)  # only assistant replies are read back
    latest: dict[str, int] = {}
    changed = False
    for pos in reversed(replies):  # oldest first
        entry = store.get(path[pos])
        key = entry.message.get("contextKey") or "root"
        before = latest.get(key)
        previous = store.get(path[before]).usage if before is not None else None
        if before is not None and previous is not None and previous.prompt_tokens > 0 and entry.usage is not None:
            span = [store.get(entry_id) for entry_id in path[before:pos]]
            changed = learner.observe(span, entry.usage.prompt_tokens - previous.prompt_tokens) or changed
        latest[key] = pos
    return changed
