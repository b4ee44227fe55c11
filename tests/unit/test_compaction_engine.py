"""The preflight barrier and its rules (seed sections 3 to 8), driven by fake summarizers."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from compaction_support import (
    COUNTER,
    FakeSummarizer,
    add_exchange,
    capsules,
    fill,
    make_engine,
    small_config,
    text_of,
)

from soba_notebook.compaction import Capsule, Trigger, TurnState
from soba_notebook.compaction.capsule import Verification
from soba_notebook.errors import CompactionFailed
from soba_notebook.flight import read_flight_records
from soba_notebook.session import SessionStore, ToolCall, assistant_message, tool_result, user_message
from soba_notebook.session.context import build_context, pair_problems


def run(coro):
    return asyncio.run(coro)


def test_engine_limits_are_the_seed_numbers_for_65000_8000_8192(tmp_path: Path) -> None:
    from soba_notebook.config import load_config

    config = load_config(home=tmp_path, project_dir=tmp_path)
    _, engine, _ = make_engine(tmp_path, config)
    check = engine.measure()
    assert (check.hard_limit, check.soft_limit) == (48808, 39046)


def test_no_compaction_below_the_soft_limit(tmp_path: Path) -> None:
    summ = FakeSummarizer()
    store, engine, rec = make_engine(tmp_path, small_config(tmp_path), summ)
    fill(store, 6000)
    check = run(engine.preflight(TurnState()))
    assert check.effective < check.soft_limit
    assert capsules(store) == [] and summ.calls == [] and rec.of("compaction_start") == []


def test_auto_threshold_compacts_at_the_soft_limit_and_the_request_shrinks(tmp_path: Path) -> None:
    summ = FakeSummarizer()
    store, engine, rec = make_engine(tmp_path, small_config(tmp_path), summ)
    fill(store, 14000)
    before = engine.measure()
    assert before.effective >= before.soft_limit
    after = run(engine.preflight(TurnState()))
    (cap,) = capsules(store)
    assert cap.data["trigger"] == "auto_threshold" and cap.data["quality"] == "ok"
    assert after.effective < before.effective
    end = rec.of("compaction_end")[-1]
    assert end["outcome"] == "completed" and end["checkpoint_id"] == cap.data["checkpointId"]
    assert end["reclaimed_tokens"] == end["tokens_before"] - end["tokens_after"] > 0


def test_soft_trigger_is_skipped_before_generation_when_reclaimable_is_too_small(tmp_path: Path) -> None:
    summ = FakeSummarizer()
    # keepRecent 12000 of ~14000 effective: reclaimable ~2000 < minReclaimable 5000
    store, engine, rec = make_engine(tmp_path, small_config(tmp_path, keepRecentTokens=12000,
                                                            minReclaimableTokens=5000), summ)
    fill(store, 14000)
    run(engine.preflight(TurnState()))
    assert summ.calls == [], "no summary is generated when the pre-generation ROI fails"
    assert capsules(store) == []
    end = rec.of("compaction_end")[-1]
    assert end["outcome"] == "skipped" and "minReclaimableTokens" in end["reason"]


def test_soft_trigger_is_skipped_before_generation_when_savings_ratio_is_too_small(tmp_path: Path) -> None:
    summ = FakeSummarizer()
    store, engine, rec = make_engine(tmp_path, small_config(tmp_path, keepRecentTokens=9000,
                                                            minReclaimableTokens=100, minSavingsRatio=0.5), summ)
    fill(store, 14000)
    run(engine.preflight(TurnState()))
    assert summ.calls == [] and capsules(store) == []
    assert "minSavingsRatio" in rec.of("compaction_end")[-1]["reason"]


def _bloated(request: object) -> Capsule:
    # pending work: working state, which fitting a capsule to its reserve never trims (capsule_fit.py)
    return Capsule(goal="g", pending=tuple(text_of(40, i) for i in range(300)))


def test_soft_capsule_below_min_savings_is_not_appended(tmp_path: Path) -> None:
    summ = FakeSummarizer(answer=_bloated)
    store, engine, rec = make_engine(tmp_path, small_config(tmp_path), summ)
    fill(store, 14000)
    run(engine.preflight(TurnState()))
    assert len(summ.calls) == 1
    assert capsules(store) == [], "a soft capsule that misses the post-generation ROI is not appended"
    end = rec.of("compaction_end")[-1]
    assert end["outcome"] == "skipped" and "measured reclaimed" in end["reason"]


def test_user_compact_is_exempt_from_the_post_generation_roi(tmp_path: Path) -> None:
    summ = FakeSummarizer(answer=lambda r: Capsule(goal="g", done=tuple(text_of(30, i) for i in range(60))))
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path, minSavingsRatio=0.9), summ)
    fill(store, 9000)
    outcome = run(engine.compact(Trigger.USER, instructions="focus on the parser"))
    assert outcome.outcome == "completed"
    assert summ.calls[0].instructions == "focus on the parser"


def test_user_compact_whose_model_capsule_grows_the_context_uses_the_smaller_local_capsule(tmp_path: Path) -> None:
    summ = FakeSummarizer(answer=_bloated)  # about 12,000 tokens for 9,000 of history
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), summ)
    fill(store, 9000)
    outcome = run(engine.compact(Trigger.USER))
    assert outcome.outcome == "completed" and outcome.quality == "degraded", outcome
    assert outcome.tokens_after < outcome.tokens_before, outcome
    assert "would have grown the context" in (outcome.reason or ""), outcome.reason
    (capsule,) = capsules(store)
    assert capsule.data["quality"] == "degraded" and capsule.data["tokensAfter"] == outcome.tokens_after


def test_user_compact_that_no_capsule_makes_smaller_appends_nothing_and_says_why(tmp_path: Path) -> None:
    summ = FakeSummarizer(answer=_bloated)
    # one exchange of tiny entries before the retained window: any capsule costs more than it replaces
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path, keepRecentTokens=10), summ)
    for n in range(6):
        store.append(user_message(f"q{n}"))
        store.append(assistant_message(f"a{n}"))
    size = store.file.stat().st_size
    outcome = run(engine.compact(Trigger.USER))
    assert outcome.outcome == "skipped", outcome
    assert "would not make the context smaller" in (outcome.reason or "") and "nothing appended" in outcome.reason
    assert capsules(store) == [] and store.file.stat().st_size == size


def test_user_compact_without_history_before_the_retained_window_is_a_noop(tmp_path: Path) -> None:
    summ = FakeSummarizer()
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), summ)
    fill(store, 2000)  # less than keepRecentTokens 4000
    size = store.file.stat().st_size
    outcome = run(engine.compact(Trigger.USER))
    assert outcome.outcome == "skipped" and "nothing old enough to compact yet" in outcome.reason
    assert summ.calls == [] and store.file.stat().st_size == size


def test_hard_limit_compaction_runs_even_with_auto_false(tmp_path: Path) -> None:
    summ = FakeSummarizer()
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path, auto=False), summ)
    fill(store, 17500)
    assert engine.measure().over_hard
    after = run(engine.preflight(TurnState()))
    (cap,) = capsules(store)
    assert cap.data["trigger"] == "hard_limit"
    assert after.effective <= after.hard_limit


def test_auto_false_disables_soft_triggers_and_intents(tmp_path: Path) -> None:
    summ = FakeSummarizer()
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path, auto=False), summ)
    fill(store, 14500)
    assert engine.record_intent("milestone", "tests pass") is False
    check = run(engine.preflight(TurnState()))
    assert check.over_soft and not check.over_hard
    assert capsules(store) == [] and summ.calls == []


def test_hard_limit_is_fail_closed_when_compaction_cannot_fit(tmp_path: Path) -> None:
    store, engine, rec = make_engine(tmp_path, small_config(tmp_path), FakeSummarizer())
    engine.base_tokens = 17500  # system prompt and tools alone exceed the hard limit
    fill(store, 3000)
    with pytest.raises(CompactionFailed, match=r"over the hard limit 17000.*nothing was sent"):
        run(engine.preflight(TurnState()))
    assert capsules(store) == []
    assert rec.of("compaction_end")[-1]["outcome"] == "failed"


def test_single_message_over_the_hard_limit_is_folded_into_the_capsule(tmp_path: Path) -> None:
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), FakeSummarizer())
    store.append(user_message(text_of(18000)))
    after = run(engine.preflight(TurnState()))
    assert after.effective <= after.hard_limit
    assert capsules(store)[0].data["firstKeptEntryId"] is None


def test_hard_limit_shrinks_the_retained_tail_when_the_capsule_does_not_fit(tmp_path: Path) -> None:
    summ = FakeSummarizer(answer=lambda r: Capsule(goal="g", pending=tuple(text_of(70, i) for i in range(200))))
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), summ)
    fill(store, 17500)
    after = run(engine.preflight(TurnState()))
    assert after.effective <= after.hard_limit
    assert capsules(store)[-1].data["quality"] == "degraded"


def test_milestone_intent_wins_and_is_consumed_once(tmp_path: Path) -> None:
    summ = FakeSummarizer()
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), summ)
    fill(store, 9000)  # below soft; ROI passes (9000-4000 >= 2000, ratio .55)
    assert engine.record_intent("milestone", "parser fixed")
    run(engine.preflight(TurnState()))
    assert [c.data["trigger"] for c in capsules(store)] == ["milestone"]
    add_exchange(store, 99)
    run(engine.preflight(TurnState()))
    assert len(capsules(store)) == 1, "the milestone intent was consumed by the first preflight"


def test_at_most_one_soft_attempt_per_turn(tmp_path: Path) -> None:
    summ = FakeSummarizer(answer=_bloated)  # every soft attempt is skipped after generation
    # the turn rule alone (no predictor): the first bloated capsule would teach it to ask no more
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), summ, predictor=None)
    fill(store, 14000)
    turn = TurnState()
    run(engine.preflight(turn))
    run(engine.preflight(turn))
    assert len(summ.calls) == 1
    run(engine.preflight(TurnState()))
    assert len(summ.calls) == 2


def test_timeout_aborts_the_summarizer_and_appends_a_degraded_capsule(tmp_path: Path) -> None:
    summ = FakeSummarizer(hang=True)
    store, engine, rec = make_engine(tmp_path, small_config(tmp_path, timeoutMs=50), summ)
    fill(store, 14000)
    run(engine.preflight(TurnState()))
    assert summ.cancelled, "the model request is aborted at the timeout"
    (cap,) = capsules(store)
    assert cap.data["quality"] == "degraded" and "timeoutMs" in cap.data["note"]
    end = rec.of("compaction_end")[-1]
    assert end["outcome"] == "completed" and end["quality"] == "degraded"
    files = Capsule.from_json(cap.data["state"]).files_read
    assert "src/mod0_0.py" in files, "the degraded capsule comes from the deterministic extractor"


def test_failing_summarizer_falls_back_to_the_deterministic_capsule(tmp_path: Path) -> None:
    summ = FakeSummarizer(fail=RuntimeError("provider said 500"))
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), summ)
    fill(store, 14000)
    run(engine.preflight(TurnState()))
    assert capsules(store)[0].data["quality"] == "degraded"
    assert "provider said 500" in capsules(store)[0].data["note"]


def test_cancel_during_summarization_appends_no_capsule(tmp_path: Path) -> None:
    from soba_notebook.cancel import CancelToken

    summ = FakeSummarizer(hang=True)
    store, engine, rec = make_engine(tmp_path, small_config(tmp_path), summ)
    fill(store, 14000)
    size = store.file.stat().st_size
    cancel = CancelToken()

    async def scenario() -> None:
        task = asyncio.ensure_future(engine.preflight(TurnState(), cancel))
        await summ.wait_started()
        cancel.cancel()
        await task

    run(scenario())
    assert len(summ.calls) == 1 and summ.started.is_set(), "summarization had started when it was cancelled"
    assert summ.cancelled, "the summary request was aborted"
    assert store.file.stat().st_size == size and capsules(store) == []
    assert rec.of("compaction_end")[-1]["outcome"] == "cancelled"


def test_summarizer_that_finishes_after_cancel_cannot_write(tmp_path: Path) -> None:
    from soba_notebook.cancel import CancelToken

    summ = FakeSummarizer(hang=True, ignore_cancel=True)  # it finishes anyway, after the cancel
    store, engine, rec = make_engine(tmp_path, small_config(tmp_path), summ)
    fill(store, 14000)
    cancel = CancelToken()

    async def scenario() -> None:
        task = asyncio.ensure_future(engine.preflight(TurnState(), cancel))
        await summ.wait_started()
        cancel.cancel()
        await task

    run(scenario())
    assert summ.cancelled and summ.finished, "the summarizer did finish, late"
    assert capsules(store) == []
    assert rec.of("compaction_end")[-1]["outcome"] == "cancelled"


def test_task_cancellation_records_cancelled_and_appends_nothing(tmp_path: Path) -> None:
    summ = FakeSummarizer(hang=True)
    store, engine, rec = make_engine(tmp_path, small_config(tmp_path), summ)
    fill(store, 14000)

    async def scenario() -> None:
        task = asyncio.ensure_future(engine.preflight(TurnState()))
        await summ.wait_started()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(scenario())
    assert summ.started.is_set()
    assert capsules(store) == [] and rec.of("compaction_end")[-1]["outcome"] == "cancelled"


def test_moved_leaf_makes_the_compaction_stale_and_appends_nothing(tmp_path: Path) -> None:
    summ = FakeSummarizer(wait_release=True)
    store, engine, rec = make_engine(tmp_path, small_config(tmp_path), summ)
    fill(store, 14000)
    other = SessionStore.open(store.file)  # another kernel on the same session

    async def scenario() -> None:
        task = asyncio.ensure_future(engine.preflight(TurnState()))
        await summ.wait_started()
        other.append(user_message("typed in another kernel"))
        summ.release.set()
        await task

    run(scenario())
    assert summ.finished
    assert capsules(SessionStore.open(store.file)) == []
    end = rec.of("compaction_end")[-1]
    assert end["outcome"] == "stale" and "leaf moved" in end["reason"]


def test_progress_is_monotonic_from_plan_to_100(tmp_path: Path) -> None:
    store, engine, rec = make_engine(tmp_path, small_config(tmp_path), FakeSummarizer())
    fill(store, 14000)
    run(engine.preflight(TurnState()))
    percents = [e["percent"] for e in rec.of("compaction_progress")]
    assert percents == sorted(percents) and percents[-1] == 100 and 0 <= percents[0] <= 10
    kinds = [e.type for e in rec.events if e.type.startswith("compaction")]
    assert kinds[0] == "compaction_start" and kinds[-1] == "compaction_end"


def test_flight_record_per_operation_without_summary_text(tmp_path: Path) -> None:
    clock_values = iter([10.0, 10.25, 11.0, 12.0, 13.0])
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), FakeSummarizer(),
                                   clock=lambda: next(clock_values))
    fill(store, 14000)
    run(engine.preflight(TurnState()))
    records = [r for r in read_flight_records(tmp_path / "flight.jsonl") if r["kind"] == "compaction"]
    (rec,) = records
    assert rec["duration_ms"] == 250 and rec["outcome"] == "completed"
    for key in ("operation_id", "trigger", "hard_limit", "soft_limit", "checkpoint_id", "reclaimed_tokens", "source"):
        assert key in rec
    raw = (tmp_path / "flight.jsonl").read_text()
    assert "model summary" not in raw and "model goal" not in raw
    assert any(r["kind"] == "budget" for r in read_flight_records(tmp_path / "flight.jsonl"))


def test_model_capsule_cannot_lose_a_modified_file_or_verification_command(tmp_path: Path) -> None:
    summ = FakeSummarizer(answer=lambda r: Capsule(goal="forgetful"))
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), summ)
    store.append(user_message("fix the parser"))
    store.append(assistant_message("", [ToolCall("w1", "write_file", {"path": "src/parser.py", "content": "x"})]))
    store.append(tool_result("w1", "write_file", "wrote 1 line"))
    store.append(assistant_message("", [ToolCall("s1", "shell", {"command": "pytest -q tests/"})]))
    store.append(tool_result("s1", "shell", "3 passed\n[exit code 0]"))
    fill(store, 14000)
    run(engine.preflight(TurnState()))
    state = Capsule.from_json(capsules(store)[0].data["state"])
    assert "src/parser.py" in state.files_modified
    assert any(v.command == "pytest -q tests/" and v.status == "passed" for v in state.verification)


def test_second_capsule_rolls_the_first_and_summarizes_its_retained_tail(tmp_path: Path) -> None:
    summ = FakeSummarizer(answer=lambda r: Capsule(goal="g"))
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), summ)
    store.append(user_message("start"))
    store.append(assistant_message("", [ToolCall("w1", "write_file", {"path": "first.py", "content": "x"})]))
    store.append(tool_result("w1", "write_file", "ok"))
    fill(store, 14000)
    run(engine.compact(Trigger.USER))
    first = capsules(store)[0]
    kept_before = [e.id for e in build_context(store.path()).messages]
    fill(store, 14000)
    run(engine.compact(Trigger.USER))
    second = capsules(store)[1]
    summarized = {e.id for e in summ.calls[1].entries}
    assert set(kept_before) - {e.id for e in build_context(store.path()).messages} <= summarized, \
        "entries the first capsule kept but the second does not are summarized"
    state = Capsule.from_json(second.data["state"])
    assert "first.py" in state.files_modified
    assert first.data["checkpointId"] in state.rolled_from


def test_model_input_after_compaction_has_exactly_one_capsule_first(tmp_path: Path) -> None:
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), FakeSummarizer())
    for _ in range(3):
        fill(store, 14000)
        run(engine.compact(Trigger.USER))
    messages = engine.model_messages()
    assert messages[0]["content"].startswith("<context_capsule")
    assert sum(m["content"].startswith("<context_capsule") for m in messages if isinstance(m.get("content"), str)) == 1
    assert len(capsules(store)) == 3


def test_compaction_between_tool_calls_never_splits_a_parallel_batch(tmp_path: Path) -> None:
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), FakeSummarizer())
    store.append(user_message("one long turn"))
    for n in range(40):  # a single turn: assistant with 3 parallel calls, their results, repeat
        calls = [ToolCall(f"t{n}_{k}", "read_file", {"path": f"f{n}_{k}.py"}) for k in range(3)]
        store.append(assistant_message("", calls))
        for c in calls:
            store.append(tool_result(c.id, "read_file", text_of(150, n)))
    run(engine.preflight(TurnState()))
    assert capsules(store), "a long single turn still compacts between tool batches"
    ctx = build_context(store.path())
    assert pair_problems(ctx.messages) == []
    assert ctx.messages[0].role == "assistant"


def test_context_overflow_recovery_is_exempt_from_soft_roi(tmp_path: Path) -> None:
    summ = FakeSummarizer(answer=_bloated)
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path, minSavingsRatio=0.95), summ)
    fill(store, 9000)
    outcome = run(engine.compact(Trigger.CONTEXT_OVERFLOW))
    assert outcome.outcome == "completed" and outcome.trigger == "context_overflow"


def test_capsule_entry_records_the_figures_the_views_need(tmp_path: Path) -> None:
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), FakeSummarizer(
        answer=lambda r: Capsule(goal="g", verification=(Verification("ruff check", "failed"),))))
    fill(store, 14000)
    run(engine.preflight(TurnState()))
    data = capsules(store)[0].data
    for key in ("checkpointId", "firstKeptEntryId", "trigger", "quality", "state", "tokensBefore", "tokensAfter",
                "source", "operationId"):
        assert key in data
    assert data["tokensAfter"] < data["tokensBefore"]
    assert data["checkpointId"].startswith("ck_")
    json.dumps(data)  # the state is plain JSON


def test_budget_after_compaction_counts_the_rendered_capsule(tmp_path: Path) -> None:
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), FakeSummarizer())
    fill(store, 14000)
    run(engine.preflight(TurnState()))
    check = engine.measure()
    expected = COUNTER.count_messages(engine.model_messages())
    assert check.effective == expected


def test_a_soft_attempt_consumes_every_pending_soft_intent(tmp_path: Path) -> None:
    summ = FakeSummarizer(answer=_bloated)  # the attempt is skipped after generation
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), summ)
    fill(store, 9000)
    engine.record_intent("milestone", "a")
    engine.record_intent("plan_pivot", "b")
    engine.record_intent("turn_complete")
    run(engine.preflight(TurnState()))
    assert len(summ.calls) == 1 and engine.intents.pending() == ()
    run(engine.preflight(TurnState()))
    assert len(summ.calls) == 1, "no stale intent fires a second attempt"


def test_intents_wait_for_the_next_turn_when_this_turn_already_made_its_soft_attempt(tmp_path: Path) -> None:
    summ = FakeSummarizer(answer=_bloated)
    # the turn rule alone (no predictor): the first bloated capsule would teach it to ask no more
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), summ, predictor=None)
    fill(store, 14000)
    turn = TurnState()
    run(engine.preflight(turn))  # auto_threshold: the turn's one soft attempt
    engine.record_intent("milestone", "done")
    run(engine.preflight(turn))
    assert len(summ.calls) == 1 and [i.trigger.value for i in engine.intents.pending()] == ["milestone"]
    run(engine.preflight(TurnState()))
    assert len(summ.calls) == 2 and engine.intents.pending() == ()


def test_a_bug_inside_a_compaction_is_named_logged_with_its_traceback_and_appends_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), FakeSummarizer())
    fill(store, 9000)
    size = store.file.stat().st_size

    def broken(*_args: object) -> int:
        raise RuntimeError("a bug in the measure step")

    monkeypatch.setattr(engine, "_measure_after", broken)
    with caplog.at_level("ERROR", logger="soba_notebook.compaction.barrier"):
        outcome = run(engine.compact(Trigger.USER))
    assert outcome.outcome == "failed" and outcome.reason.startswith("internal error: RuntimeError: a bug"), outcome
    assert store.file.stat().st_size == size, "nothing was appended"
    (record,) = [r for r in caplog.records if r.name == "soba_notebook.compaction.barrier"]
    assert record.exc_info is not None and "a bug in the measure step" in str(record.exc_info[1])
