"""Session ownership across real kernels: each kernel writes its own session unless it resumes one,
a session another live kernel writes is never joined silently, and switching sessions while a
turn runs cancels that turn cleanly first (issues 20.1, 21.2, 21.4)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kernel_support import Kernel

from soba_notebook.session import SessionStore, list_sessions
from soba_notebook.session.context import pair_problems
from soba_notebook.session.entries import user_message

pytestmark = pytest.mark.kernel


def _model_input(store: SessionStore) -> list:
    return [e for e in store.path() if e.is_model_input]


def _user_texts(store: SessionStore) -> list[str]:
    return [e.text for e in store.path() if e.role == "user" and e.data.get("source") != "cell_history"]


def test_two_kernels_prompted_at_the_same_moment_write_one_session_each_with_every_pair_intact(
        tmp_path: Path) -> None:
    project = tmp_path / "project"
    sessions = project / ".soba" / "sessions"
    earlier = SessionStore.create(sessions, cwd=str(project))  # yesterday's session: the newest one
    earlier.append(user_message("yesterday's work"))
    earlier_bytes = earlier.file.read_bytes()
    kernels = [Kernel(project, tmp_path / "home") for _ in range(2)]
    names = ("one", "two")
    try:
        for round_no in range(20):
            sent = [k.submit(f"%soba kernel {name} {round_no}") for k, name in zip(kernels, names, strict=True)]
            for k, msg_id in zip(kernels, sent, strict=True):
                status, text = k.wait(msg_id, timeout=300)
                assert status == "ok", text
                assert "stale" not in text, text
        ids = [k.value("__import__('soba_notebook').current_store().id") for k in kernels]
    finally:
        for k in kernels:
            k.close()
    assert len(set(ids)) == 2 and earlier.id not in ids, ids
    assert earlier.file.read_bytes() == earlier_bytes, "no kernel joined the newest session"
    assert {s.id for s in list_sessions(sessions)} == {earlier.id, *ids}
    for session_id, name in zip(ids, names, strict=True):
        store = SessionStore.open(sessions / f"{session_id}.jsonl")
        assert pair_problems(_model_input(store)) == []
        assert _user_texts(store) == [f"kernel {name} {n}" for n in range(20)], "no other kernel's turn in it"
