"""BudgetState (the reducer every budget display shares) and BudgetWidget's synced state."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from soba_notebook.events import Event, EventBus
from soba_notebook.notebook.display import (
    HISTORY_LIMIT,
    BudgetState,
    CompactionSummary,
    TerminalBudgetDisplay,
    budget_line,
    progress_text,
)
from soba_notebook.notebook.throttle import ManualClock
from soba_notebook.notebook.widget import (
    CSS_NAME,
    ESM_NAME,
    BudgetWidget,
    asset_path,
    attach_budget_display,
    forget_session,
    widget_for,
)

REPO = Path(__file__).resolve().parents[2]


def budget(effective: int, inference: int, source: str = "provider_usage", **extra: Any) -> Event:
    data = {"session_id": "s1", "effective": effective, "hard_limit": 48_808, "soft_limit": 39_046,
            "context_window": 65_000, "source": source, "inference": inference, **extra}
    return Event("budget", data)


def start(op: str = "op1", trigger: str = "auto_threshold", before: int = 41_230) -> Event:
    return Event("compaction_start", {"operation_id": op, "trigger": trigger, "tokens_before": before,
                                      "hard_limit": 48_808, "soft_limit": 39_046})


def progress(percent: float, op: str = "op1", phase: str = "summarizing") -> Event:
    return Event("compaction_progress", {"operation_id": op, "phase": phase, "percent": percent})


def end(outcome: str = "completed", *, op: str = "op1", trigger: str = "auto_threshold",
        reason: str | None = None, before: int = 41_230, after: int | None = 12_877,
        checkpoint: str | None = "ck_ab12cd", quality: str | None = "ok", **extra: Any) -> Event:
    data: dict[str, Any] = {
        "operation_id": op, "trigger": trigger, "outcome": outcome, "reason": reason,
        "tokens_before": before, "tokens_after": after, "checkpoint_id": checkpoint,
        "duration_ms": 1_234, "quality": quality, "source": "provider_usage",
    }
    if after is not None:
        data["reclaimed_tokens"] = before - after
        data["reclaimed_percent"] = 100.0 * (before - after) / before
    data.update(extra)
    return Event("compaction_end", data)


def fold(*events: Event) -> BudgetState:
    state = BudgetState()
    for event in events:
        state.apply(event)
    return state


# -- BudgetState -------------------------------------------------------------------------------


def test_budget_event_sets_effective_limits_window_source_and_a_history_point() -> None:
    snap = fold(budget(41_230, 3)).snapshot()
    assert (snap["effective"], snap["hard_limit"], snap["soft_limit"], snap["context_window"]) == (
        41_230, 48_808, 39_046, 65_000)
    assert snap["source"] == "provider_usage"
    assert snap["session_id"] == "s1"
    assert snap["history"] == [{"inference": 3, "effective": 41_230, "source": "provider_usage"}]
    assert snap["phase"] == "idle"
    assert snap["usage_percent"] == 84.5


def test_zone_is_soft_at_the_soft_limit_and_over_only_past_the_hard_limit() -> None:
    assert fold(budget(39_045, 1)).snapshot()["zone"] == "ok"
    assert fold(budget(39_046, 1)).snapshot()["zone"] == "soft"
    assert fold(budget(48_808, 1)).snapshot()["zone"] == "soft"
    assert fold(budget(48_809, 1)).snapshot()["zone"] == "over"
    assert BudgetState().snapshot()["zone"] == "unknown"


def test_a_second_budget_for_the_same_inference_replaces_its_history_point() -> None:
    snap = fold(budget(41_230, 5, "estimated"), budget(41_100, 5, "provider_usage"), budget(42_000, 6)).snapshot()
    assert [(p["inference"], p["effective"], p["source"]) for p in snap["history"]] == [
        (5, 41_100, "provider_usage"), (6, 42_000, "provider_usage")]


def test_history_keeps_only_the_most_recent_inferences() -> None:
    state = fold(*(budget(1_000 + i, i) for i in range(HISTORY_LIMIT + 25)))
    history = state.snapshot()["history"]
    assert len(history) == HISTORY_LIMIT
    assert history[0]["inference"] == 25
    assert history[-1]["inference"] == HISTORY_LIMIT + 24


def test_progress_text_is_compacting_context_before_response_with_a_floored_percent() -> None:
    state = fold(budget(41_230, 3), start(), progress(82.9))
    snap = state.snapshot()
    assert snap["phase"] == "compacting"
    assert snap["progress"] == 82
    assert snap["progress_text"] == "Compacting context before response · 82%"
    assert snap["step"] == "summarizing"
    assert progress_text(100) == "Compacting context before response · 100%"


def test_an_explicit_user_compact_does_not_claim_a_response_is_waiting() -> None:
    state = fold(start(trigger="user"), progress(40))
    assert state.progress_text == "Compacting context · 40%"


def test_progress_never_decreases_within_an_operation_and_is_clamped() -> None:
    state = fold(start(), progress(30), progress(12), progress(29.5))
    assert state.progress == 30
    state.apply(progress(250))
    assert state.progress == 100
    assert fold(start(), progress(-5)).progress == 0


def test_progress_from_another_operation_is_ignored() -> None:
    state = fold(start(op="op2"), progress(10, op="op2"), progress(90, op="op1"))
    assert state.progress == 10


def test_a_new_compaction_starts_progress_from_zero() -> None:
    state = fold(start(op="op1"), progress(70), end(op="op1"), start(op="op2"))
    assert (state.phase, state.progress) == ("compacting", 0)


def test_completion_leaves_a_persistent_line_with_trigger_tokens_reclaimed_and_checkpoint() -> None:
    state = fold(budget(41_230, 3), start(), progress(82), end())
    snap = state.snapshot()
    assert snap["phase"] == "completed"
    assert snap["progress_text"] == ""
    last = snap["last_compaction"]
    assert last["text"] == "auto_threshold · 41,230 → 12,877 tokens · reclaimed 68.8% · ck_ab12cd"
    assert (last["outcome"], last["status"], last["checkpoint_id"]) == ("completed", "completed", "ck_ab12cd")
    assert last["reclaimed_tokens"] == 28_353

    # It persists through later measurements and turns until the next compaction ends.
    for event in (budget(13_400, 4), Event("turn_end", {"outcome": "completed"}),
                  Event("turn_start", {}), budget(15_000, 5), start(op="op2")):
        state.apply(event)
        assert state.snapshot()["last_compaction"]["text"] == last["text"]


def test_completed_compaction_moves_effective_to_the_continuation_size() -> None:
    snap = fold(budget(41_230, 3), start(), end()).snapshot()
    assert snap["effective"] == 12_877
    assert [p["effective"] for p in snap["history"]] == [41_230]  # history stays per inference


def test_a_degraded_capsule_is_visibly_marked() -> None:
    last = fold(start(trigger="hard_limit", before=50_100), end(trigger="hard_limit", before=50_100,
                                                             after=14_000, quality="degraded")).snapshot()
    line = last["last_compaction"]
    assert line["status"] == "degraded"
    assert line["text"].endswith("· degraded (local fallback capsule)")
    assert line["text"].startswith("hard_limit · history 50,100 tokens (never sent; over the 48,808 limit) → "
                                   "14,000 sent · reclaimed 72.1% · ck_ab12cd")


def test_a_skipped_compaction_is_a_quiet_note_that_never_replaces_the_last_compaction() -> None:
    snap = fold(start(), progress(60), end("skipped", reason="post-generation ROI below minimum",
                                           after=None, checkpoint=None, quality=None)).snapshot()
    assert snap["phase"] == "skipped"
    assert snap["last_compaction"] is None  # nothing ever compacted, so there is no "last compaction"
    assert snap["skip_note"] == "post-generation ROI below minimum"
    assert snap["compactions"] == []
    assert snap["progress"] == 60  # only a completed compact claims 100%
    assert snap["effective"] is None  # no budget event yet, and a skip does not invent one


@pytest.mark.parametrize("outcome", ["failed", "cancelled", "stale"])
def test_failed_cancelled_and_stale_outcomes_are_named_with_their_reason(outcome: str) -> None:
    snap = fold(start(trigger="hard_limit"), end(outcome, trigger="hard_limit", reason="why not",
                                                 after=None, checkpoint=None, quality=None)).snapshot()
    assert snap["phase"] == outcome
    assert snap["last_compaction"]["status"] == outcome
    assert f"hard_limit · {outcome}: why not" in snap["last_compaction"]["text"]


def test_reclaimed_numbers_are_derived_when_the_engine_omits_them() -> None:
    summary = CompactionSummary.from_event({"outcome": "completed", "trigger": "user", "tokens_before": 20_000,
                                            "tokens_after": 5_000, "checkpoint_id": "ck_1"})
    assert (summary.reclaimed_tokens, summary.reclaimed_percent) == (15_000, 75.0)
    assert summary.text == "user · 20,000 → 5,000 tokens · reclaimed 75.0% · ck_1"


def test_turn_start_returns_the_phase_to_idle_but_never_interrupts_a_running_compaction() -> None:
    state = fold(start(), end(), Event("turn_start", {}))
    assert state.phase == "idle"
    state = fold(start(), Event("turn_start", {}))
    assert state.phase == "compacting"


def test_a_turn_ending_during_a_compaction_never_leaves_the_display_spinning() -> None:
    state = fold(start(), progress(40), Event("turn_end", {"outcome": "cancelled"}))
    assert state.phase == "cancelled"
    assert state.progress_text == ""
    assert state.turn_outcome == "cancelled"


def test_errors_are_kept_and_unrelated_events_ignored() -> None:
    state = fold(budget(1_000, 1))
    before = state.snapshot()
    state.apply(Event("message_delta", {"text": "hi"}))
    state.apply(Event("tool_start", {"name": "bash"}))
    assert state.snapshot() == before
    state.apply(Event("error", {"message": "provider refused"}))
    assert state.snapshot()["last_error"] == "provider refused"


def test_snapshot_is_json_serializable_and_an_independent_copy() -> None:
    state = fold(budget(41_230, 3), start(), progress(50), end(quality="degraded"), budget(13_000, 4))
    snap = state.snapshot()
    assert json.loads(json.dumps(snap, allow_nan=False)) == snap
    snap["history"].clear()
    snap["last_compaction"]["text"] = "changed"
    assert len(state.snapshot()["history"]) == 2
    assert state.snapshot()["last_compaction"]["text"] != "changed"


def test_budget_line_summarises_measurement_and_last_compaction() -> None:
    snap = fold(budget(41_230, 3), start(), end(), budget(13_402, 4)).snapshot()
    assert budget_line(snap) == (
        "Context 13,402 / 48,808 tokens (27.5%) · next request · soft 39,046 · window 65,000 · provider_usage"
        " · last compaction: auto_threshold · 41,230 → 12,877 tokens · reclaimed 68.8% · ck_ab12cd")
    assert budget_line(BudgetState().snapshot()) == "Context budget: no measurement yet"


# -- BudgetWidget ------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _clean_registry() -> Any:
    yield
    for session_id in ("s1", "s2", "widget-test", "term-test"):
        forget_session(session_id)


def test_widget_state_trait_updates_after_events_from_another_thread() -> None:
    bus = EventBus()
    widget = BudgetWidget("s1").attach(bus)
    events = [budget(41_230, 3), start(), *(progress(i / 100) for i in range(10_000)), end(), budget(13_402, 4)]

    worker = threading.Thread(target=lambda: [bus.emit(e.type, **e.data) for e in events])
    worker.start()
    worker.join()
    widget.flush()

    assert widget.state == fold(*events).snapshot() | {"version": len(events)}
    assert widget.state["phase"] == "completed"
    assert widget.state["last_compaction"]["checkpoint_id"] == "ck_ab12cd"
    assert widget.throttle.stats.deliveries < 100  # batched, not one message per event


def test_widget_trait_updates_are_rate_limited_and_the_last_state_is_exact() -> None:
    clock = ManualClock()
    widget = BudgetWidget("s1", clock=clock, timer=clock.timer)
    changes: list[dict[str, Any]] = []
    widget.observe(lambda change: changes.append(change["new"]), names="state")

    bus = EventBus()
    widget.attach(bus)
    bus.emit("budget", **budget(41_230, 3).data)
    bus.emit("compaction_start", **start().data)
    for i in range(10_000):
        clock.set(i / 10_000)
        bus.emit("compaction_progress", **progress(i / 100).data)
    bus.emit("compaction_end", **end().data)
    clock.advance(1.0)

    assert len(changes) <= 12  # 10 per simulated second, plus the leading and trailing edges
    assert changes[-1]["phase"] == "completed"
    assert changes[-1]["version"] == 10_003
    progresses = [c["progress"] for c in changes]
    assert progresses == sorted(progresses)


def test_detach_stops_listening_and_delivers_the_final_state() -> None:
    clock = ManualClock()
    widget = BudgetWidget("s1", clock=clock, timer=clock.timer)
    bus = EventBus()
    widget.attach(bus)
    bus.emit("budget", **budget(1_000, 1).data)
    bus.emit("budget", **budget(2_000, 2).data)  # waits for the next slot
    widget.detach()
    assert widget.state["effective"] == 2_000
    bus.emit("budget", **budget(3_000, 3).data)
    widget.flush()
    assert widget.state["effective"] == 2_000


def test_attaching_to_a_new_bus_replaces_the_old_subscription() -> None:
    widget = BudgetWidget("s1")
    old, new = EventBus(), EventBus()
    widget.attach(old)
    widget.attach(new)
    old.emit("budget", **budget(1_111, 1).data)
    new.emit("budget", **budget(2_222, 1).data)
    widget.flush()
    assert widget.state["effective"] == 2_222
    assert widget.state["version"] == 1


def test_widget_for_returns_one_widget_per_session() -> None:
    first = widget_for("s1")
    assert widget_for("s1") is first
    assert widget_for("s2") is not first
    first.close()
    assert widget_for("s1") is not first  # a closed widget is replaced


def test_widget_repr_is_a_budget_line_never_a_trait_dump() -> None:
    widget = BudgetWidget("s1")
    widget.apply(budget(41_230, 3))
    text = repr(widget)
    assert text.startswith("soba budget [s1] · Context 41,230 / 48,808 tokens")
    assert "_esm" not in text and "state=" not in text
    bundle, _ = widget._repr_mimebundle_()
    assert bundle["text/plain"] == text


def test_rendered_message_from_the_frontend_releases_wait_rendered() -> None:
    widget = BudgetWidget("s1")
    assert widget.wait_rendered(timeout=0) is False
    widget._handle_custom_msg({"type": "something-else"}, [])
    assert widget.wait_rendered(timeout=0) is False
    widget._handle_custom_msg({"type": "soba:rendered"}, [])
    assert widget.wait_rendered(timeout=0) is True


def test_attach_budget_display_in_a_terminal_creates_no_widget() -> None:
    bus = EventBus()
    display = attach_budget_display(bus, "term-test", frontend="terminal")
    assert isinstance(display, TerminalBudgetDisplay)
    assert attach_budget_display(bus, "term-test", frontend="terminal") is display
    bus.emit("budget", **budget(1_000, 1).data)
    assert display.state.effective == 1_000
    assert len(bus._subscribers) == 1  # re-attaching did not double-subscribe


def test_attach_budget_display_in_a_kernel_reuses_the_session_widget() -> None:
    bus = EventBus()
    widget = attach_budget_display(bus, "widget-test", frontend="widget", show=False)
    assert isinstance(widget, BudgetWidget)
    assert attach_budget_display(bus, "widget-test", frontend="widget", show=False) is widget
    assert widget_for("widget-test") is widget


# -- shipped front-end files -------------------------------------------------------------------


def test_es_module_and_css_are_found_and_self_contained() -> None:
    esm = asset_path(ESM_NAME).read_text()
    css = asset_path(CSS_NAME).read_text()
    assert "export default" in esm and "render" in esm
    assert not re.search(r"^\s*import\b|\bimport\s*\(", esm, re.MULTILINE), "the ES module must not import"
    assert "http://" not in esm.replace("http://www.w3.org/2000/svg", "") and "https://" not in esm
    assert "@import" not in css and "url(" not in css
    for name in ("effective", "hard", "soft", "source", "phase", "progress", "outcome", "checkpoint",
                 "reclaimed", "quality"):
        assert f"d.{name} =" in esm, f"data-{name} is not set by the ES module"
    assert "var(--jp-" in css


def test_widget_loads_the_repository_js_files() -> None:
    widget = BudgetWidget("s1")
    assert widget._esm == (REPO / "js" / ESM_NAME).read_text()
    assert widget._css == (REPO / "js" / CSS_NAME).read_text()


def test_a_later_skip_keeps_the_last_completed_compaction_and_the_history_strip() -> None:
    snap = fold(start(), end(), start(op="op2"), end("skipped", op="op2", reason="nothing old enough to compact yet",
                                                     after=None, checkpoint=None, quality=None)).snapshot()
    assert snap["last_compaction"]["checkpoint_id"] == "ck_ab12cd"
    assert snap["skip_note"] == "nothing old enough to compact yet"
    assert [c["chip"] for c in snap["compactions"]] == ["auto_threshold −68.8%"]


def test_the_history_strip_keeps_the_last_completed_compactions_in_order() -> None:
    events = []
    for i in range(8):
        events += [start(op=f"op{i}"), end(op=f"op{i}", checkpoint=f"ck_{i}")]
    snap = fold(*events).snapshot()
    assert [c["checkpoint_id"] for c in snap["compactions"]] == [f"ck_{i}" for i in range(2, 8)]


def test_history_over_the_hard_limit_is_labelled_as_never_sent_and_the_request_as_under_it() -> None:
    snap = fold(budget(12_000, 1), start(before=50_000), end(before=50_000, after=14_000)).snapshot()
    last = snap["last_compaction"]
    assert last["over_limit"] is True
    assert "history 50,000 tokens (never sent; over the 48,808 limit) → 14,000 sent" in last["text"]
    under = fold(budget(12_000, 1), start(), end()).snapshot()["last_compaction"]
    assert under["over_limit"] is False and "41,230 → 12,877 tokens" in under["text"]


@pytest.mark.parametrize(("before", "after", "chip", "phrase"), [
    (2_259, 2_615, "user +15.8%", "grew 15.8%"),
    (41_230, 12_877, "user −68.8%", "reclaimed 68.8%"),
    (1_000, 1_000, "user 0.0%", "reclaimed 0.0%"),
])
def test_a_compaction_that_grew_the_context_never_prints_a_double_minus(before: int, after: int, chip: str,
                                                                      phrase: str) -> None:
    summary = CompactionSummary.from_event({"outcome": "completed", "trigger": "user", "tokens_before": before,
                                            "tokens_after": after, "reclaimed_tokens": before - after,
                                            "reclaimed_percent": round(100 * (before - after) / before, 1)})
    assert summary.chip == chip
    assert phrase in summary.text and "-" not in summary.text.replace("user", "")
