"""One source of truth for the budget a user reads (issue 20 item 7, issue 21 item 12).

The widget, ``%soba status`` and the completion line read the snapshot the engine publishes on its
own thread; the 'after' figure of a compaction is the next request as SOBA measures it; a reopened
session shows its last compaction; the offline model (whose usage SOBA counts itself) is never
badged ``provider_usage``; and nothing on the kernel thread measures while a turn runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from soba_notebook import views
from soba_notebook.demo.scenario import DEMO_PROMPTS
from soba_notebook.events import Event
from soba_notebook.notebook.controller import NotebookSession

#: Small enough that two demo turns leave history before the retained window to compact.
SMALL = {"compaction": {"keepRecentTokens": 400}}


@pytest.fixture
def session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no user config leaks in
    project = tmp_path / "project"
    project.mkdir()
    s = NotebookSession(project, user_namespace={}, frontend="terminal", overrides=SMALL)
    yield s
    s.close()


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
