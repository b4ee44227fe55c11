"""Whether a config fits the window in front of it: the warnings an agent gives when it opens.

The seed's defaults are sized for a 65,000-token window. Under a small one (a local model of
4,096 tokens) some of them make a trigger impossible without any error: soft compaction waits
for ``minReclaimableTokens`` of history that can never fit under the hard limit, so the context
sits at the limit and only the preflight barrier compacts; or the fixed prompt (system prompt,
instructions and tool schemas) takes most of the window before any history. Neither is wrong
enough to refuse (the session still works), so each is one line naming the keys and a value that
works, computed by a pure function over the config and the measured fixed prompt.
"""

from __future__ import annotations

from ..budget import soft_limit
from ..config import SobaConfig

__all__ = ["FIXED_SHARE", "fit_warnings"]

#: the share of the window the fixed prompt may take before it is worth a warning
FIXED_SHARE = 0.4

#: a small set a small model can use (read and find, one edit tool, a milestone)
_SMALL_TOOLS = '["read_file", "list_files", "grep", "edit_file", "checkpoint"]'


def fit_warnings(config: SobaConfig, fixed_tokens: int) -> tuple[str, ...]:
    """One line per trigger ``config`` makes impossible, given ``fixed_tokens`` of fixed prompt
    (what every request carries besides history). Empty when the config fits its window."""
    m, c = config.model, config.compaction
    hard = config.hard_limit
    out: list[str] = []
    if fixed_tokens > FIXED_SHARE * m.context_window:
        out.append(f"the system prompt and tool schemas take {fixed_tokens:,} tokens, "
                   f"{fixed_tokens / m.context_window:.0%} of model.contextWindow {m.context_window:,}, before any "
                   f"history: offer fewer tools (tools.enabled = {_SMALL_TOOLS}) or use a larger window")
    if c.auto:
        if c.min_tokens_for_auto_compact >= hard:
            working = soft_limit(hard, 0, c.auto_compact_threshold_ratio)
            out.append(f"compaction.minTokensForAutoCompact {c.min_tokens_for_auto_compact:,} is not under the "
                       f"hard limit {hard:,}: soft compaction cannot start before the hard limit; "
                       f"set it to {working:,} or less")
        # the most history a soft compaction could ever summarize: under the hard limit, beside the
        # fixed prompt, beyond the recent tail it keeps
        reclaimable = hard - fixed_tokens - c.keep_recent_tokens
        if c.min_reclaimable_tokens > max(0, reclaimable):
            if reclaimable > 0:
                fix = f"set compaction.minReclaimableTokens to {max(1, reclaimable // 2):,}"
            else:
                fix = (f"set compaction.keepRecentTokens to {max(0, (hard - fixed_tokens) // 4):,} and "
                       f"compaction.minReclaimableTokens to {max(1, (hard - fixed_tokens) // 4):,}")
            out.append(f"compaction.minReclaimableTokens {c.min_reclaimable_tokens:,} can never be reclaimed: at "
                       f"most {max(0, reclaimable):,} tokens of history are (hard limit {hard:,} - fixed prompt "
                       f"{fixed_tokens:,} - compaction.keepRecentTokens {c.keep_recent_tokens:,}), so soft "
                       f"compaction never happens; {fix}")
    return tuple(out)
