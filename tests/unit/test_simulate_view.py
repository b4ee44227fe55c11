"""The simulator front end on a small hand-built session whose trigger decisions are known.

Every message is made of the word "word" repeated: in the o200k encoding each repetition is one
token, and a message costs its content plus 3 (MESSAGE_OVERHEAD); a request adds 3 for the reply
priming. The config is tiny so every number can be checked by hand:

    contextWindow 3000, maxOutputTokens 200, safetyReserveTokens 300  ->  hard limit 2500
    minTokensForAutoCompact 1000, ratio 0.8 -> soft = min(2499, max(1000, 2000)) = 2000
    keepRecentTokens 500, minReclaimableTokens 300, minSavingsRatio 0.25

Session (tokens per entry):

    U0 1000 | A0 100 | U1 900 | A1 (read_file + shell calls) | T1 read_file 1007 | T2 shell 14 |
    A2 100 | U2 500 | A3 100 | U3 50 | A4 100

Inferences (one per assistant reply), with compactOnTurnComplete off:

    0: U0 + 3                      = 1003  < soft             -> nothing
    1: U0 + A0 + U1 + 3            = 2003  >= soft 2000        -> auto_threshold; ROI 2003-500 =
       1503 >= 300 and 0.75 >= 0.25; the cut keeps U1 (900 >= 500), summarizes U0, A0 -> completed
    2: (after 1) + A1 + T1 + T2    >= soft, same turn         -> nothing: one soft attempt per turn
    3: (2) + A2 + U2 500           > hard 2500                 -> hard_limit, completed, under hard
    4: (after 3) + A3 + U3         < soft                      -> nothing
"""

from __future__ import annotations

import asyncio
import itertools
import re
from pathlib import Path

import pandas as pd
import pytest

from soba_notebook import views
from soba_notebook.compaction.capsule import Verification
from soba_notebook.compaction.simulate import replay
from soba_notebook.errors import ConfigError
from soba_notebook.session import SessionStore, ToolCall, assistant_message, tool_result, user_message
from soba_notebook.tokens import TokenCounter

TINY = {"safetyReserveTokens": 300, "minTokensForAutoCompact": 1000, "keepRecentTokens": 500,
        "minReclaimableTokens": 300, "minSavingsRatio": 0.25, "compactOnTurnComplete": False}


def words(n: int) -> str:
    return " ".join(["word"] * n)


@pytest.fixture
def session(tmp_path: Path) -> SessionStore:
    s = SessionStore.create(tmp_path / "sessions", session_id="hand-built")
    s.append(user_message(words(997)))
    s.append(assistant_message(words(97)))
    s.append(user_message(words(897)))
    s.append(assistant_message("checking", [ToolCall("c1", "read_file", {"path": "src/app.py"}),
                                            ToolCall("c2", "shell", {"command": "pytest -q"})]))
    s.append(tool_result("c1", "read_file", words(1000)))
    s.append(tool_result("c2", "shell", "3 passed in 0.12s"))
    s.append(assistant_message(words(97)))
    s.append(user_message(words(497)))
    s.append(assistant_message(words(97)))
    s.append(user_message(words(47)))
    s.append(assistant_message(words(97)))
    return s


def test_hand_counted_token_sizes(session: SessionStore) -> None:
    counter = TokenCounter(None)
    sizes = [counter.count_entry(e) for e in session.entries()]
    assert sizes[:3] == [1000, 100, 900] and sizes[4] == 1007 and sizes[6:] == [100, 500, 100, 50, 100]


def test_triggers_fire_exactly_where_computed_by_hand(session: SessionStore) -> None:
    sim = views.simulate(session, 3000, 200, **TINY)
    df = sim.inferences
    assert list(df.columns) == list(views.INFERENCE_COLUMNS)
    assert len(df) == 5
    assert (df["hard_limit"] == 2500).all() and (df["soft_limit"] == 2000).all()
    assert (df["source"] == "estimated").all()

    assert df.loc[0, "effective_tokens"] == 1003 and pd.isna(df.loc[0, "trigger"])
    assert df.loc[1, "effective_tokens"] == 2003
    assert (df.loc[1, "trigger"], df.loc[1, "outcome"]) == ("auto_threshold", "completed")
    capsule_cost = df.loc[1, "tokens_after"] - 903  # what is left: the capsule, U1 and the priming
    assert 0 < capsule_cost < 500

    counter = TokenCounter(None)
    a1, t1, t2 = (counter.count_entry(session.entries()[i]) for i in (3, 4, 5))
    assert df.loc[2, "effective_tokens"] == df.loc[1, "tokens_after"] + a1 + t1 + t2
    assert 2000 <= df.loc[2, "effective_tokens"] <= 2500  # over soft, but the turn had its soft attempt
    assert pd.isna(df.loc[2, "trigger"])

    assert df.loc[3, "effective_tokens"] == df.loc[2, "effective_tokens"] + 100 + 500
    assert df.loc[3, "effective_tokens"] > 2500
    assert (df.loc[3, "trigger"], df.loc[3, "outcome"]) == ("hard_limit", "completed")
    assert df.loc[3, "tokens_after"] <= 2500
    assert df.loc[4, "effective_tokens"] == df.loc[3, "tokens_after"] + 100 + 50
    assert pd.isna(df.loc[4, "trigger"])

    assert not df["oversized"].any() and df["pairs_intact"].all() and not df["blocked"].any()
    assert df["turn"].tolist() == [0, 1, 1, 2, 3]
    assert df["quality"].dropna().tolist() == ["degraded", "degraded"]  # replay has no model
    # reclaimed is what the engine measured for the capsule it appended (the entry's tokensAfter);
    # a rendered capsule holds random checkpoint ids, so re-measurements may differ by a token
    assert df.loc[1, "reclaimed_tokens"] == 2003 - sim.capsules[0].tokens_after
    assert abs(df.loc[1, "tokens_after"] - sim.capsules[0].tokens_after) <= 10


def test_capsules_expose_lists(session: SessionStore) -> None:
    sim = views.simulate(session, 3000, 200, **TINY)
    assert [c.trigger for c in sim.capsules] == ["auto_threshold", "hard_limit"]
    first, second = sim.capsules
    for cap in sim.capsules:
        assert isinstance(cap.files_read, list) and isinstance(cap.files_modified, list)
        assert isinstance(cap.verification, list)
    assert first.files_read == [] and first.verification == []
    # the hard-limit capsule summarized A1's calls and their results
    assert second.files_read == ["src/app.py"]
    assert second.verification == [Verification("pytest -q", "passed", "3 passed in 0.12s")]
    assert second.files_modified == []
    assert second.checkpoint_id == sim.inferences.loc[3, "checkpoint_id"]
    assert second.to_json()["filesRead"] == ["src/app.py"]


def test_turn_complete_outranks_auto_threshold(session: SessionStore) -> None:
    df = views.simulate(session, 3000, 200, **{**TINY, "compactOnTurnComplete": True}).inferences
    # U1 arrives after a reply: a turn_complete intent; at inference 1 it wins over auto_threshold
    assert (df.loc[1, "trigger"], df.loc[1, "outcome"]) == ("turn_complete", "completed")
    assert pd.isna(df.loc[0, "trigger"])


def test_auto_off_disables_soft_triggers_but_not_the_hard_limit(session: SessionStore) -> None:
    df = views.simulate(session, 3000, 200, **{**TINY, "auto": False}).inferences
    assert df["trigger"].dropna().tolist() == ["hard_limit"]
    fired = df[df["trigger"].notna()].iloc[0]
    assert fired["effective_tokens"] > 2500 and fired["tokens_after"] <= 2500
    assert not df["oversized"].any()


def test_snake_and_camel_case_overrides_are_the_same(session: SessionStore) -> None:
    snake = {"safety_reserve_tokens": 300, "min_tokens_for_auto_compact": 1000, "keep_recent_tokens": 500,
             "min_reclaimable_tokens": 300, "min_savings_ratio": 0.25, "compact_on_turn_complete": False}
    a = views.simulate(session, 3000, 200, **TINY).inferences
    b = views.simulate(session, 3000, 200, **snake).inferences
    c = views.simulate(session, **{**TINY, "contextWindow": 3000, "maxOutputTokens": 200}).inferences
    for other in (b, c):  # token figures after a capsule vary by a token with its random ids
        pd.testing.assert_frame_equal(a[["trigger", "outcome", "hard_limit", "soft_limit"]],
                                      other[["trigger", "outcome", "hard_limit", "soft_limit"]])
        assert a["effective_tokens"].iloc[:2].tolist() == other["effective_tokens"].iloc[:2].tolist()


def test_simulate_matches_replay(session: SessionStore) -> None:
    sim = views.simulate(session, 3000, 200, **TINY)
    raw = replay(session.path(), sim.config, counter=TokenCounter(None))
    assert [r.trigger for r in raw.inferences] == sim.inferences["trigger"].astype(object).where(
        sim.inferences["trigger"].notna(), None).tolist()
    assert [r.outcome for r in raw.inferences] == sim.inferences["outcome"].astype(object).where(
        sim.inferences["outcome"].notna(), None).tolist()
    assert [r.effective_tokens for r in raw.inferences][:2] == sim.inferences["effective_tokens"].iloc[:2].tolist()


def test_bad_overrides_are_clear_errors(session: SessionStore) -> None:
    with pytest.raises(ConfigError, match=r"unknown simulation setting 'keepRecentToken'.*keepRecentTokens"):
        views.simulate(session, 3000, 200, keepRecentToken=500)
    with pytest.raises(ConfigError, match="keepRecentTokens = 5000 is not allowed"):
        views.simulate(session, 3000, 200, **{**TINY, "keepRecentTokens": 5000})
    with pytest.raises(ConfigError, match="minSavingsRatio"):
        views.simulate(session, 3000, 200, **{**TINY, "min_savings_ratio": 3})
    with pytest.raises(ValueError, match="non-empty mapping"):
        views.compare(session, {})
    with pytest.raises(TypeError, match="settings of 'x' must be a mapping"):
        views.compare(session, {"x": 5})  # type: ignore[dict-item]


def test_compare_runs_configs_side_by_side(session: SessionStore) -> None:
    df = views.compare(session, {
        "tiny": {**TINY, "contextWindow": 3000, "maxOutputTokens": 200},
        "tiny, auto off": {"compaction": {**TINY, "auto": False}, "model": {"contextWindow": 3000,
                                                                            "maxOutputTokens": 200}},
        "roomy": {"context_window": 65000, "max_output_tokens": 8000},
    })
    assert list(df.columns) == list(views.COMPARE_COLUMNS) and df.index.name == "config"
    assert df.loc["tiny", "compactions"] == 2
    assert df.loc["tiny", "compactions_auto_threshold"] == 1 and df.loc["tiny", "compactions_hard_limit"] == 1
    assert df.loc["tiny, auto off", "compactions"] == 1 and df.loc["tiny, auto off", "compactions_hard_limit"] == 1
    assert df.loc["roomy", "compactions"] == 0 and df.loc["roomy", "hard_limit"] == 48808
    assert df.loc["tiny", "max_effective_tokens"] > 2500 >= df.loc["tiny", "max_sent_tokens"]
    assert not df["any_oversized"].any() and df["pairs_intact"].all()
    assert df.loc["tiny", "degraded"] == 2 and df.loc["tiny", "inferences"] == 5
    assert str(df["compactions"].dtype) == "Int64" and str(df["any_oversized"].dtype) == "bool"


def test_simulate_works_where_an_event_loop_is_running(session: SessionStore) -> None:
    async def inside_a_loop() -> int:  # as in a Jupyter cell: asyncio.run would refuse here
        return len(views.simulate(session, 3000, 200, **TINY).inferences)

    assert asyncio.run(inside_a_loop()) == 5


def test_simulation_plot_marks_compactions(session: SessionStore) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ax = views.simulate(session, 3000, 200, **TINY).plot()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    never_sent = ", history before it (never sent)"
    assert f"compaction: auto_threshold (1){never_sent}" in labels
    assert f"compaction: hard_limit (1){never_sent}" in labels
    assert "hard limit (2,500)" in labels and "soft limit (2,000)" in labels
    plt.close("all")


def test_simulation_shows_a_short_summary_and_where_the_frames_are_not_every_row(session: SessionStore) -> None:
    sim = views.simulate(session, 3000, 200, **TINY)
    text, page = repr(sim), sim._repr_html_()
    assert len(text) < 800 and len(page) < 1_500  # the dataclass repr printed every row and the config
    assert "hard limit 2,500" in text and "soft limit 2,000" in text and "window 3,000" in text
    assert "compactions 2 (hard_limit 1, auto_threshold 1)" in text
    assert "tool calls kept with their results: yes" in text
    assert ".inferences" in text and ".capsules" in text and ".plot()" in text
    assert "hard limit 2,500" in page and "<table>" in page and "<code>.inferences" in page
    assert "word word" not in text + page  # no capsule or entry text


def test_simulation_of_a_long_session_still_shows_in_a_few_lines(pi_session: Path) -> None:
    sim = views.simulate(pi_session, 65_000, 8_000)
    assert len(repr(sim)) < 800 and len(sim._repr_html_()) < 1_500
    assert f"inferences  {len(sim.inferences):,}" in repr(sim)


def test_two_budget_plots_side_by_side_keep_tick_labels_apart_and_the_legend_under_the_axes(
        pi_session: Path) -> None:
    """analysis.ipynb's comparison on a 175k-token pi session: 14 x 4 inches, two plots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(14, 4), sharey=True)
    for ax, keep in zip(axes, (20_000, 8_000), strict=True):
        views.simulate(pi_session, 65_000, 8_000, keepRecentTokens=keep).plot(ax=ax, title=f"keep {keep:,}")
    fig.tight_layout()
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    for ax in axes:
        low, high = ax.get_xlim()
        shown = [label for loc, label in zip(ax.xaxis.get_majorticklocs(), ax.get_xticklabels(), strict=True)
                 if low <= loc <= high]
        boxes = sorted((label.get_window_extent(renderer) for label in shown), key=lambda b: b.x0)
        assert len(boxes) >= 3
        gaps = [right.x0 - left.x1 for left, right in itertools.pairwise(boxes)]
        assert min(gaps) > 5, [label.get_text() for label in shown]  # pixels between neighbouring labels
        frame = ax.get_window_extent(renderer)
        assert frame.width > 0.4 * fig.bbox.width  # the axes keep their half of the figure
        legend = ax.get_legend().get_window_extent(renderer)
        assert legend.x1 <= frame.x1 + 1 and legend.y1 < frame.y0  # under the axes, not beside them
        assert legend.y1 < min(b.y0 for b in boxes)  # and under the tick labels
    y_labels = [label.get_text() for label in axes[0].get_yticklabels()]
    assert any(re.fullmatch(r"\d{1,3}(,\d{3})+", text) for text in y_labels), y_labels
    plt.close(fig)
