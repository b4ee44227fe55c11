"""Cut points, trigger priority, intents and the ROI formulas, as pure functions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from soba_notebook.budget import BudgetCheck
from soba_notebook.compaction import IntentQueue, Trigger, choose_trigger, find_cut_point
from soba_notebook.compaction.capsule import Capsule, Decision, Verification, render, roll
from soba_notebook.compaction.planner import valid_boundaries
from soba_notebook.compaction.summarize import parse_capsule_answer
from soba_notebook.compaction.triggers import growth_before_soft_retry, post_generation_roi, pre_generation_roi
from soba_notebook.config import CompactionConfig
from soba_notebook.errors import CapsuleFormatError
from soba_notebook.session import ToolCall, assistant_message, tool_result, user_message
from soba_notebook.session.capsule_schema import validate_capsule_json


def _ids(entries):
    return [e.with_ids(f"e{i}", None, "t") for i, e in enumerate(entries)]


def _check(effective: int, hard: int = 48808, soft: int = 39046) -> BudgetCheck:
    return BudgetCheck(effective, hard, soft, 65000, "estimated", effective, "root", None)


def test_cut_never_lands_on_a_tool_result_or_inside_a_parallel_batch() -> None:
    entries = _ids([
        user_message("u"),
        assistant_message("", [ToolCall("a", "read_file", {}), ToolCall("b", "read_file", {})]),
        tool_result("a", "read_file", "A"),
        tool_result("b", "read_file", "B"),
        assistant_message("done"),
        user_message("next"),
    ])
    valid, end_ok = valid_boundaries(entries)
    assert valid == [1, 4, 5] and end_ok
    # keeping 25 tokens would ideally cut at a tool result (index 3); the cut moves earlier, to
    # the parallel batch's assistant message, so the tail still holds at least 25 tokens
    assert find_cut_point(entries, [10, 10, 10, 10, 10, 10], keep_recent_tokens=25) == 1
    assert find_cut_point(entries, [10, 10, 10, 10, 10, 10], keep_recent_tokens=15) == 4


def test_cut_keeps_at_least_keep_recent_tokens() -> None:
    entries = _ids([user_message(str(i)) for i in range(10)])
    assert find_cut_point(entries, [100] * 10, keep_recent_tokens=350) == 6


def test_no_cut_when_everything_fits_in_the_retained_window() -> None:
    entries = _ids([user_message(str(i)) for i in range(5)])
    assert find_cut_point(entries, [100] * 5, keep_recent_tokens=600) is None


def test_mandatory_cut_keeps_less_to_fit_the_tail_budget() -> None:
    entries = _ids([user_message(str(i)) for i in range(10)])
    assert find_cut_point(entries, [100] * 10, keep_recent_tokens=800, max_tail_tokens=250) == 8


def test_unanswered_call_at_the_end_forbids_keeping_nothing() -> None:
    entries = _ids([user_message("u"), assistant_message("", [ToolCall("x", "shell", {})])])
    valid, end_ok = valid_boundaries(entries)
    assert valid == [1] and not end_ok


def test_priority_hard_limit_then_milestone_then_turn_complete_then_auto() -> None:
    cfg = CompactionConfig()
    q = IntentQueue()
    q.record("turn_complete", cfg)
    q.record("milestone", cfg, "parser fixed")
    assert choose_trigger(_check(50000), q.pending(), cfg, soft_attempted=False) is Trigger.HARD_LIMIT
    assert choose_trigger(_check(40000), q.pending(), cfg, soft_attempted=False) is Trigger.MILESTONE
    q.consume(Trigger.MILESTONE)
    assert choose_trigger(_check(40000), q.pending(), cfg, soft_attempted=False) is Trigger.TURN_COMPLETE
    q.consume(Trigger.TURN_COMPLETE)
    assert choose_trigger(_check(40000), q.pending(), cfg, soft_attempted=False) is Trigger.AUTO_THRESHOLD
    assert choose_trigger(_check(39045), q.pending(), cfg, soft_attempted=False) is None


def test_soft_attempt_already_made_blocks_soft_triggers_but_not_hard_limit() -> None:
    cfg = CompactionConfig()
    assert choose_trigger(_check(40000), (), cfg, soft_attempted=True) is None
    assert choose_trigger(_check(48809), (), cfg, soft_attempted=True) is Trigger.HARD_LIMIT


def test_hard_limit_fires_only_above_the_limit() -> None:
    cfg = CompactionConfig(auto=False)
    assert choose_trigger(_check(48808), (), cfg, soft_attempted=False) is None
    assert choose_trigger(_check(48809), (), cfg, soft_attempted=False) is Trigger.HARD_LIMIT


def test_compact_on_milestone_false_ignores_milestone_intents() -> None:
    cfg = CompactionConfig(compact_on_milestone=False)
    q = IntentQueue()
    assert q.record("milestone", cfg) is False and q.pending() == ()


def test_turn_complete_requires_compact_on_turn_complete() -> None:
    assert IntentQueue().record("turn_complete", CompactionConfig(compact_on_turn_complete=False)) is False
    assert IntentQueue().record("turn_complete", CompactionConfig()) is True


def test_pre_generation_roi_is_the_seed_formula() -> None:
    cfg = CompactionConfig()
    roi = pre_generation_roi(40000, cfg)
    assert roi.reclaimable == 20000 and roi.savings_ratio == 0.5 and roi.passed
    assert not pre_generation_roi(31999, cfg).passed  # 11999 < 12000
    assert pre_generation_roi(32000, cfg).passed
    assert not pre_generation_roi(26000, CompactionConfig(min_reclaimable_tokens=0)).passed  # 6000/26000 < .25


def test_post_generation_roi_measures_before_against_after() -> None:
    cfg = CompactionConfig()
    assert post_generation_roi(40000, 27000, cfg).passed
    assert not post_generation_roi(40000, 28001, cfg).passed


@given(before=st.integers(1, 400_000), after_share=st.floats(0.3, 1.0), kept_extra=st.integers(0, 30_000),
       min_tokens=st.integers(0, 50_000), ratio=st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.9]))
def test_soft_retry_growth_is_the_least_growth_after_which_the_best_case_capsule_passes_the_roi(
        before: int, after_share: float, kept_extra: int, min_tokens: int, ratio: float) -> None:
    config = CompactionConfig(keep_recent_tokens=20_000, min_reclaimable_tokens=min_tokens, min_savings_ratio=ratio)
    after = int(before * after_share)
    kept = 20_000 + kept_extra
    growth = growth_before_soft_retry(before, after, kept, config)

    def best_case(g: int) -> bool:  # every added token reclaimed, the tail back down to keepRecentTokens
        return post_generation_roi(before + g, after - kept_extra, config).passed

    assert growth >= 0 and best_case(growth)
    if growth > 0:
        assert not best_case(growth - 1), "a smaller growth could already pass: the gate would hold back too long"


def test_capsule_json_round_trip_and_validation_names_fields() -> None:
    cap = Capsule(goal="g", decisions=(Decision("use a lexer", "regex was slow"),),
                  verification=(Verification("pytest", "failed", "2 failed"),), files_read=("a.py",))
    assert Capsule.from_json(cap.to_json()) == cap
    problems = validate_capsule_json({"goal": 3, "verification": [{"command": "x", "status": "great"}],
                                      "evil": 1})
    assert any("goal" in p for p in problems) and any("verification[0].status" in p for p in problems)
    assert any("'evil'" in p for p in problems)
    with pytest.raises(CapsuleFormatError, match="goal"):
        Capsule.from_json({"goal": 3})


def test_rolling_keeps_everything_the_previous_capsule_held() -> None:
    old = Capsule(goal="old goal", files_modified=("a.py",), pending=("write docs",),
                  verification=(Verification("pytest", "failed"),), constraints=("no new deps",))
    new = Capsule(done=("write docs",), files_modified=("b.py",), verification=(Verification("pytest", "passed"),))
    rolled = roll(old, new, previous_checkpoint="ck_1")
    assert rolled.goal == "old goal"
    assert rolled.files_modified == ("a.py", "b.py")
    assert rolled.pending == () and "write docs" in rolled.done
    assert rolled.verification == (Verification("pytest", "passed"),)
    assert rolled.constraints == ("no new deps",) and rolled.rolled_from == ("ck_1",)


def test_render_lists_files_verification_and_decisions() -> None:
    text = render(Capsule(goal="fix it", files_modified=("p.py",), decisions=(Decision("d", "because"),),
                          verification=(Verification("pytest", "passed"),)), checkpoint_id="ck_9")
    assert 'checkpoint="ck_9"' in text and "p.py" in text and "`pytest`: passed" in text and "because" in text


def test_summarizer_answer_in_a_code_fence_is_parsed_and_validated() -> None:
    cap = parse_capsule_answer('Here:\n```json\n{"goal": "x", "filesRead": ["a.py"]}\n```')
    assert cap.goal == "x" and cap.files_read == ("a.py",)
    with pytest.raises(CapsuleFormatError):
        parse_capsule_answer("I could not do it")
    with pytest.raises(CapsuleFormatError, match="filesRead"):
        parse_capsule_answer('{"goal": "x", "filesRead": "a.py"}')


def test_rolling_clears_an_old_blocker_once_its_check_passes() -> None:
    old = Capsule(blockers=("`pytest -q` failed: 2 tests",), verification=(Verification("pytest -q", "failed"),))
    new = Capsule(verification=(Verification("pytest -q", "passed"),))
    assert roll(old, new).blockers == ()
    assert roll(old, Capsule()).blockers == old.blockers, "no news keeps the blocker"


def test_history_larger_than_the_summarizer_window_is_summarized_in_chunks_and_rolled() -> None:
    import asyncio
    import json

    from soba_notebook.compaction.summarize import ModelSummarizer, SummaryCall, SummaryRequest, serialize_entries
    from soba_notebook.tokens import TokenCounter

    prompts: list[str] = []
    calls: list[SummaryCall] = []

    async def complete(call: SummaryCall) -> str:
        prompt = call.prompt
        prompts.append(prompt)
        calls.append(call)
        n = len(prompts)
        return json.dumps({"goal": "g" if n == 1 else "", "done": [f"chunk {n}"], "filesRead": [f"f{n}.py"]})

    entries = [user_message(f"step {i} " + "word " * 400).with_ids(f"e{i}", None, "t") for i in range(12)]
    summarizer = ModelSummarizer(complete, TokenCounter("gpt-4o"), context_window=3_000, max_output_tokens=500)
    seen: list[float] = []
    capsule = asyncio.run(summarizer.summarize(SummaryRequest(tuple(entries), None), seen.append))
    assert len(prompts) > 1, "the history did not fit one request, so it went in chunks"
    assert all(summarizer.counter.count_text(p) < 3_000 for p in prompts), "every chunk fits the window"
    assert capsule.goal == "g" and capsule.done == tuple(f"chunk {n}" for n in range(1, len(prompts) + 1))
    assert set(capsule.files_read) == {f"f{n}.py" for n in range(1, len(prompts) + 1)}
    assert "Previous capsule state" in prompts[1], "each chunk rolls the state of the ones before"
    assert seen == sorted(seen) and seen[-1] == 1.0
    # each call carries the chunk its prompt serialized, and the state that prompt rolls forward
    assert [e for call in calls for e in call.entries] == entries
    assert all(serialize_entries(call.entries) in call.prompt for call in calls)
    assert calls[0].previous is None and calls[1].previous is not None and calls[1].previous.goal == "g"


def test_long_tool_results_are_clipped_in_the_summarizer_input() -> None:
    from soba_notebook.compaction.summarize import TOOL_RESULT_CHARS, serialize_entries

    text = serialize_entries([tool_result("c", "shell", "x" * 50_000).with_ids("r", None, "t")])
    assert len(text) < TOOL_RESULT_CHARS + 200 and "characters omitted" in text


def test_a_raw_newline_inside_a_summary_string_is_the_models_text_not_an_invalid_capsule() -> None:
    # grammar-constrained local models (llama.cpp) emit literal control characters inside strings
    cap = parse_capsule_answer('{"goal": "fix the\nparser", "done": ["read\tit"]}')
    assert cap.goal == "fix the\nparser" and cap.done == ("read\tit",)
