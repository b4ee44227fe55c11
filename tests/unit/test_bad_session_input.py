"""Issue 13, item 8: bad session files are clear warnings or errors naming file and line; the session
stays usable and nothing hangs."""

from __future__ import annotations

import asyncio
import os
import warnings
from pathlib import Path

import pytest
from agent_support import make_agent
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401

from soba_notebook.errors import SessionError, SessionWarning
from soba_notebook.session import SessionStore, list_sessions
from soba_notebook.session.entries import Entry, user_message


def test_a_deeply_nested_line_is_skipped_with_a_warning_naming_file_and_line(tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path)
    store.append(user_message("before"))
    with open(store.file, "a") as fh:
        fh.write('{"type":"message","id":"deep","data":' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.warns(SessionWarning, match=rf"{store.file}:3: JSON nested too deeply"):
        reopened = SessionStore.open(store.file)
    assert [e.text for e in reopened.path()] == ["before"]
    reopened.append(user_message("after"))
    assert [e.text for e in SessionStore.open(store.file).path()] == ["before", "after"]


def test_a_leaf_pointing_at_a_missing_id_keeps_the_history_and_warns(tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path)
    store.append(user_message("one"))
    store.append(user_message("two"))
    store.append(Entry("leaf", {"targetId": "no-such-id"}))
    with pytest.warns(SessionWarning, match=rf"{store.file}:4: leaf entry .* points to 'no-such-id'"):
        reopened = SessionStore.open(store.file)
    assert [e.text for e in reopened.path()] == ["one", "two"]


def test_a_fifo_in_the_sessions_directory_never_hangs_open_or_listing(tmp_path: Path) -> None:
    real = SessionStore.create(tmp_path)
    fifo = tmp_path / "zz-fifo.jsonl"
    os.mkfifo(fifo)
    with pytest.warns(SessionWarning, match="not a regular file"):
        listed = list_sessions(tmp_path)
    assert [s.path for s in listed] == [real.file]
    with pytest.raises(SessionError, match=rf"{fifo}: not a regular file"):
        SessionStore.open(fifo)


def test_an_invalid_capsule_is_skipped_for_model_input_and_later_turns_work(
        tmp_path: Path, fake_server: FakeServer) -> None:
    agent, provider, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    fake_server.openai.enqueue(text="first answer")
    asyncio.run(agent.run_turn("first question"))
    agent.store.append(Entry("capsule", {"checkpointId": "ck_bad", "firstKeptEntryId": None, "trigger": "user",
                                         "quality": "ok", "state": {"goal": 42, "done": "not a list"}}))
    fake_server.openai.enqueue(text="second answer")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = asyncio.run(agent.run_turn("second question"))
    assert result.outcome == "completed", result.error
    assert any("capsule entry" in str(w.message) and "is invalid" in str(w.message) for w in seen)
    sent = str(provider.sent[-1].messages)
    assert "first question" in sent and "second question" in sent and "ck_bad" not in sent
