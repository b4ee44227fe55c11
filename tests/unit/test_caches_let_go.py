"""Caches are bounded and clients are closed by their owner (issue 21 item 15): the capsule
validity cache and the imported-transcript cache keep only the most recent, and closing the
agent's runtime closes the summary provider's HTTP client as well as the model's."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from soba_notebook.agent import AgentRuntime
from soba_notebook.agent.loop import Agent
from soba_notebook.analysis import _common
from soba_notebook.config import load_config
from soba_notebook.errors import SessionWarning
from soba_notebook.session import Entry, SessionStore
from soba_notebook.session import context as model_context

DATA = Path(__file__).resolve().parents[1] / "data" / "importers"


def test_the_capsule_validity_cache_keeps_only_the_most_recently_checked_entries(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_context, "CAPSULE_CHECKS_KEPT", 4)
    monkeypatch.setattr(model_context, "_CAPSULE_OK", type(model_context._CAPSULE_OK)())
    entries = [Entry("capsule", {"state": {"goal": f"g{i}"}}, id=f"c{i}") for i in range(10)]
    assert all(model_context.capsule_is_usable(e) for e in entries)
    kept = [ref() for ref, _ in model_context._CAPSULE_OK.values()]
    assert kept == entries[-4:]  # the six older entries are no longer held
    assert model_context.capsule_is_usable(entries[0]) and len(model_context._CAPSULE_OK) == 4


def test_the_capsule_validity_cache_keeps_no_capsule_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_context, "_CAPSULE_OK", type(model_context._CAPSULE_OK)())
    entry = Entry("capsule", {"state": {"goal": "g"}}, id="c")
    assert model_context.capsule_is_usable(entry)
    ref = next(iter(model_context._CAPSULE_OK.values()))[0]
    del entry
    assert ref() is None  # the session store reads an old capsule back; the cache must not pin it
    again = Entry("capsule", {"state": {"goal": 1}}, id="c")  # invalid: checked, not the old answer
    with pytest.warns(SessionWarning, match="capsule entry c is invalid"):
        assert not model_context.capsule_is_usable(again)


def test_imported_transcripts_beyond_the_limit_are_forgotten_and_their_directories_removed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_common, "MAX_IMPORTS", 2)
    _common.clear_caches()
    source = DATA / "openai_messages.json"
    copies = []
    for i in range(3):
        copy = tmp_path / f"t{i}.json"
        shutil.copy(source, copy)
        copies.append(copy)
    stores = [_common.open_session(c) for c in copies]
    assert not stores[0].file.exists()  # the oldest import's temporary directory is gone
    assert stores[1].file.exists() and stores[2].file.exists()
    assert _common.open_session(copies[2]) is stores[2]  # still cached
    _common.clear_caches()
    assert not stores[2].file.exists()


class _ClosingProvider:
    name, label, offline = "closing", "a provider that records aclose", False

    def __init__(self) -> None:
        self.closed = 0

    async def complete(self, request: Any, *, on_event: Any = None) -> Any:
        raise AssertionError("not asked in this test")

    async def aclose(self) -> None:
        self.closed += 1


@pytest.mark.parametrize("separate_summary_model", [True, False])
def test_closing_the_runtime_closes_the_model_and_the_summary_provider_once_each(
        tmp_path: Path, separate_summary_model: bool) -> None:
    config = load_config(home=tmp_path / "home", project_dir=tmp_path,
                         overrides={"tools": {"workspace": str(tmp_path)}})
    model = _ClosingProvider()
    summary = _ClosingProvider() if separate_summary_model else model
    agent = Agent(SessionStore.create(tmp_path / "sessions"), config, model, workspace=tmp_path,  # type: ignore[arg-type]
                  summary_provider=summary)  # type: ignore[arg-type]
    AgentRuntime(agent).close()
    assert (model.closed, summary.closed) == (1, 1)  # one provider serving both is closed once
