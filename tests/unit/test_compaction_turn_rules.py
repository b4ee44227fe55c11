"""Rules of one agent turn around compaction, driven through the real Agent and engine: the one
soft attempt per turn is never spent on nothing (seed sections 4 and 6), overflow recovery,
live progress, secret scrubbing of capsules, and what holds only by construction."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agent_support import is_summary_request, make_agent
from compaction_support import FakeSummarizer, fill, make_engine, small_config
from fakeserver import OVERFLOW_BODIES, FakeServer, fake_server_fixture  # noqa: F401

from soba_notebook.compaction import Capsule, TurnState
from soba_notebook.compaction.overflow import overflow_figures, retry_budget, retry_refusal
from soba_notebook.providers.overflow import overflow_error

SMALL_WINDOW = {"contextWindow": 20000, "maxOutputTokens": 2000}
SMALL_COMPACTION = {"safetyReserveTokens": 1000, "keepRecentTokens": 4000, "minTokensForAutoCompact": 8000,
                    "minReclaimableTokens": 2000, "timeoutMs": 5000}
SUMMARY = '{"goal": "read big.txt", "done": ["read it"], "filesRead": ["big.txt"]}'


def _reader(limit: int) -> Any:
    """Agent replies that read big.txt ``limit`` times, then stop; summaries answered at once."""
    count = {"n": 0}

    def handler(path: str, body: dict[str, Any]) -> dict[str, Any]:
        if is_summary_request(body):
            return {"text": SUMMARY}
        count["n"] += 1
        if count["n"] <= limit:
            args = {"path": "big.txt", "start_line": count["n"]}  # distinct reads, not a loop
            return {"tool_calls": [{"id": f"r{count['n']}", "name": "read_file", "arguments": args}],
                    "usage": False}
        return {"text": "done", "usage": False}

    return handler


def test_turn_complete_intent_is_recorded_only_when_it_could_pass_the_pre_generation_roi(
        tmp_path: Path, fake_server: FakeServer) -> None:
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url, model=SMALL_WINDOW,
                             compaction=SMALL_COMPACTION)
    fake_server.openai.enqueue(text="hi", usage=False)
    assert asyncio.run(agent.run_turn("hello")).outcome == "completed"
    assert agent.engine.intents.pending() == (), "a tiny session could never pass the ROI: no intent"
    (agent.workspace / "big.txt").write_text("\n".join("lorem ipsum dolor sit amet " * 8 for _ in range(60)))
    fake_server.handler = _reader(3)
    assert asyncio.run(agent.run_turn("read big.txt a few times")).outcome == "completed"
    check = agent.engine.measure()
    assert check.effective - 4000 >= 2000 and check.effective < check.soft_limit
    assert [i.trigger.value for i in agent.engine.intents.pending()] == ["turn_complete"]


def test_soft_attempt_skipped_before_generation_does_not_block_an_eligible_auto_threshold_in_the_turn(
        tmp_path: Path) -> None:
    summ = FakeSummarizer()
    # keepRecentTokens 8000: at ~9000 tokens the milestone fails the pre-generation ROI
    store, engine, rec = make_engine(tmp_path, small_config(tmp_path, keepRecentTokens=8000), summ)
    fill(store, 9000)
    assert engine.record_intent("milestone", "parser fixed")
    turn = TurnState()
    asyncio.run(engine.preflight(turn))
    assert summ.calls == [] and rec.of("compaction_end")[-1]["outcome"] == "skipped"
    fill(store, 14000)  # same turn: now over the soft limit, and the ROI passes
    asyncio.run(engine.preflight(turn))
    assert [e["trigger"] for e in rec.of("compaction_end") if e["outcome"] == "completed"] == ["auto_threshold"]
    assert len(summ.calls) == 1
    asyncio.run(engine.preflight(turn))
    assert len(summ.calls) == 1, "the attempt that reached generation is the turn's one soft attempt"


def test_skipped_soft_attempt_is_not_repeated_each_inference_while_nothing_changed(tmp_path: Path) -> None:
    store, engine, rec = make_engine(tmp_path, small_config(tmp_path, keepRecentTokens=12000,
                                                            minReclaimableTokens=5000), FakeSummarizer())
    fill(store, 14000)  # over soft, but the pre-generation ROI fails
    turn = TurnState()
    for _ in range(3):
        asyncio.run(engine.preflight(turn))
    assert [e["outcome"] for e in rec.of("compaction_end")] == ["skipped"]


def test_auto_threshold_runs_in_a_long_turn_after_a_short_completed_turn(tmp_path: Path,
                                                                        fake_server: FakeServer) -> None:
    """The probe of issue 12: after the first turn, auto_threshold never ran until the hard limit."""
    agent, _, events = make_agent(tmp_path, "openai", fake_server.openai_base_url, model=SMALL_WINDOW,
                                  compaction=SMALL_COMPACTION)
    fake_server.openai.enqueue(text="hi", usage=False)
    asyncio.run(agent.run_turn("hello"))
    (agent.workspace / "big.txt").write_text("\n".join("lorem ipsum dolor sit amet " * 8 for _ in range(60)))
    fake_server.handler = _reader(40)
    result = asyncio.run(agent.run_turn("read big.txt many times"))
    assert result.outcome == "completed"
    completed = [e["trigger"] for e in events if e.type == "compaction_end" and e["outcome"] == "completed"]
    assert completed and completed[0] == "auto_threshold", completed
    starts = [e for e in events if e.type == "compaction_start"]
    assert starts[0]["tokens_before"] <= agent.config.hard_limit


def _history_then_overflow(fake_server: FakeServer, summary: str) -> None:
    q = fake_server.openai
    for i in range(3):
        q.enqueue(tool_calls=[{"id": f"w{i}", "name": "write_file",
                               "arguments": {"path": f"f{i}.txt", "content": "y " * 300}}], usage=False)
    q.enqueue(text="ok", usage=False)
    fake_server.handler = lambda path, body: {"text": summary} if is_summary_request(body) else {"text": "fine"}


def test_overflow_recovery_whose_model_capsule_would_not_shrink_the_request_aims_under_the_retry_budget(
        tmp_path: Path, fake_server: FakeServer) -> None:
    """The recovery is held to the retry's budget (under the rejected request), not to the
    configured hard limit: a model capsule that would leave the request as large is replaced by
    the smaller local one, and the one retry is smaller than the rejected request."""
    agent, provider, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url,
                                    compaction={"keepRecentTokens": 200, "timeoutMs": 5000})
    # pending work: working state, which fitting a capsule to its reserve never trims (capsule_fit.py)
    bloated = json.dumps({"goal": "g", "pending": [f"step {i}: " + "detail " * 30 for i in range(40)]})
    _history_then_overflow(fake_server, bloated)
    asyncio.run(agent.run_turn("write files"))
    fake_server.openai.enqueue_overflow()
    before = len([r for r in provider.sent if r.purpose == "agent"])
    result = asyncio.run(agent.run_turn("and now?"))
    agent_requests = [r for r in provider.sent if r.purpose == "agent"]
    capsules = [c for c in agent.store.entries() if c.type == "capsule"]
    assert [c.data["trigger"] for c in capsules] == ["context_overflow"]
    assert capsules[0].data["quality"] == "degraded", "the model's capsule would not have fitted"
    assert result.outcome == "completed", result
    assert len(agent_requests) - before == 2, "the rejected request and one retry"
    rejected, retry = (provider.request_tokens(r, agent.counter) for r in agent_requests[-2:])
    assert retry < rejected


def test_overflow_recovery_measures_the_rejected_request_as_the_server_counts_it_and_retries_once(
        tmp_path: Path, fake_server: FakeServer) -> None:
    """A server that counts the request half again as large as SOBA's calibrated estimate (its
    reported prompt anchors the budget check): the retry budget is the rejected request in those
    same units, so the recovery's capsule fits under it and the one retry is sent. (Sized by the
    calibrated estimate instead, the budget was under the recovery's own measure of any
    continuation: the recovery failed and nothing was resent.)"""
    agent, provider, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url,
                                    compaction={"keepRecentTokens": 200, "timeoutMs": 5000})
    q = fake_server.openai
    for i in range(3):
        q.enqueue(tool_calls=[{"id": f"w{i}", "name": "write_file",
                               "arguments": {"path": f"f{i}.txt", "content": "y " * 300}}])
    q.enqueue(text="ok")
    fake_server.handler = lambda path, body: {"text": '{"goal": "g"}'} if is_summary_request(body) \
        else {"text": "fine"}
    asyncio.run(agent.run_turn("write files"))
    estimate = agent.counter.calibrated(agent.engine.tracker.estimate_raw())
    reported = next(e.usage for e in reversed(agent.store.path()) if e.role == "assistant").prompt_tokens
    assert reported > estimate * 1.2, "the server counts more than SOBA's calibrated estimate"
    q.enqueue_overflow()
    before = len([r for r in provider.sent if r.purpose == "agent"])
    result = asyncio.run(agent.run_turn("and now?"))
    assert result.outcome == "completed" and result.text == "fine", result
    assert len([r for r in provider.sent if r.purpose == "agent"]) - before == 2, "the rejected request and one retry"
    assert [c.data["trigger"] for c in agent.store.entries() if c.type == "capsule"] == ["context_overflow"]


def test_overflow_retry_budget_is_under_the_rejected_size_and_the_provider_stated_limit() -> None:
    assert retry_budget(1161) == 1160
    # the provider said 131,072 against a 128,000 limit: the retry must shed that share too, and
    # the margin for the estimate's error (5%)
    assert retry_budget(100_000, 131072, 128000) == 92_773
    assert retry_budget(5000, None, 4096) == 3891
    # figures no tokenizer difference explains describe another request: only "smaller" holds
    assert retry_budget(1000, 131072, 128000) == 999
    assert retry_refusal(1239, retry_budget(1161), 1161) is not None
    assert retry_refusal(900, retry_budget(1161), 1161) is None
    for wire in ("openai", "anthropic", "ollama", "openrouter"):
        requested, limit = overflow_figures(overflow_error("overflow", OVERFLOW_BODIES[wire][1]))
        assert requested is not None and limit is not None and requested > limit, wire
    # vLLM's request fit in its prompt and overflowed in the completion it reserved: the prompt's
    # part is what the rejected request is measured against
    assert overflow_figures(overflow_error("overflow", OVERFLOW_BODIES["vllm"][1])) == (4096, 4096)


def test_overflow_recovery_runs_with_auto_false(tmp_path: Path, fake_server: FakeServer) -> None:
    agent, _, events = make_agent(tmp_path, "openai", fake_server.openai_base_url,
                                         compaction={"auto": False, "keepRecentTokens": 200, "timeoutMs": 5000})
    _history_then_overflow(fake_server, '{"goal": "g"}')
    asyncio.run(agent.run_turn("write files"))
    fake_server.openai.enqueue_overflow()
    result = asyncio.run(agent.run_turn("and now?"))
    assert result.outcome == "completed" and result.text == "fine"
    assert [e["trigger"] for e in events if e.type == "compaction_end"] == ["context_overflow"]


class _WaitsForProgress:
    """A one-chunk model summary that only finishes once live progress has moved past the start."""

    def __init__(self) -> None:
        self.moved: asyncio.Event | None = None
        self.seen_while_generating: list[int] = []

    def watch(self, event: Any) -> None:
        if event.type == "compaction_progress" and self.moved is not None and not self.moved.is_set():
            self.seen_while_generating.append(event["percent"])
            if 10 < event["percent"] < 80:
                self.moved.set()

    async def summarize(self, request: Any, progress: Any) -> Capsule:
        self.moved = asyncio.Event()
        await self.moved.wait()
        return Capsule(goal="g", done=("summarized",))


def test_live_progress_advances_while_a_single_chunk_summary_is_generated(tmp_path: Path) -> None:
    summ = _WaitsForProgress()
    store, engine, rec = make_engine(tmp_path, small_config(tmp_path, timeoutMs=3000), summ, progress_interval=0.02)
    engine.bus.subscribe(summ.watch)
    fill(store, 14000)
    asyncio.run(engine.preflight(TurnState()))
    end = rec.of("compaction_end")[-1]
    assert end["outcome"] == "completed" and end["quality"] == "ok", "the summary finished, not the fallback"
    assert any(10 < p < 80 for p in summ.seen_while_generating), summ.seen_while_generating
    percents = [e["percent"] for e in rec.of("compaction_progress")]
    assert percents == sorted(percents) and percents[-1] == 100


def test_capsule_entries_go_through_the_transcript_secret_scrubber(tmp_path: Path, fake_server: FakeServer,
                                                                   monkeypatch: Any) -> None:
    secret = "sk-test-" + "7c1e9a0b3d5f2e4a6b8c0d1e"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url,
                             compaction={"keepRecentTokens": 200, "timeoutMs": 5000})
    # the goal is the user's request (grounded), with the key's value the model filled in echoed into it
    request = "write files with the OPENAI_API_KEY key from the environment"
    echo = json.dumps({"goal": f"{request}: {secret}", "constraints": [f"never print {secret}"]})
    _history_then_overflow(fake_server, echo)
    asyncio.run(agent.run_turn(request))
    outcome = asyncio.run(agent.compact())
    assert outcome.outcome == "completed" and outcome.quality == "ok"
    raw = agent.store.file.read_text()
    assert secret not in raw, "the summary echoed the secret into the session JSONL"
    (capsule,) = [e for e in agent.store.entries() if e.type == "capsule"]
    assert "[REDACTED:OPENAI_API_KEY]" in capsule.data["state"]["goal"]
    assert secret not in json.dumps(agent.engine.model_messages())


def _mid_sized(request: object) -> Capsule:
    """A capsule so large that a soft compaction at ~9,500 tokens reclaims almost nothing."""
    return Capsule(goal="g", done=tuple(f"step {i}: " + "detail " * 25 for i in range(150)))


def test_a_soft_capsule_that_missed_the_roi_is_not_asked_for_again_until_enough_was_added_for_one_to_pass(
        tmp_path: Path) -> None:
    """Each soft attempt skipped after generation spent a summary request: a completed turn records
    the next ``turn_complete`` intent only once the context grew enough for a capsule to pass."""
    summ = FakeSummarizer(answer=_mid_sized)
    # soft limit 13,600; the growth rule alone, no predictor (with it: tests/unit/test_predicted_savings.py)
    store, engine, rec = make_engine(tmp_path, small_config(tmp_path), summ, predictor=None)
    fill(store, 9000)
    assert engine.record_turn_complete()
    asyncio.run(engine.preflight(TurnState()))
    end = rec.of("compaction_end")[-1]
    assert len(summ.calls) == 1 and end["outcome"] == "skipped" and "measured reclaimed" in end["reason"]
    assert engine.measure().effective < engine.measure().soft_limit
    assert not engine.record_turn_complete(), "nothing was added: the same capsule would miss the ROI again"
    fill(store, engine.measure().effective + 200)  # a little more history: still too little
    assert not engine.record_turn_complete()
    asyncio.run(engine.preflight(TurnState()))
    assert len(summ.calls) == 1, "no summary is requested while no new intent was recorded"
    grown = 0
    while not engine.record_turn_complete():  # the gate opens as the context grows, below the soft limit
        fill(store, engine.measure().effective + 200)
        grown += 1
        assert engine.measure().effective < engine.measure().soft_limit, "the gate never opened below the soft limit"
    asyncio.run(engine.preflight(TurnState()))
    assert len(summ.calls) == 2 and grown > 0


def test_new_roi_minimums_lift_the_wait_for_a_soft_capsule_that_missed_the_old_ones(tmp_path: Path) -> None:
    summ = FakeSummarizer(answer=_mid_sized)
    store, engine, rec = make_engine(tmp_path, small_config(tmp_path), summ)
    fill(store, 9000)
    assert engine.record_turn_complete()
    asyncio.run(engine.preflight(TurnState()))
    assert rec.of("compaction_end")[-1]["outcome"] == "skipped" and not engine.record_turn_complete()
    engine.set_config(small_config(tmp_path, minReclaimableTokens=0, minSavingsRatio=0.0))
    assert engine.record_turn_complete(), "the wait was computed from minimums that no longer apply"
