"""The cut point from the tail of the context: the same answer as :func:`~.planner.find_cut_point`,
reading only the entries after a user message near the cut.

:func:`~.planner.find_cut_point` walks the whole context to learn which tool calls are still open
at each position; its cost grew with the history, 100x pi's own cut at 16x the pi-mono session.
Here the walk starts at a window start ``W``, the last user message at or before the cut
wanted, in a state known exactly without reading what lies before it:

* calls left without any result stop holding a cut back at the next user message (the rule of
  :func:`~.planner.valid_boundaries`), so at a user message none of them is pending;
* the calls still waiting for a result at ``W`` are read off the
  :class:`~soba_notebook.session.tool_index.ToolCallIndex` the model-input builder keeps, from
  the results at ``W`` and after (:meth:`ToolCallIndex.open_at`).

From there the walk is the reference's own loop. When no valid boundary lies between ``W`` and
the cut wanted (a result arrived after a user message, two writers), the window doubles back to
an earlier user message, down to the whole context. Token counts come as running totals
(``cum[i]``: tokens before entry ``i``) kept with the model input, so no entry is counted or
summed again here. The rule is exactly as strict: a property test holds this function equal to
the reference over random interleavings (ids repeated, results before their calls), two writers
and imported transcripts.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence

from ..session.entries import Entry
from ..session.model_input import ModelInputBuilder
from ..session.tool_index import ToolCallIndex
from .planner import scan_boundaries

__all__ = ["shrink_tails", "tail_cut_point"]


def _walk(entries: Sequence[Entry], index: ToolCallIndex, start: int, stop: int | None) -> tuple[list[int], bool]:
    """Valid boundaries at ``start`` and after (up to ``stop``), and whether the end is one:
    ``start`` is 0 or a user message. The reference's own loop, begun in the state it has there."""
    return scan_boundaries(entries, index.answered, index.open_at(start) if start > 0 else set(), start, stop)


def tail_cut_point(entries: Sequence[Entry], cum: Sequence[int], index: ToolCallIndex, keep_recent_tokens: int, *,
                   max_tail_tokens: int | None = None) -> int | None:
    """What ``find_cut_point(entries, tokens, keep_recent_tokens, max_tail_tokens=...)`` returns,
    ``tokens[i]`` being ``cum[i + 1] - cum[i]`` (counts are never negative), reading the tail only."""
    n = len(entries)
    total = cum[n]
    # the last boundary whose tail holds keep_recent_tokens: suffix(i) = total - cum[i] >= keep
    want = min(bisect_right(cum, total - keep_recent_tokens, 0, n + 1) - 1, n - 1)
    # the first boundary whose tail fits under max_tail_tokens (mandatory compactions)
    fits = bisect_left(cum, total - max_tail_tokens, 0, n + 1) if max_tail_tokens is not None else None
    if want < 1 and fits is None:
        return None
    target = want if want >= 1 else fits if fits is not None else 0
    start = index.user_at_or_before(target)
    # without a tail limit only the boundaries up to the cut wanted matter: the walk stops there
    stop = want + 1 if max_tail_tokens is None else None
    while True:
        valid, end_valid = _walk(entries, index, start, stop)
        before = bisect_right(valid, want)  # valid[:before] are the boundaries at or before `want`
        if before or start == 0 or want < 1:
            break
        # no boundary between the window start and the cut wanted: double the window back
        start = index.user_at_or_before(start - max(1, n - start))
    cut = valid[before - 1] if before else None
    if max_tail_tokens is not None and fits is not None and (cut is None or total - cum[cut] > max_tail_tokens):
        candidates = valid + ([n] if end_valid and n else [])
        at = bisect_left(candidates, fits)
        cut = candidates[at] if at < len(candidates) else None
    return cut if cut is not None and cut > 0 else None



def shrink_tails(room: int, inputs: ModelInputBuilder) -> list[int]:
    """The retained-tail limits a mandatory compaction's smaller plans try, largest first: half the
    ``room`` the plan leaves a tail (:func:`~.capsule_fit.tail_room`), the current turn's prompt and
    everything after it, nothing.

    The prompt the user just typed stays verbatim in model input whenever it fits (seed, practical
    guidance: never lose "the current tool batch or immediate task details"): without its own
    limit, a tail of half the room could be too large while no tail at all fit, and the prompt was
    summarized (the soak's looping turns 288-289). Only when even the prompt's tail cannot fit
    beside the capsule is nothing kept, as before (or the compaction fails closed)."""
    cum, users = inputs.cumulative_tokens(), inputs.tool_index.users
    prompt = cum[-1] - cum[users[-1]] if users else 0  # from the latest user message to the end
    return sorted({room // 2, prompt, 0}, reverse=True)
