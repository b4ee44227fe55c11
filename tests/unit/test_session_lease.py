"""A session's writer lease: one writer at a time, refusals that name the holder, take-overs that
stop the displaced writer before its next append, and dead holders that free the session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from soba_notebook.agent import open_agent
from soba_notebook.errors import SessionHeldError, SessionTakenOverError
from soba_notebook.session import SessionStore, user_message
from soba_notebook.session.context import pair_problems

REPO = Path(__file__).resolve().parents[2]

#: A second process that takes the lease, optionally leaves a tool call unanswered, says so, and waits.
HOLDER = """
import sys
from soba_notebook.session import SessionStore, ToolCall, assistant_message, user_message
store = SessionStore.open(sys.argv[1])
store.claim(meta={"kernel": "k-123", "notebook": "work.ipynb"})
if sys.argv[2] == "call":
    store.append(user_message("run it"))
    store.append(assistant_message("", (ToolCall("c1", "shell", {"command": "sleep 99"}),)))
print("held", flush=True)
sys.stdin.read()
"""


def _holder(session: Path, mode: str = "") -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(session), mode or "-"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
                                str(REPO), os.environ.get("PYTHONPATH")]))})
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def _session(project: Path) -> SessionStore:
    store = SessionStore.create(project / ".soba" / "sessions", cwd=str(project))
    store.append(user_message("earlier work"))
    return store


def test_a_session_another_live_process_writes_is_refused_naming_its_pid_kernel_and_notebook(tmp_path: Path) -> None:
    store = _session(tmp_path)
    holder = _holder(store.file)
    try:
        before = store.file.read_bytes()
        with pytest.raises(SessionHeldError) as refused:
            open_agent(tmp_path, session=store.id)
        message = str(refused.value)
        assert f"pid {holder.pid}" in message and "kernel k-123" in message and "notebook work.ipynb" in message
        assert f"%soba resume {store.id} --take-over" in message
        assert store.file.read_bytes() == before, "a refused open writes nothing"
    finally:
        holder.kill()
        holder.wait()


def test_a_holder_that_died_frees_the_session_and_its_unanswered_call_gets_a_cancelled_result(
        tmp_path: Path) -> None:
    store = _session(tmp_path)
    holder = _holder(store.file, "call")
    os.kill(holder.pid, signal.SIGKILL)  # a crashed kernel: it never released anything
    holder.wait()
    handle = open_agent(tmp_path, session=store.id)
    try:
        path = handle.store.path()
        assert path[-1].role == "tool" and path[-1].tool_call_id == "c1" and path[-1].message.get("cancelled")
        assert f"pid {holder.pid}" in path[-1].text and "ended first" in path[-1].text
        assert pair_problems([e for e in path if e.is_model_input]) == []
    finally:
        handle.close()


def test_a_session_released_cleanly_is_resumed_without_a_take_over_and_without_new_entries(tmp_path: Path) -> None:
    store = _session(tmp_path)
    store.claim()
    store.release()
    again = SessionStore.open(store.file)
    lease = again.claim()
    assert lease.previous is None and lease.ended is None
    assert len(again) == 1


def test_a_take_over_refuses_the_displaced_writers_next_append_and_it_can_take_the_session_back(
        tmp_path: Path) -> None:
    first = _session(tmp_path)
    first.claim()
    second = SessionStore.open(first.file)
    with pytest.raises(SessionHeldError, match=f"pid {os.getpid()}"):
        second.claim()
    lease = second.claim(take_over=True)
    assert lease.previous is not None and lease.previous.pid == os.getpid()
    with pytest.raises(SessionTakenOverError, match=f"session {first.id} was taken over by pid {os.getpid()}"):
        first.append(user_message("late"))
    second.append(user_message("mine now"))
    with pytest.raises(SessionHeldError):
        first.claim()  # taking it back is a take-over too
    first.claim(take_over=True)
    first.append(user_message("back"))
    with pytest.raises(SessionTakenOverError):
        second.append(user_message("too late"))
    texts = [e.text for e in SessionStore.open(first.file).entries()]
    assert texts == ["earlier work", "mine now", "back"]


def test_a_writer_appending_while_the_session_is_taken_over_lands_nothing_after_the_take_over(tmp_path: Path) -> None:
    first = _session(tmp_path)
    first.claim()
    appended: list[int] = []
    refused: list[BaseException] = []
    started = threading.Event()

    def write() -> None:
        try:
            for n in range(100_000):
                first.append(user_message(f"a{n}"))
                appended.append(n)
                if n == 50:
                    started.set()
        except SessionTakenOverError as exc:
            refused.append(exc)
        finally:
            started.set()

    thread = threading.Thread(target=write)
    thread.start()
    started.wait()
    second = SessionStore.open(first.file)
    second.claim(take_over=True)
    second.append(user_message("taken"))
    thread.join()
    assert refused, "the displaced writer was stopped"
    texts = [e.text for e in SessionStore.open(first.file).entries()]
    after = texts[texts.index("taken") + 1:]
    assert after == [], f"appended after the take-over: {after[:3]}"
    assert texts.count("taken") == 1 and len(texts) == 1 + len(appended) + 1
