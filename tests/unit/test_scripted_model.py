"""The offline scripted model: a deterministic Provider running a real coding scenario.

A tiny agent loop in this file (``Driver``) runs every tool call for real with the built-in tools
in a ``tmp_path`` workspace, so file contents and test output are genuine. ``full_run`` is one
session of the four demo prompts plus a review prompt, shared by the tests that only read it; it
also keeps a copy of the workspace after every step so that compaction can be simulated at any
point without replaying the steps before it. One test drives the real compaction engine with a
small window.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from soba_notebook.agent.tools import ToolContext, default_tools
from soba_notebook.compaction import CompactionEngine, EngineParts, ModelSummarizer, TurnState
from soba_notebook.compaction.capsule import Capsule, Decision, EntryRange, render
from soba_notebook.compaction.extract import deterministic_capsule
from soba_notebook.compaction.summarize import (
    SUMMARY_SYSTEM_PROMPT,
    SummaryCall,
    build_summary_prompt,
    parse_capsule_answer,
    serialize_entries,
)
from soba_notebook.config import ToolsConfig, load_config
from soba_notebook.demo.scenario import (
    DEMO_PROMPTS,
    MARKER,
    PROGRESS_PATH,
    SURVEY_COMMAND,
    TASKS,
    TEST_COMMAND,
    decide,
)
from soba_notebook.demo.scripted import LABEL, ScriptedModel
from soba_notebook.errors import ContextOverflowError, ProviderError
from soba_notebook.events import EventBus
from soba_notebook.providers import Provider, is_context_overflow, make_provider
from soba_notebook.providers.base import STREAM_EVENT_KINDS, ModelRequest, ModelResponse, StreamEvent, SummarySource
from soba_notebook.session import SessionStore, assistant_message, tool_result, user_message
from soba_notebook.session.entries import Entry, ToolCall, checkpoint
from soba_notebook.tokens import TokenCounter

SYSTEM = "You are a coding agent working in a scratch workspace."
REGISTRY = default_tools(ToolsConfig())
SPECS = REGISTRY.specs()
TOOL_NAMES = [spec.name for spec in SPECS]
COUNTER = TokenCounter("gpt-4o")
REVIEW_PROMPT = "Anything left to do?"
UPPER_BOUND_STEPS = 40  # a cap on a loop, never an expectation


def request(messages: list[dict[str, Any]], **kwargs: Any) -> ModelRequest:
    return ModelRequest("soba-scripted", kwargs.pop("system", SYSTEM), tuple(messages), kwargs.pop("tools", SPECS),
                        **kwargs)


@dataclass
class Driver:
    """A minimal agent loop: infer, run every tool call for real, append the results, repeat."""

    workspace: Path
    model: ScriptedModel = field(default_factory=ScriptedModel)
    messages: list[dict[str, Any]] = field(default_factory=list)
    responses: list[ModelResponse] = field(default_factory=list)
    requests: list[tuple[dict[str, Any], ...]] = field(default_factory=list)
    turns: list[list[ModelResponse]] = field(default_factory=list)
    checkpoints: list[tuple[str, str]] = field(default_factory=list)
    snapshots: list[tuple[int, Path]] = field(default_factory=list)  # (messages length, workspace copy)
    snapshot_dir: Path | None = None
    results: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ctx = ToolContext(self.workspace, record_intent=self._intent)

    def _intent(self, kind: str, note: str) -> bool:
        self.checkpoints.append((kind, note))
        return True

    async def step(self) -> ModelResponse:
        self.requests.append(tuple(self.messages))
        response = await self.model.complete(request(self.messages))
        self.responses.append(response)
        self.turns[-1].append(response)
        self.messages.append({"role": "assistant", "content": response.text,
                              "toolCalls": [c.to_json() for c in response.tool_calls]})
        for call in response.tool_calls:
            outcome = await REGISTRY.run(call.name, call.arguments, self.ctx)
            result = {"role": "tool", "toolCallId": call.id, "name": call.name, "content": outcome.content,
                      "isError": outcome.is_error}
            self.messages.append(result)
            self.results.append(result)
        if self.snapshot_dir is not None:
            copy = self.snapshot_dir / f"step{len(self.responses)}"
            shutil.copytree(self.workspace, copy)
            self.snapshots.append((len(self.messages), copy))
        return response

    async def prompt(self, text: str) -> list[ModelResponse]:
        self.messages.append({"role": "user", "content": text})
        self.turns.append([])
        await self.finish_turn()
        return self.turns[-1]

    async def finish_turn(self) -> None:
        for _ in range(UPPER_BOUND_STEPS):
            if (await self.step()).stop_reason == "stop":
                return
        raise AssertionError(f"the turn did not finish within {UPPER_BOUND_STEPS} steps")

    def calls(self, responses: list[ModelResponse] | None = None) -> list[ToolCall]:
        return [c for r in (self.responses if responses is None else responses) for c in r.tool_calls]


@dataclass(frozen=True)
class FullRun:
    driver: Driver
    workspace: Path


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> FullRun:
    root = tmp_path_factory.mktemp("scripted")
    workspace = root / "ws"
    workspace.mkdir()
    driver = Driver(workspace, snapshot_dir=root / "snapshots")

    async def run() -> None:
        for prompt in (*DEMO_PROMPTS, REVIEW_PROMPT):
            await driver.prompt(prompt)

    asyncio.run(run())
    return FullRun(driver, workspace)


def test_model_is_offline_and_labelled_as_what_it_is() -> None:
    model = ScriptedModel()
    assert isinstance(model, Provider)
    assert (model.name, model.offline) == ("scripted", True)
    assert model.label == LABEL == "offline scripted model (deterministic, no network)"
    assert isinstance(make_provider({"provider": "scripted"}), ScriptedModel)
    asyncio.run(model.aclose())


# -- the scenario --------------------------------------------------------------------------------

def test_each_prompt_completes_its_task_with_real_files_and_passing_tests(full_run: FullRun) -> None:
    project = full_run.workspace / "calc_demo"
    for relative in ("calc/__init__.py", "calc/ops.py", "calc/tokenizer.py", "calc/parser.py", "calc/cli.py",
                     "calc/__main__.py", "calc/session.py", "tests/test_ops.py", "tests/test_parser.py",
                     "tests/test_cli.py", "tests/test_session.py"):
        assert (project / relative).is_file(), relative
    notes = (full_run.workspace / PROGRESS_PATH).read_text()
    assert all(f"- [x] {task.key}:" in notes for task in TASKS)
    assert '__version__ = "0.4.0"' in (project / "calc/__init__.py").read_text()
    assert "_TOKEN_RE" not in (project / "calc/tokenizer.py").read_text()  # the pivot's rewrite is on disk
    # every task ends with a real passing run of the whole suite, newer than its last change
    runs = [m for m in full_run.driver.results if m["name"] == "shell" and "Ran " in m["content"]]
    assert runs[-1]["content"].rstrip().endswith("OK\n[exit code 0]")
    assert "Ran 99 tests" in runs[-1]["content"]
    for turn in full_run.driver.turns[:4]:
        assert turn[-1].stop_reason == "stop" and turn[-1].text.startswith(MARKER + "Done:")


def test_first_test_run_of_every_task_fails_for_real_and_the_last_passes(full_run: FullRun) -> None:
    driver = full_run.driver
    results = {m["toolCallId"]: m for m in driver.messages if m["role"] == "tool"}
    for turn in driver.turns[:4]:
        runs = [results[c.id] for c in driver.calls(turn)
                if c.name == "shell" and c.arguments["command"] == TEST_COMMAND]
        assert len(runs) == 2
        assert runs[0]["isError"] and "FAILED (" in runs[0]["content"] and runs[0]["content"].endswith("[exit code 1]")
        assert not runs[1]["isError"] and runs[1]["content"].endswith("[exit code 0]")


def test_a_session_of_three_prompts_takes_at_least_thirty_inferences(full_run: FullRun) -> None:
    sizes = [len(turn) for turn in full_run.driver.turns]
    assert all(8 <= n <= 12 for n in sizes[:4]), sizes
    assert sum(sizes[:3]) >= 30
    assert sizes[4] <= 5  # the review prompt after the four tasks


def test_every_turn_starts_and_ends_with_the_offline_marker_and_echoes_the_prompt(full_run: FullRun) -> None:
    for prompt, turn in zip((*DEMO_PROMPTS, REVIEW_PROMPT), full_run.driver.turns, strict=True):
        assert turn[0].text.startswith(MARKER)
        assert f"“{prompt}”" in turn[0].text
        assert turn[-1].text.startswith(MARKER)
        assert all(r.stop_reason == "tool_use" and r.tool_calls for r in turn[:-1])


def test_parallel_tool_calls_are_made_in_one_step(full_run: FullRun) -> None:
    widths = [len(r.tool_calls) for r in full_run.driver.responses]
    assert max(widths) >= 3
    assert sum(1 for w in widths if w >= 2) >= 10
    orient = full_run.driver.turns[1][1].tool_calls
    assert [c.name for c in orient] == ["read_file", "read_file"]


def test_checkpoints_mark_each_milestone_and_the_tokenizer_pivot(full_run: FullRun) -> None:
    assert full_run.driver.checkpoints == [
        ("milestone", "calculator tests pass"),
        ("plan_pivot", "switch from regex to a hand-written tokenizer"),
        ("milestone", "parser tests pass"),
        ("milestone", "command line tests pass"),
        ("milestone", "session tests pass"),
    ]


def test_a_prompt_after_the_last_task_reviews_without_changing_files(full_run: FullRun) -> None:
    review = full_run.driver.turns[4]
    names = [c.name for c in full_run.driver.calls(review)]
    assert "write_file" not in names and "edit_file" not in names
    assert review[-1].text.startswith(MARKER + "Review finished") and "99 tests, OK" in review[-1].text


def test_tool_call_ids_name_the_task_and_the_step(full_run: FullRun) -> None:
    ids = [c.id for c in full_run.driver.calls()]
    assert len(ids) == len(set(ids))
    assert ids[0].startswith("scripted-turn-survey-")
    assert any(i.startswith("scripted-parser-pivot-") for i in ids)
    assert any(i.startswith("scripted-cli-locate-") for i in ids)


def test_two_runs_make_identical_tool_call_sequences(full_run: FullRun, tmp_path: Path) -> None:
    again = Driver(tmp_path)

    asyncio.run(again.prompt(DEMO_PROMPTS[0]))
    first = full_run.driver.responses[:len(again.responses)]
    assert [(c.id, c.name, dict(c.arguments)) for c in again.calls()] == \
        [(c.id, c.name, dict(c.arguments)) for c in full_run.driver.calls(first)]
    assert [r.text for r in again.responses] == [r.text for r in first]


def test_the_next_step_is_a_pure_function_of_the_request_messages(full_run: FullRun) -> None:
    for messages, response in zip(full_run.driver.requests, full_run.driver.responses, strict=True):
        step = decide(messages, TOOL_NAMES)
        assert (step.text, step.calls) == (response.text, response.tool_calls)


# -- resuming after compaction -------------------------------------------------------------------

def _entries(messages: list[dict[str, Any]]) -> list[Entry]:
    out: list[Entry] = []
    for n, m in enumerate(messages):
        if m["role"] == "user":
            entry = user_message(m["content"])
        elif m["role"] == "assistant":
            entry = assistant_message(m["content"], [ToolCall.from_json(c) for c in m["toolCalls"]])
        else:
            entry = tool_result(m["toolCallId"], m["name"], m["content"], is_error=m["isError"])
        out.append(entry.with_ids(f"e{n:04d}", f"e{n - 1:04d}" if n else None, "2025-01-01T00:00:00.000Z"))
    return out


def summary_request(entries: tuple[Entry, ...], previous: Capsule | None = None, *,
                    prompt: str | None = None) -> ModelRequest:
    """A summarize request as the agent sends it: the summarizer's prompt, and the entries and
    previous state that prompt was made from."""
    if prompt is None:
        prompt = build_summary_prompt(serialize_entries(entries), previous, None)
    return ModelRequest("soba-scripted", SUMMARY_SYSTEM_PROMPT, ({"role": "user", "content": prompt},),
                        purpose="summarize",
                        summary_source=SummarySource(entries, previous.to_json() if previous else None))


async def _capsule_text(model: ScriptedModel, history: list[dict[str, Any]], previous: Capsule | None = None) -> str:
    answer = await model.complete(summary_request(tuple(_entries(history)), previous))
    return render(parse_capsule_answer(answer.text), checkpoint_id="ck_test")


def _tail_start(messages: list[dict[str, Any]], keep: str) -> int:
    if keep == "last_step":
        return max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    return max(i for i, m in enumerate(messages) if m["role"] == "user")


def _cut_points() -> Iterator[tuple[int, int, str]]:
    """(turn, step within the turn, tail shape). The engine's shape (capsule + last step) after
    every non-final step of the first task; a bare prompt after a capsule at its write, failing
    run, fix and finish steps; both shapes around the second task's writes, failing run, pivot
    and re-run."""
    for step in range(1, 10):
        yield 0, step, "last_step"
    for step in (2, 5, 7, 9):
        yield 0, step, "prompt"
    for step in (4, 7, 8, 9):
        yield 1, step, "last_step"
        yield 1, step, "prompt"


@pytest.mark.parametrize(("turn", "step", "keep"), list(_cut_points()))
def test_after_compaction_the_task_finishes_without_redoing_finished_work(
        full_run: FullRun, tmp_path: Path, turn: int, step: int, keep: str) -> None:
    source = full_run.driver
    index = sum(len(t) for t in source.turns[:turn]) + step - 1  # the step after which we compact
    length, snapshot = source.snapshots[index]
    workspace = tmp_path / "ws"
    shutil.copytree(snapshot, workspace)
    existing = {p.relative_to(workspace).as_posix() for p in workspace.rglob("*.py") if "__pycache__" not in p.parts}
    before = {p: (workspace / p).read_text() for p in existing}
    driver = Driver(workspace)
    history = source.messages[:length]
    cut = _tail_start(history, keep)
    if keep == "prompt":  # everything is in the capsule; only the prompt is sent again, no tool work at all
        capsule, tail = asyncio.run(_capsule_text(driver.model, history)), [history[cut]]
    else:  # the engine's shape: capsule, then the last step with its results
        capsule, tail = asyncio.run(_capsule_text(driver.model, history[:cut])), history[cut:]
    driver.messages = [{"role": "user", "content": capsule}, *tail]
    driver.turns.append([])
    asyncio.run(driver.finish_turn())

    task = TASKS[turn]
    assert driver.responses[-1].text.startswith(MARKER + "Done:"), driver.responses[-1].text
    assert f"- [x] {task.key}:" in (workspace / PROGRESS_PATH).read_text()
    for call in driver.calls():
        if call.name == "write_file" and call.arguments["path"] in existing:
            path = call.arguments["path"]
            # the only legitimate rewrite of an existing file is the pivot away from the regex tokenizer
            assert path == "calc_demo/calc/tokenizer.py" and "_TOKEN_RE" in before[path], path
    errors = [r for r in driver.results if r["isError"] and not r["content"].endswith("[exit code 1]")]
    assert errors == []
    runs = [m for m in driver.messages if m["role"] == "tool" and "Ran " in m["content"]]
    assert runs and runs[-1]["content"].endswith("OK\n[exit code 0]")  # the last run seen passed
    assert len(driver.responses) <= 13


# -- summarization -------------------------------------------------------------------------------

def _summary(model: ScriptedModel, history: list[dict[str, Any]],
             previous: Capsule | None = None) -> tuple[str, Capsule]:
    answer = asyncio.run(model.complete(summary_request(tuple(_entries(history)), previous)))
    assert answer.stop_reason == "stop" and answer.tool_calls == () and answer.usage is not None
    return answer.text, parse_capsule_answer(answer.text)


def _as_answered(capsule: Capsule) -> Capsule:
    """``capsule`` as it reads back from a model's answer (which names no range, roll-up or latest
    request: the code fills those in)."""
    answered = {**capsule.to_json(), "covers": EntryRange().to_json(), "rolledFrom": []}
    answered.pop("latestRequest", None)
    return Capsule.from_json(answered)


def test_summary_is_the_real_extractors_capsule_of_the_entries_it_is_given(full_run: FullRun) -> None:
    messages = full_run.driver.messages
    previous = Capsule(goal="build a calculator", constraints=("standard library only",))
    for length, prior in ((full_run.driver.snapshots[4][0], None), (len(messages), None), (60, previous)):
        entries = tuple(_entries(messages[:length]))
        _, capsule = _summary(ScriptedModel(), messages[:length], prior)
        assert capsule == _as_answered(deterministic_capsule(entries, prior))


def test_summary_answer_is_one_valid_capsule_listing_files_checks_and_decisions(full_run: FullRun) -> None:
    first_two = sum(len(t) for t in full_run.driver.turns[:2])
    length = full_run.driver.snapshots[first_two - 1][0]
    text, capsule = _summary(ScriptedModel(), full_run.driver.messages[:length])
    assert text.startswith("{") and text.endswith("}")
    assert set(json.loads(text)) == {"goal", "constraints", "done", "active", "pending", "decisions", "blockers",
                                     "nextSteps", "filesRead", "filesModified", "verification", "activeSkills",
                                     "artifacts"}
    assert capsule.goal == DEMO_PROMPTS[0]
    assert {"calc_demo/calc/ops.py", "calc_demo/tests/test_ops.py", "calc_demo/calc/tokenizer.py",
            "calc_demo/calc/parser.py", PROGRESS_PATH} <= set(capsule.files_modified)
    assert "calc_demo/calc/ops.py" in capsule.files_read
    assert [(v.command, v.status) for v in capsule.verification][-1] == (TEST_COMMAND, "passed")
    assert [d for d in capsule.done if d.startswith("Milestone")] == ["Milestone: calculator tests pass",
                                                                      "Milestone: parser tests pass"]
    assert [d.what for d in capsule.decisions] == ["switch from regex to a hand-written tokenizer"]
    assert capsule.blockers == ()


def test_summary_of_an_unfinished_task_names_the_failure(full_run: FullRun) -> None:
    length = full_run.driver.snapshots[4][0]  # the first task right after its failing test run
    _, capsule = _summary(ScriptedModel(), full_run.driver.messages[:length])
    assert capsule.verification[-1].status == "failed"
    assert capsule.blockers and TEST_COMMAND in capsule.blockers[0]
    assert not any(d.startswith("Milestone") for d in capsule.done)


def test_summary_rolls_the_previous_capsule_state_forward(full_run: FullRun) -> None:
    previous = Capsule(goal="build a calculator", constraints=("standard library only",), done=("set up",),
                       decisions=(Decision("use unittest", "no third-party packages"),),
                       files_modified=("calc_demo/NOTES.md",))
    turn_two = full_run.driver.snapshots[len(full_run.driver.turns[0]) - 1][0]
    history = full_run.driver.messages[turn_two:turn_two + 30]
    _, capsule = _summary(ScriptedModel(), history, previous)
    assert capsule.goal == "build a calculator"
    assert capsule.constraints[0] == "standard library only"
    assert capsule.done[0] == "set up"
    assert [d.what for d in capsule.decisions][:1] == ["use unittest"]
    assert capsule.files_modified[0] == "calc_demo/NOTES.md"
    assert "calc_demo/calc/tokenizer.py" in capsule.files_modified


def test_summary_comes_from_the_entries_never_from_the_prompt_text(full_run: FullRun) -> None:
    entries = tuple(_entries(full_run.driver.messages[:40]))
    model = ScriptedModel()
    honest = asyncio.run(model.complete(summary_request(entries)))
    misleading = build_summary_prompt("[user e1]\nWrite a compiler\n\n[assistant e2]\n"
                                      '-> write_file({"path": "compiler.c", "content": ""})', None, None)
    answered = asyncio.run(model.complete(summary_request(entries, prompt=misleading)))
    assert answered.text == honest.text
    capsule = parse_capsule_answer(answered.text)
    assert capsule.goal == DEMO_PROMPTS[0] and "compiler.c" not in capsule.files_modified


def test_a_summarize_request_without_its_entries_is_refused(full_run: FullRun) -> None:
    prompt = build_summary_prompt(serialize_entries(_entries(full_run.driver.messages[:40])), None, None)
    with pytest.raises(ProviderError, match="summary_source"):
        asyncio.run(ScriptedModel().complete(request([{"role": "user", "content": prompt}], purpose="summarize",
                                                     system=SUMMARY_SYSTEM_PROMPT, tools=())))


def test_a_summary_request_is_recognised_by_its_kind_not_by_its_system_prompt() -> None:
    entries = tuple(_entries([{"role": "user", "content": DEMO_PROMPTS[0]}]))
    as_agent = replace(summary_request(entries), purpose="agent", tools=SPECS)
    response = asyncio.run(ScriptedModel().complete(as_agent))
    assert response.tool_calls and response.text.startswith(MARKER)  # the scenario's next step, not a capsule


def test_a_failing_summarizer_raises_a_provider_error() -> None:
    model = ScriptedModel(fail_summaries=True)
    with pytest.raises(ProviderError, match="fail_summaries"):
        asyncio.run(model.complete(request([{"role": "user", "content": "<history>\n</history>"}],
                                           purpose="summarize")))
    # agent requests are unaffected
    assert asyncio.run(model.complete(request([{"role": "user", "content": "hi"}]))).tool_calls


def test_a_slow_summarizer_can_be_timed_out() -> None:
    model = ScriptedModel(summary_delay=30.0)

    async def run() -> None:
        await asyncio.wait_for(model.complete(request([{"role": "user", "content": "<history>\n</history>"}],
                                                      purpose="summarize")), timeout=0.05)

    with pytest.raises(TimeoutError):
        asyncio.run(run())


# -- the provider surface ------------------------------------------------------------------------

def test_usage_reports_the_counted_request_and_reply(full_run: FullRun) -> None:
    messages = list(full_run.driver.requests[6])
    response = asyncio.run(ScriptedModel().complete(request(messages)))
    expected = (COUNTER.count_messages(messages) + COUNTER.count_text(SYSTEM) + 3 + COUNTER.count_tools(SPECS))
    assert response.usage is not None
    assert response.usage.input == expected
    reply = {"role": "assistant", "content": response.text, "toolCalls": [c.to_json() for c in response.tool_calls]}
    assert response.usage.output == COUNTER.count_message(reply) - 3 > 0
    assert (response.provider, response.model) == ("scripted", "soba-scripted")


def test_stream_events_reassemble_into_the_response(full_run: FullRun) -> None:
    messages = list(full_run.driver.requests[1])  # the step that writes calc/__init__.py
    events: list[StreamEvent] = []
    response = asyncio.run(ScriptedModel().complete(request(messages), on_event=events.append))
    assert {e.kind for e in events} <= STREAM_EVENT_KINDS
    assert "".join(e.data["text"] for e in events if e.kind == "text") == response.text
    assert sum(1 for e in events if e.kind == "text") > 1
    starts = [(e.data["index"], e.data["id"], e.data["name"]) for e in events if e.kind == "tool_call_start"]
    assert starts == [(i, c.id, c.name) for i, c in enumerate(response.tool_calls)]
    for i, call in enumerate(response.tool_calls):
        pieces = [e.data["arguments"] for e in events if e.kind == "tool_call_delta" and e.data["index"] == i]
        assert len(pieces) > 1 and json.loads("".join(pieces)) == dict(call.arguments)
    assert events[-1] == StreamEvent("usage", response.usage.to_json())


def test_a_request_over_the_context_window_raises_context_overflow(full_run: FullRun) -> None:
    messages = list(full_run.driver.requests[5])
    size = ScriptedModel.count_input(request(messages))
    events: list[StreamEvent] = []
    with pytest.raises(ContextOverflowError) as caught:
        asyncio.run(ScriptedModel(context_window=size - 1).complete(request(messages), on_event=events.append))
    assert events == []
    assert is_context_overflow(caught.value.status, str(caught.value))
    assert asyncio.run(ScriptedModel(context_window=size).complete(request(messages))).usage.input == size


def test_cancelling_mid_stream_raises_cancelled_error_and_stops_the_stream() -> None:
    model = ScriptedModel(stream_delay=0.05)
    events: list[StreamEvent] = []

    async def run() -> None:
        task = asyncio.ensure_future(model.complete(request([{"role": "user", "content": "go"}]),
                                                    on_event=events.append))
        for _ in range(200):
            if events:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        seen = len(events)
        await asyncio.sleep(0.2)
        assert len(events) == seen

    asyncio.run(run())
    assert events and not any(e.kind == "usage" for e in events)


def test_without_the_tools_it_needs_the_model_says_so_and_stops() -> None:
    tools = tuple(s for s in SPECS if s.name != "shell")
    response = asyncio.run(ScriptedModel().complete(request([{"role": "user", "content": "go"}], tools=tools)))
    assert response.stop_reason == "stop" and response.tool_calls == ()
    assert response.text.startswith(MARKER) and "shell" in response.text


def test_a_finished_turn_waits_for_a_new_prompt() -> None:
    step = decide([{"role": "user", "content": "go"}, {"role": "assistant", "content": "done", "toolCalls": []}])
    assert step.final and step.text.startswith(MARKER + "Nothing is pending")


def test_an_unusable_test_runner_stops_with_an_explanation() -> None:
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "toolCalls": [
            {"id": "scripted-calc-test-1", "name": "shell", "arguments": {"command": TEST_COMMAND}}]},
        {"role": "tool", "toolCallId": "scripted-calc-test-1", "name": "shell", "isError": True,
         "content": "bash: line 1: python3: command not found\n[exit code 127]"},
    ]
    step = decide(messages)
    assert step.final and "could not get a usable test run" in step.text and "command not found" in step.text


def test_a_step_that_keeps_failing_is_not_repeated_forever(tmp_path: Path) -> None:
    (tmp_path / "calc_demo").write_text("a file where the project directory should be\n")
    driver = Driver(tmp_path)
    turn = asyncio.run(driver.prompt(DEMO_PROMPTS[0]))
    assert turn[-1].text.startswith(MARKER) and "instead of looping" in turn[-1].text
    assert [c.name for c in driver.calls(turn[1:])] == ["write_file"] * 3


def test_a_new_prompt_after_compaction_starts_with_a_survey() -> None:
    capsule = render(Capsule(goal="calculator", done=("calculator tests pass",)), checkpoint_id="ck_1")
    step = decide([{"role": "user", "content": capsule}, {"role": "user", "content": "next please"}])
    assert [c.arguments.get("command") for c in step.calls if c.name == "shell"] == [SURVEY_COMMAND]
    assert "compacted" in step.text and "“next please”" in step.text


# -- with the real compaction engine -------------------------------------------------------------

def test_with_a_small_window_compaction_runs_repeatedly_and_every_task_still_finishes(tmp_path: Path) -> None:
    config = load_config(home=tmp_path / "home", project_dir=tmp_path / "proj", overrides={
        "model": {"contextWindow": 16000, "maxOutputTokens": 1000},
        "compaction": {"safetyReserveTokens": 1000, "keepRecentTokens": 3000, "minTokensForAutoCompact": 4000,
                       "minReclaimableTokens": 1000}})
    model = ScriptedModel(context_window=16000)

    async def summarize(call: SummaryCall) -> str:
        source = SummarySource(call.entries, call.previous.to_json() if call.previous else None)
        return (await model.complete(ModelRequest("soba-scripted", call.system,
                                                  ({"role": "user", "content": call.prompt},),
                                                  max_output_tokens=call.max_output_tokens, purpose="summarize",
                                                  summary_source=source))).text

    store = SessionStore.create(tmp_path / "sessions")
    bus = EventBus()
    ends: list[dict[str, Any]] = []
    bus.subscribe(lambda e: ends.append(dict(e.data)) if e.type == "compaction_end" else None)
    engine = CompactionEngine(store, config, COUNTER,
                              EngineParts(bus, ModelSummarizer(summarize, COUNTER, context_window=16000,
                                                               max_output_tokens=1000)),
                              base_tokens=COUNTER.count_text(SYSTEM) + 3 + COUNTER.count_tools(SPECS))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    ctx = ToolContext(workspace, record_intent=engine.record_intent,
                      append_checkpoint=lambda kind, note: store.append(checkpoint(kind, note)))
    finals: list[str] = []
    counts: list[int] = []

    async def run() -> None:
        for prompt in DEMO_PROMPTS:
            store.append(user_message(prompt))
            turn = TurnState()
            for n in range(1, UPPER_BOUND_STEPS):
                check = await engine.preflight(turn)
                response = await model.complete(request(engine.model_messages(), max_output_tokens=1000))
                assert response.usage is not None  # provider usage matches the engine's own estimate
                assert abs(response.usage.input - check.effective) <= 0.02 * check.effective
                turn.inferences += 1
                store.append(assistant_message(response.text, response.tool_calls, usage=response.usage,
                                               stop_reason=response.stop_reason))
                if response.stop_reason == "stop":
                    finals.append(response.text)
                    counts.append(n)
                    break
                for call in response.tool_calls:
                    outcome = await REGISTRY.run(call.name, call.arguments, ctx)
                    store.append(tool_result(call.id, call.name, outcome.content, is_error=outcome.is_error))
            engine.record_turn_complete()

    asyncio.run(run())
    assert all(text.startswith(MARKER + "Done:") for text in finals) and len(finals) == 4
    assert sum(counts[:3]) >= 30
    completed = [e for e in ends if e["outcome"] == "completed"]
    assert len(completed) >= 4
    assert {"auto_threshold", "hard_limit"} <= {e["trigger"] for e in completed}
    assert {"milestone", "turn_complete"} & {e["trigger"] for e in ends}
    capsules = [e for e in store.entries() if e.type == "capsule"]
    assert len(capsules) == len(completed) and all(c.data.get("quality") == "ok" for c in capsules)
    notes = (workspace / PROGRESS_PATH).read_text()
    assert all(f"- [x] {task.key}:" in notes for task in TASKS)
