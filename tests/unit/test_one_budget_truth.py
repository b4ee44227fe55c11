"""One source of truth for the budget a user reads (issue 20 item 7, issue 21 item 12).

The widget, ``%soba status`` and the completion line read the snapshot the engine publishes on its
own thread; the 'after' figure of a compaction is the next request as SOBA measures it; a reopened
session shows its last compaction; the offline model (whose usage SOBA counts itself) is never
badged ``provider_usage``; and nothing on the kernel thread measures while a turn runs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from soba_notebook import views
from soba_notebook.demo.scenario import DEMO_PROMPTS
from soba_notebook.events import Event
from soba_notebook.notebook.controller import NotebookSession
from soba_notebook.notebook.display import CompactionSummary

#: Small enough that two demo turns leave history before the retained window to compact.
SMALL = {"compaction": {"keepRecentTokens": 400}}


def terminal_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[NotebookSession]:
    """A terminal front end's session on a fresh project, closed after the test."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no user config leaks in
    project = tmp_path / "project"
    project.mkdir()
    s = NotebookSession(project, user_namespace={}, frontend="terminal", overrides=SMALL)
    yield s
    s.close()


@pytest.fixture
def session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[NotebookSession]:
    yield from terminal_session(tmp_path, monkeypatch)


def _events(s: NotebookSession) -> list[Event]:
    seen: list[Event] = []
    s.ensure()
    assert s.bus is not None
    s.bus.subscribe(seen.append)
    return seen


def _compact(s: NotebookSession) -> Any:
    handle = s.ensure()
    return s.run_job(lambda cancel: handle.agent.compact(None, cancel), "%compact", summary="%compact")


def _shown(s: NotebookSession) -> dict[str, Any]:
    """What the budget display (the widget's reducer; here the terminal's) holds now."""
    return dict(s.show_budget(show=False).state.snapshot())


def test_the_offline_model_is_never_badged_provider_usage(session: NotebookSession) -> None:
    seen = _events(session)
    for prompt in DEMO_PROMPTS[:2]:
        assert session.run(prompt) is not None
    sources = {e.get("source") for e in seen if e.type == "budget"}
    assert sources == {"estimated"}, sources
    assert session.status()["source"] == "estimated"
    assert _shown(session)["source"] == "estimated"
    handle = session.ensure()
    replies = [e for e in handle.store.path() if e.role == "assistant" and e.usage is not None]
    assert replies and all(e.usage.counted and not e.usage.reported for e in replies)
    walked = views.budget_history(handle.store.file)
    assert "provider_usage" not in set(walked["source"].dropna())


def test_status_and_the_budget_display_read_one_snapshot_after_a_compaction_and_a_skip(
        session: NotebookSession) -> None:
    for prompt in DEMO_PROMPTS[:2]:
        session.run(prompt)
    done = _compact(session)
    assert done.outcome == "completed", done.reason
    skipped = _compact(session)  # nothing old enough any more: a quiet skip, not the last compaction
    assert skipped.outcome == "skipped"
    status, shown = session.status(), _shown(session)
    assert (status["effective"], status["source"]) == (shown["effective"], shown["source"])
    assert (status["hard_limit"], status["soft_limit"]) == (shown["hard_limit"], shown["soft_limit"])
    told = CompactionSummary.from_event(status["last_compaction"])
    assert told.checkpoint_id == done.checkpoint_id == shown["last_compaction"]["checkpoint_id"]
    assert told.text == shown["last_compaction"]["text"]
    assert status["skip_note"] == shown["skip_note"] and status["skip_note"]


def test_the_after_figure_of_a_compaction_is_the_next_request_as_measured(session: NotebookSession) -> None:
    seen = _events(session)
    for prompt in DEMO_PROMPTS[:2]:
        session.run(prompt)
    done = _compact(session)
    assert done.outcome == "completed", done.reason
    engine = session.ensure().agent.engine
    end = [e for e in seen if e.type == "compaction_end"][-1]
    after_end = [e for e in seen[seen.index(end):] if e.type == "budget"]
    assert after_end, "a budget event follows the compaction"
    assert end["tokens_after"] == after_end[0]["effective"] == engine.snapshot().effective
    assert done.entry is not None and done.entry.data["tokensAfter"] == end["tokens_after"]


def test_a_reopened_session_shows_its_last_compaction(session: NotebookSession, tmp_path: Path) -> None:
    for prompt in DEMO_PROMPTS[:2]:
        session.run(prompt)
    done = _compact(session)
    assert done.outcome == "completed", done.reason
    before = session.status()
    sid = session.ensure().store.id
    session.close()
    fresh = NotebookSession(session.project_dir, user_namespace={}, frontend="terminal", overrides=SMALL)
    try:
        fresh.ensure(session=sid)
        status = fresh.status()
        last = status["last_compaction"]
        assert last is not None, "a fresh kernel on the session says which compaction it had"
        assert (last["checkpoint_id"], last["trigger"], last["tokens_after"]) == (
            done.checkpoint_id, "user", done.tokens_after)
        assert status["effective"] == before["effective"], "the same session measures the same in a fresh kernel"
        assert _shown(fresh)["last_compaction"]["checkpoint_id"] == done.checkpoint_id
    finally:
        fresh.close()


def test_status_and_budget_never_measure_on_the_kernel_thread_while_a_turn_runs(
        session: NotebookSession) -> None:
    handle = session.ensure()
    tracker = handle.agent.engine.tracker
    runtime_thread = session.runtime._thread  # type: ignore[union-attr]
    measured_on: list[threading.Thread] = []
    check = tracker.check

    def spy() -> Any:
        measured_on.append(threading.current_thread())
        return check()

    tracker.check = spy  # type: ignore[method-assign]
    started = threading.Event()
    release = threading.Event()
    assert session.bus is not None
    session.bus.subscribe(lambda e: (started.set(), release.wait(30)) if e.type == "tool_start" else None)
    session.run(DEMO_PROMPTS[0], background=True)
    assert started.wait(30), "the background turn reached a tool"
    try:
        assert session.runtime is not None and session.runtime.busy
        status = session.status()
        session.show_budget(show=False)
        assert status["busy"] and status["effective"] is not None
    finally:
        release.set()
    assert measured_on and all(t is runtime_thread for t in measured_on), {t.name for t in measured_on}
