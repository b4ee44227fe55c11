"""The real-model tier for the figures a user reads about compaction (issue 20 items 5, 7 and 8).

llama-cpp-python's server with SmolLM2-135M-Instruct (``tests/realmodel_support.py``), driven
through the agent API, as the tier's other tests are:

* item 5: an explicit compaction never grows the context: ``tokens_after <= tokens_before``, and
  when the model's capsule measured larger than the history it replaces, the deterministic
  capsule (``degraded``) or a skip is what happened (the flight record says which);
* item 7: a completed compaction's "after" figure is the next request as SOBA sends it: within 5%
  of the server's own prompt count for that request (``usage.prompt_tokens`` of the reply), once
  what the next turn appended is added; and a fresh agent on the same session shows the same
  last compaction and the same effective figure as the old one;
* item 8: a soft summary is thrown away by the post-generation ROI only when the prediction was
  optimistic (its measured continuation larger than predicted), and the model factor the next
  prediction uses is at least the ratio that missed; no summary is requested for a compaction the
  prediction skipped. The miss rate is printed (``-s``) for docs/BENCHMARKS.md.

A 135M model is a protocol test: these assert what must hold whatever the model says. Every wait
is the tier's idle wait; nothing is timed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from realmodel_support import LocalServer, open_trusted_agent, project_config, running_server

from soba_notebook import views
from soba_notebook.compaction import CompactionOutcome
from soba_notebook.flight import read_flight_records
from soba_notebook.session import assistant_message, user_message

CALC = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
#: how far a compaction's "after" figure may be from the server's count of the next request (item 7)
AFTER_TOLERANCE = 0.05
#: how far a reopened session's figure may be from the old agent's (the calibration it relearns
#: from the transcript is the old one's, up to the base tokens, which both count the same way)
REOPEN_TOLERANCE = 0.01
SOFT = ("milestone", "plan_pivot", "turn_complete", "auto_threshold")
LOREM = ("The parser reads tokens from the lexer and builds a tree of nodes; each node keeps its source span. "
         "Errors carry the line and column of the offending token so the user can find them. ")
#: ``1``: the seed-gate-only run takes all eight turns, as for docs/BENCHMARKS.md's miss-rate table
#: (by default it stops once its assertions have what they read, see the test)
ALL_TURNS = os.environ.get("SOBA_FIGURES_ALL_TURNS") == "1"
PROMPTS = ("Read the file calc.py", "List the files in the workspace", "Read calc.py again and tell me what add does",
           "Run python calc.py with the shell tool", "What does mul do? Answer in one line")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with running_server(log) as running:
        yield running


@pytest.fixture(autouse=True)
def idle_server(server: LocalServer) -> Iterator[None]:
    """Every test starts on an idle server (see tests/realmodel/test_realmodel.py)."""
    server.wait_until_idle()
    yield


def _project(tmp_path: Path, config: dict[str, Any]) -> Path:
    project = tmp_path / "project"
    (project / ".soba").mkdir(parents=True)
    tools = {"workspace": str(project), "approval": "never"}
    (project / ".soba" / "config.json").write_text(json.dumps({**config, "tools": tools}))
    (project / "calc.py").write_text(CALC)
    return project


def _write_history(agent: Any, round_no: int) -> None:
    """Four exchanges of parser work, appended to the session as a turn's would be."""
    for step in range(4):
        agent.store.append(user_message(f"Round {round_no}, step {step} of the parser work. " + LOREM * 2))
        agent.store.append(assistant_message(f"Round {round_no}, step {step} is done: the lexer and the tree "
                                             f"agree. " + LOREM))


def _compactions(project: Path) -> list[dict[str, Any]]:
    return [r for r in read_flight_records(project / ".soba" / "flight.jsonl") if r.get("kind") == "compaction"]


def _gate_skip_and_thrown_away_summary(project: Path) -> bool:
    """Whether the flight records hold both things the seed-gate-only run's assertions are about: a
    soft compaction skipped before generation (no summary may have been requested for it) and a
    summary that was requested and thrown away (its cost must be in the flight view)."""
    soft = [r for r in _compactions(project) if r["trigger"] in SOFT]
    return (any(r["skipped_before_generation"] for r in soft)
            and any(r["generated"] and r["outcome"] == "skipped" for r in soft))


def test_explicit_compactions_never_grow_the_context_and_their_after_figure_is_the_servers_next_count(
        server: LocalServer, tmp_path: Path) -> None:
    config = project_config(server, auto=False, keepRecentTokens=300)
    # One request a turn: the turns only calibrate the count and give the server's next count.
    config["agent"] = {"maxStepsPerTurn": 1}
    project = _project(tmp_path, config)
    handle = open_trusted_agent(project)
    agent = handle.agent
    #: per compaction: (outcome, calibrated tokens of what the next turn appended before its request)
    compactions: list[tuple[CompactionOutcome, int]] = []

    async def scenario() -> None:
        try:
            # The history each compaction summarizes is written, not asked of the model: what a 135M
            # model does in three turns (its path changes with the workspace path in its prompt)
            # once ran past the hard limit, and the hard-limit compaction left the explicit ones
            # nothing old enough to compact (fresh-clone CI run 13). The summary and the next
            # request, which the rule is about, go to the real server.
            await agent.run_turn("Say OK")  # calibrates the count on this server's replies
            await asyncio.to_thread(server.wait_until_idle)
            for round_no in range(2):
                _write_history(agent, round_no)
                outcome = await agent.compact()
                await asyncio.to_thread(server.wait_until_idle)
                compactions.append((outcome, 0))
                before_turn = len(agent.store.path())
                await agent.run_turn("Say OK")
                await asyncio.to_thread(server.wait_until_idle)
                appended = [e for e in agent.store.path()[before_turn:] if e.is_model_input]
                first_reply = next((i for i, e in enumerate(appended) if e.role == "assistant"), len(appended))
                raw = sum(agent.counter.count_entry(e) for e in appended[:first_reply])
                compactions[-1] = (outcome, agent.counter.calibrated(raw))
            # the session ends on a compaction: its figure is an estimate, the one a reopened
            # session must agree with
            _write_history(agent, 2)
            last.append(await agent.compact())
            await asyncio.to_thread(server.wait_until_idle)
        finally:
            await agent.provider.aclose()

    last: list[CompactionOutcome] = []
    asyncio.run(scenario())
    old_snapshot = agent.engine.publish()
    handle.close()
    records = {r["operation_id"]: r for r in _compactions(project)}
    path = agent.store.path()
    figures: list[tuple[str, str, int, int, tuple[int, int, float] | None]] = []
    for outcome, appended in compactions:
        record = records[outcome.operation_id]
        # item 5: never larger; a model capsule that measured larger than the history was replaced
        # by the deterministic one, or nothing was appended
        assert outcome.tokens_after <= outcome.tokens_before, record
        model_after = record.get("measured_after")
        if isinstance(model_after, int) and model_after >= outcome.tokens_before:
            assert outcome.outcome == "skipped" or outcome.quality == "degraded", record
        if outcome.outcome != "completed":
            figures.append((outcome.trigger, outcome.outcome, outcome.tokens_before, outcome.tokens_after, None))
            continue
        # item 7: the next request, as the server counted it
        capsule_at = next(i for i, e in enumerate(path) if e.id == (outcome.entry.id if outcome.entry else None))
        reply = next((e for e in path[capsule_at:] if e.role == "assistant" and e.usage is not None
                      and e.usage.reported and e.usage.prompt_tokens > 0), None)
        assert reply is not None and reply.usage is not None, "the turn after the compaction reached the server"
        real = reply.usage.prompt_tokens
        error = (outcome.tokens_after + appended - real) / real
        figures.append((outcome.trigger, outcome.outcome, outcome.tokens_before, outcome.tokens_after,
                        (real, appended, round(100 * error, 2))))
    print(f"\nREALMODEL item 7 compactions (trigger, outcome, before, after, (server next, appended, % error)): "
          f"{figures}")
    completed = [f for f in figures if f[4] is not None]
    assert completed, f"no explicit compaction completed: {figures}"
    for figure in completed:
        assert figure[4] is not None and abs(figure[4][2]) <= 100 * AFTER_TOLERANCE, figures
    # item 7: a fresh agent on the same session shows the same last compaction and the same figure
    reopened = open_trusted_agent(project, session=agent.store.id)
    try:
        fresh = reopened.agent.engine.publish()
    finally:
        reopened.close()
    print(f"REALMODEL item 7 reopen after a {last[0].outcome} compaction: old {old_snapshot.effective:,} "
          f"({old_snapshot.source}), fresh {fresh.effective:,} ({fresh.source})")
    assert last[0].tokens_after <= last[0].tokens_before, last
    assert fresh.last_compaction is not None and old_snapshot.last_compaction is not None
    assert fresh.last_compaction["checkpoint_id"] == old_snapshot.last_compaction["checkpoint_id"]
    assert abs(fresh.effective - old_snapshot.effective) <= REOPEN_TOLERANCE * old_snapshot.effective, (
        old_snapshot, fresh)



@pytest.mark.parametrize("predict", [True, False], ids=["with-prediction", "seed-gate-only"])
def test_a_soft_summary_is_thrown_away_only_when_the_prediction_was_optimistic_and_its_cost_is_in_the_flight_view(
        server: LocalServer, tmp_path: Path, predict: bool) -> None:
    # The soft limit sits under the session's size, so every turn's first preflight is a soft
    # (auto_threshold) attempt: a 135M model's turns rarely complete (they end on the step limit),
    # so turn_complete intents alone would seldom ask for one. ``seed-gate-only`` is the code before
    # the prediction (the seed's pre-generation gate alone): what the prediction saves. It stops after
    # the first turn that leaves both a gate skip and a thrown-away summary in the flight records
    # (what its assertions read; the seed's gate throws most summaries away, so that comes early),
    # unless SOBA_FIGURES_ALL_TURNS=1 asks for the eight turns the miss-rate table was made of.
    config = project_config(server, keepRecentTokens=300, minTokensForAutoCompact=1000,
                            autoCompactThresholdRatio=0.3)
    project = _project(tmp_path, config)
    handle = open_trusted_agent(project)
    agent = handle.agent
    if not predict:
        agent.engine.parts = dataclasses.replace(agent.engine.parts, predictor=None)  # an agent open_agent built

    turns: list[str] = []

    async def scenario() -> None:
        try:
            for prompt in PROMPTS + PROMPTS[:3]:
                await agent.run_turn(prompt)
                await asyncio.to_thread(server.wait_until_idle)
                turns.append(prompt)
                if not predict and not ALL_TURNS and _gate_skip_and_thrown_away_summary(project):
                    break  # what the assertions below read is there; more turns only repeat it
        finally:
            await agent.provider.aclose()

    asyncio.run(scenario())
    handle.close()
    records = _compactions(project)
    soft = [r for r in records if r["trigger"] in SOFT]
    assert soft, "the session never reached a soft compaction"
    # no summary is requested for a compaction the prediction (or the seed's gate) skipped
    assert all(not r["generated"] for r in records if r["skipped_before_generation"]), records
    generated = [r for r in soft if r["generated"]]
    misses = [r for r in generated if r["outcome"] == "skipped"]
    for miss in misses if predict else ():
        # thrown away only when the model's capsule came out larger than predicted ...
        assert miss["measured_after"] > miss["predicted_after"], miss
        # ... and the next prediction scales by a larger factor (the miss's ratio is in the window)
        later = [r for r in soft[soft.index(miss) + 1:] if r.get("prediction_factor") is not None]
        if later:
            assert later[0]["prediction_factor"] > miss["prediction_factor"], (miss, later[0])
    # what each thrown-away summary cost is in views.flight_records: its duration and its tokens
    frame = views.flight_records(project / ".soba" / "flight.jsonl")
    thrown = frame[frame.generated.fillna(False) & (frame.outcome == "skipped")]
    assert len(thrown) == len(misses)
    assert (thrown.wasted_ms > 0).all() and (thrown.wasted_tokens > 0).all(), thrown
    predicted_skips = [r for r in soft if r["skipped_before_generation"] and r.get("predicted_after") is not None]
    rate = len(misses) / len(generated) if generated else 0.0
    completed = sum(r["outcome"] == "completed" for r in soft)
    shown = [(r["outcome"], r.get("predicted_after"), r.get("measured_after"), r["tokens_before"]) for r in soft]
    print(f"\nREALMODEL item 8 ({'with the prediction' if predict else 'seed gate only'}, {len(turns)} turns): "
          f"soft compactions "
          f"{len(soft)}, summaries requested {len(generated)}, thrown away {len(misses)} (miss rate {rate:.0%}), "
          f"skipped by the prediction {len(predicted_skips)}, completed {completed}, "
          f"time on thrown-away summaries {int(thrown.wasted_ms.sum()) / 1000:,.1f} s, tokens "
          f"{int(thrown.wasted_tokens.sum()):,}; factors {[r.get('prediction_factor') for r in soft]}; "
          f"(outcome, predicted, measured, before) {shown}")
