"""The prediction before a soft summary is requested (issue 20 item 8), and what a thrown-away
summary cost, in the flight records and ``views.flight_records``.

The seed's pre-generation gate stays as written (tests/unit/test_compaction_engine.py); these tests
prove the stricter check added after it: a soft summary is requested only when the continuation
it is predicted to give passes the post-generation ROI.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from compaction_support import COUNTER, FakeSummarizer, fill, make_engine, small_config, text_of
from conftest import PI_SESSION

from soba_notebook import views
from soba_notebook.compaction import Capsule, SummaryRequest, Trigger, TurnState, render
from soba_notebook.compaction.extract import deterministic_capsule
from soba_notebook.compaction.predict import DEFAULT_FACTOR, SavingsPredictor
from soba_notebook.compaction.simulate import replay
from soba_notebook.flight import FlightRecorder, read_flight_records
from soba_notebook.importers import import_transcript
from soba_notebook.session import SessionStore, ToolCall, assistant_message, tool_result, user_message


def _compactions(tmp_path: Path) -> list[dict[str, Any]]:
    return [r for r in read_flight_records(tmp_path / "flight.jsonl") if r["kind"] == "compaction"]


def _long_tail(store: SessionStore) -> None:
    """A little history, then one exchange whose tool result alone is larger than keepRecentTokens:
    the cut must keep that whole exchange, so a capsule can reclaim only the little before it."""
    fill(store, 1000)
    store.append(user_message("read the big log"))
    store.append(assistant_message("reading", [ToolCall("big", "read_file", {"path": "big.log"})]))
    store.append(tool_result("big", "read_file", text_of(7000)))
    store.append(assistant_message("the log is long; " + text_of(100)))


def _bloated(request: SummaryRequest) -> Capsule:
    # pending work is never trimmed to fit the capsule's reserve (compaction/capsule_fit.py): it stays bloated
    return Capsule(goal="g", pending=tuple(text_of(40, i) for i in range(300)))


def test_a_soft_trigger_whose_predicted_savings_miss_the_minimum_requests_no_summary(tmp_path: Path) -> None:
    summ = FakeSummarizer()
    store, engine, rec = make_engine(tmp_path, small_config(tmp_path), summ)  # keep 4,000, minReclaimable 2,000
    _long_tail(store)
    assert engine.record_turn_complete(), "the seed's estimate passes: effective - keepRecentTokens >= 2,000"
    turn = TurnState()
    asyncio.run(engine.preflight(turn))
    assert summ.calls == []
    end = rec.of("compaction_end")[-1]
    assert end["outcome"] == "skipped" and end["reason"].startswith("predicted reclaimed ")
    assert "< minReclaimableTokens 2,000; no summary requested" in end["reason"]
    assert engine.last_outcome is not None and engine.last_outcome.skipped_before_generation
    assert turn.soft_skipped and not turn.soft_attempted, "nothing was spent: the turn keeps its soft attempt"
    assert not engine.record_turn_complete(), "the same wait as after a measured miss: nothing was added since"


def test_the_flight_record_of_a_predicted_skip_says_generated_false_with_the_prediction(tmp_path: Path) -> None:
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), FakeSummarizer())
    _long_tail(store)
    engine.record_turn_complete()
    asyncio.run(engine.preflight(TurnState()))
    (record,) = _compactions(tmp_path)
    assert record["generated"] is False and record["skipped_before_generation"] is True
    assert record["tokens_before"] - record["predicted_after"] < 2000
    assert record["prediction_factor"] == DEFAULT_FACTOR and record["measured_after"] is None
    assert record["summary_input_tokens"] is None


def test_the_flight_record_of_a_requested_summary_holds_its_prediction_measurement_and_size(tmp_path: Path) -> None:
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), FakeSummarizer())
    fill(store, 14000)
    asyncio.run(engine.preflight(TurnState()))
    (record,) = _compactions(tmp_path)
    assert record["outcome"] == "completed" and record["generated"] is True
    assert record["skipped_before_generation"] is False
    assert record["measured_after"] <= record["predicted_after"]
    # tokens_after is the next request as sent, measured after the append; the measurement before it
    # renders the checkpoint id the capsule is written with, so the two agree
    assert record["measured_after"] == record["tokens_after"], record
    assert record["summary_input_tokens"] > 10_000 * 0.5, "the request carries the summarized history"
    assert 0 < record["summary_output_tokens"] < record["summary_input_tokens"]


def test_without_a_summarizer_the_prediction_is_the_measured_continuation(tmp_path: Path) -> None:
    """The deterministic capsule is what is appended: the prediction is exact, the factor 1."""
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), None)
    fill(store, 14000)
    asyncio.run(engine.preflight(TurnState()))
    (record,) = _compactions(tmp_path)
    assert record["outcome"] == "completed" and record["generated"] is False
    assert record["predicted_after"] == record["measured_after"]
    # tokens_after is the next request as sent, measured after the append: the prediction and the
    # measurement render the checkpoint id the capsule is written with
    assert record["measured_after"] == record["tokens_after"], record
    assert record["prediction_factor"] == 1.0


def test_a_thrown_away_model_capsule_teaches_the_prediction_not_to_request_it_again(tmp_path: Path) -> None:
    summ = FakeSummarizer(answer=_bloated)  # far larger than the deterministic capsule
    store, engine, rec = make_engine(tmp_path, small_config(tmp_path), summ)
    fill(store, 14000)  # over the soft limit: auto_threshold every turn
    asyncio.run(engine.preflight(TurnState()))
    assert len(summ.calls) == 1 and "measured reclaimed" in rec.of("compaction_end")[-1]["reason"]
    assert engine.parts.predictor is not None and engine.parts.predictor.factor > 5 * DEFAULT_FACTOR
    asyncio.run(engine.preflight(TurnState()))  # the next turn: the same size, the same model
    assert len(summ.calls) == 1, "the summary that was just thrown away is not requested again"
    assert rec.of("compaction_end")[-1]["reason"].startswith("predicted reclaimed")


def test_with_the_prediction_switched_off_only_the_seed_gate_stands_before_generation(tmp_path: Path) -> None:
    summ = FakeSummarizer()
    store, engine, rec = make_engine(tmp_path, small_config(tmp_path), summ, predictor=None)
    _long_tail(store)
    engine.record_turn_complete()
    asyncio.run(engine.preflight(TurnState()))
    assert len(summ.calls) == 1 and rec.of("compaction_end")[-1]["reason"].startswith("measured reclaimed")


def test_the_factor_is_the_default_until_a_model_capsule_then_the_largest_recent_ratio() -> None:
    predictor = SavingsPredictor(default=1.25, window=3)
    assert predictor.factor == 1.25 and predictor.capsule_tokens(1000, model=True) == 1250
    assert predictor.capsule_tokens(1000, model=False) == 1000, "the local capsule is its own size"
    for model, local in ((900, 1000), (1600, 1000), (1100, 1000)):
        predictor.observe(model, local)
    assert predictor.factor == 1.6
    predictor.observe(1000, 1000)
    predictor.observe(1000, 1000)
    assert predictor.factor == 1.1, "a ratio older than the window no longer counts"
    predictor.observe(1000, 0)  # nothing to compare with: ignored
    assert predictor.observed == (1.1, 1.0, 1.0)
    assert predictor.capsule_tokens(333, model=True) == math.ceil(333 * 1.1)


def test_a_model_capsule_is_predicted_scaled_before_the_fit_and_capped_at_the_reserve_the_fit_trims_to() -> None:
    predictor = SavingsPredictor(default=1.0)
    # the pi replay: a baseline of 4,638 tokens fitted to 3,963 under a 4,250 reserve, where the model's
    # capsule (3 tokens more before the fit) was fitted to 4,236: the fit drops whole items, the largest list's
    assert predictor.fitted_capsule_tokens(4638, 3963, 4250) == 4250, "not the fitted baseline, 3,963"
    assert predictor.fitted_capsule_tokens(3000, 3000, 4250) == 3000, "under the reserve nothing is trimmed"
    predictor.observe(1500, 1000)
    assert predictor.fitted_capsule_tokens(2000, 2000, 4250) == 3000
    assert predictor.fitted_capsule_tokens(6000, 2000, 4250) == 4250, "scaled over the reserve: fitted to it"
    assert predictor.fitted_capsule_tokens(6000, 5000, 4250) == 7500, "what the fit cannot trim, scaled"


def test_views_flight_records_show_the_time_and_tokens_of_a_thrown_away_summary(tmp_path: Path) -> None:
    ticks = itertools.count()
    summ = FakeSummarizer(answer=_bloated)
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), summ, clock=lambda: 1.5 * next(ticks))
    fill(store, 14000)
    asyncio.run(engine.preflight(TurnState()))  # requested, then skipped by the post-generation ROI
    asyncio.run(engine.preflight(TurnState()))  # predicted to miss: not requested
    df = views.flight_records(tmp_path / "flight.jsonl")
    comp = df[df["kind"] == "compaction"].reset_index(drop=True)
    assert comp["generated"].tolist() == [True, False] and comp["outcome"].tolist() == ["skipped", "skipped"]
    assert str(comp["wasted_ms"].dtype) == "Int64" and str(comp["generated"].dtype) == "boolean"
    thrown, predicted = comp.iloc[0], comp.iloc[1]
    assert thrown["duration_ms"] > 0 and thrown["wasted_ms"] == thrown["duration_ms"]
    assert thrown["wasted_tokens"] == thrown["summary_input_tokens"] + thrown["summary_output_tokens"] > 0
    assert predicted["wasted_ms"] == 0 and predicted["wasted_tokens"] == 0
    assert df.loc[df["kind"] == "budget", "wasted_ms"].isna().all()
    assert df["wasted_ms"].sum() == thrown["duration_ms"]


def test_a_completed_compaction_and_an_older_record_waste_nothing_and_nothing_known(tmp_path: Path) -> None:
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), FakeSummarizer())
    fill(store, 14000)
    asyncio.run(engine.compact(Trigger.USER))
    assert engine.parts.flight is not None
    engine.parts.flight.record("compaction", {"outcome": "skipped", "trigger": "turn_complete", "duration_ms": 90_000})
    comp = views.flight_records(tmp_path / "flight.jsonl")
    comp = comp[comp["kind"] == "compaction"]
    assert comp["wasted_ms"].iloc[0] == 0, "a summary that was appended was not thrown away"
    assert comp["wasted_ms"].isna().iloc[1], "a record from before `generated` was recorded: unknown, not 0"


def _padded(ratio: float) -> Any:
    """A stand-in model whose capsule is the deterministic one padded with prose to ``ratio``
    times its size (prose survives grounding; " note" is one token)."""
    def answer(request: SummaryRequest) -> Capsule:
        local = deterministic_capsule(list(request.entries), request.previous)
        cost = COUNTER.count_text(render(local, checkpoint_id="ck_0000000000", quality="ok"))
        return replace(local, done=(*local.done, "prose:" + " note" * math.ceil((ratio - 1) * cost)))
    return answer


def _soft_requests(flight: Path) -> list[dict[str, Any]]:
    return [r for r in read_flight_records(flight) if r["kind"] == "compaction" and r["generated"]
            and r["trigger"] in ("milestone", "plan_pivot", "turn_complete", "auto_threshold")]


@pytest.mark.parametrize("ratio", [1.0, 1.3])
def test_replaying_the_real_pi_session_no_requested_soft_summary_is_thrown_away(tmp_path: Path,
                                                                                ratio: float) -> None:
    """The real pi session under a 20k window, every summary from a model whose capsules are
    ``ratio`` times the deterministic ones. With only the seed's gate before generation most soft
    summaries are requested and then skipped; with the prediction, none is, and soft compactions
    still complete."""
    store = SessionStore.open(import_transcript(PI_SESSION, tmp_path / "imported"))
    config = small_config(tmp_path)
    results = {}
    for predict in (False, True):
        flight = tmp_path / f"flight-{predict}.jsonl"
        replayed = replay(store.path(), config, counter=COUNTER, workdir=tmp_path / f"replay-{predict}",
                          summarizer=FakeSummarizer(answer=_padded(ratio)), predict=predict,
                          flight=FlightRecorder(flight, "pi"))
        assert all(not r.oversized for r in replayed.inferences)
        requested = _soft_requests(flight)
        results[predict] = ([r for r in requested if r["outcome"] == "skipped"],
                            [r for r in requested if r["outcome"] == "completed"])
    (misses_before, _), (misses_after, completed_after) = results[False], results[True]
    assert len(misses_before) > 10, "the problem the prediction solves: summaries requested, then thrown away"
    assert [r["reason"] for r in misses_after] == []
    assert len(completed_after) >= 3


def test_a_model_summary_replaced_by_the_smaller_local_capsule_counts_as_thrown_away(tmp_path: Path) -> None:
    summ = FakeSummarizer(answer=_bloated)  # the model's capsule would grow the context: the local one is appended
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), summ)
    fill(store, 9000)
    outcome = asyncio.run(engine.compact(Trigger.USER))
    assert outcome.outcome == "completed" and outcome.quality == "degraded" and outcome.generated
    (record,) = [r for r in read_flight_records(tmp_path / "flight.jsonl") if r["kind"] == "compaction"]
    assert record["summary_used"] is False
    comp = views.flight_records(tmp_path / "flight.jsonl")
    comp = comp[comp["kind"] == "compaction"].iloc[0]
    assert comp["wasted_tokens"] == comp["summary_input_tokens"] + comp["summary_output_tokens"] > 0
    assert comp["wasted_ms"] == comp["duration_ms"]


def test_a_model_summary_that_became_the_capsule_is_used(tmp_path: Path) -> None:
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), FakeSummarizer())
    fill(store, 14000)
    assert asyncio.run(engine.compact(Trigger.USER)).quality == "ok"
    (record,) = [r for r in read_flight_records(tmp_path / "flight.jsonl") if r["kind"] == "compaction"]
    assert record["generated"] is True and record["summary_used"] is True
