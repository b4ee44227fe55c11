"""Session ownership across real kernels: each kernel writes its own session unless it resumes one,
a session another live kernel writes is never joined silently, and switching sessions while a
turn runs cancels that turn cleanly first (issues 20.1, 21.2, 21.4)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from agent_support import is_summary_request
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from kernel_support import Kernel, fake_server_project

from soba_notebook.session import SessionStore, build_context, list_sessions
from soba_notebook.session.context import pair_problems
from soba_notebook.session.entries import user_message


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


# -- a model that runs a slow shell command on request ------------------------------------------------
#: The slow command: says it started, then runs until the test creates ``release``.
WAIT_FOR_RELEASE = "touch started; while [ ! -e release ]; do sleep 0.05; done; echo released"
#: A command whose child (a ``sleep``) would outlive an abandoned turn; its pid lands in ``sleeper.pid``.
SLEEPER = "sleep 300 & echo $! > sleeper.pid; wait"


def _slow_model(fake_server: FakeServer, command: str) -> None:
    """Prompts with "slow" get one shell call of ``command``; a tool result or any other prompt a
    plain reply (long enough to leave history to compact); summary requests a non-JSON reply (a
    degraded local capsule: a capsule all the same)."""
    calls = iter(range(1, 1_000))

    def handler(path: str, body: dict) -> dict:
        if is_summary_request(body):
            return {"text": "no capsule from this model", "usage": False}
        last = body["messages"][-1]
        if last["role"] == "user" and "slow" in str(last.get("content")):
            return {"tool_calls": [{"id": f"slow{next(calls)}", "name": "shell", "arguments": {"command": command}}],
                    "usage": False}
        return {"text": "noted. " + "words to keep " * 60, "usage": False}

    fake_server.handler = handler


def _kernel(project: Path, tmp_path: Path) -> Kernel:
    return Kernel(project, tmp_path / "home", env={"SOBA_TEST_KEY": "k" * 16})


def _results_by_call(store: SessionStore) -> dict[str, list]:
    out: dict[str, list] = {}
    for e in store.entries():
        if e.role == "tool":
            out.setdefault(e.tool_call_id or "", []).append(e)
    return out


def _wait_for(path: Path) -> None:
    """Until ``path`` exists and holds something (a shell writes it after creating it)."""
    deadline = time.monotonic() + 60
    while not (path.exists() and (path.name == "started" or path.read_text().strip())):
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)


def test_compact_in_the_kernel_whose_tool_call_runs_waits_for_its_result_and_never_splits_the_pair(
        tmp_path: Path, fake_server: FakeServer) -> None:
    project = fake_server_project(tmp_path, fake_server.openai_base_url, keepRecentTokens=100)
    _slow_model(fake_server, WAIT_FOR_RELEASE)
    k = _kernel(project, tmp_path)
    try:
        for prompt in ("%soba note one", "%soba note two", "%soba note three"):
            assert k.run(prompt)[0] == "ok"
        assert k.run("%%soba --background\nrun the slow command")[0] == "ok"
        _wait_for(project / "started")
        compact = k.submit("%compact")
        k.wait_for_text(compact, "queued: 1 job(s) ahead of this %compact")
        (project / "release").touch()
        status, text = k.wait(compact)
        assert status == "ok", text
        session_id = k.value("__import__('soba_notebook').current_store().id")
    finally:
        (project / "release").touch()  # the command ends whatever happened
        k.close()
    store = SessionStore.open(project / ".soba" / "sessions" / f"{session_id}.jsonl")
    (capsule,) = [e for e in store.entries() if e.type == "capsule"]
    results = _results_by_call(store)
    (slow,) = [cid for cid in results if cid.startswith("slow")]
    (result,) = results[slow]
    assert "released" in result.text and not result.message.get("cancelled")
    assert result.line < capsule.line, "the compaction ran after the call's result, not between them"
    assert pair_problems(list(build_context(store.path()).messages)) == []
    assert pair_problems(_model_input(store)) == []


def test_a_session_another_kernel_writes_is_refused_naming_it_and_taking_it_over_mid_call_keeps_every_pair(
        tmp_path: Path, fake_server: FakeServer) -> None:
    project = fake_server_project(tmp_path, fake_server.openai_base_url, keepRecentTokens=100)
    _slow_model(fake_server, WAIT_FOR_RELEASE)
    one, two = _kernel(project, tmp_path), _kernel(project, tmp_path)
    try:
        for prompt in ("%soba note one", "%soba note two"):
            assert one.run(prompt)[0] == "ok"
        session_id = one.value("__import__('soba_notebook').current_store().id")
        pid_one = one.value("__import__('os').getpid()")
        kernel_one = one.value("__import__('ipykernel.connect').connect.get_connection_file()")
        assert one.run("%%soba --background\nrun the slow command")[0] == "ok"
        _wait_for(project / "started")

        status, text = two.run(f"%soba resume {session_id}")
        assert status == "error"
        assert f"pid {pid_one}" in text and Path(kernel_one).stem.removeprefix("kernel-") in text
        assert f"%soba resume {session_id} --take-over" in text and "Traceback" not in text
        assert two.value("__import__('soba_notebook').current_store().id") != session_id, "not joined"

        status, text = two.run(f"%soba resume {session_id} --take-over")
        assert status == "ok" and f"taken over from pid {pid_one}" in text, text
        assert two.run("%soba a user message after the other kernel's call")[0] == "ok"
        status, text = two.run("%compact")
        assert status == "ok", text
        (project / "release").touch()  # the first kernel's tool ends now: its result may not land
        status, text = one.run("%soba and go on")
        assert status == "error" and f"session {session_id} was taken over" in text, text
        assert "Traceback" not in text
    finally:
        (project / "release").touch()
        one.close()
        two.close()
    store = SessionStore.open(project / ".soba" / "sessions" / f"{session_id}.jsonl")
    assert [e for e in store.entries() if e.type == "capsule"], "the compaction in the second kernel completed"
    results = _results_by_call(store)
    (slow,) = [cid for cid in results if cid.startswith("slow")]
    (result,) = results[slow]  # one result: the take-over's, never the late one of the first kernel
    assert result.message.get("cancelled") and "taken over" in result.text
    assert all(len(r) == 1 for r in results.values())
    assert pair_problems(list(build_context(store.path()).messages)) == []
    assert pair_problems(_model_input(store)) == []
    assert "and go on" not in _user_texts(store)


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status  # a zombie has ended; only its exit status is left


@pytest.mark.parametrize("switch", ["%soba --new hello", "%soba resume {earlier}"])
def test_switching_sessions_during_a_background_turn_cancels_it_records_cancelled_and_leaves_no_child(
        tmp_path: Path, fake_server: FakeServer, switch: str) -> None:
    project = fake_server_project(tmp_path, fake_server.openai_base_url, keepRecentTokens=100)
    _slow_model(fake_server, SLEEPER)
    k = _kernel(project, tmp_path)
    try:
        assert k.run("%soba note one")[0] == "ok"
        earlier = k.value("__import__('soba_notebook').current_store().id")
        assert k.run("%soba --new note two")[0] == "ok"
        busy = k.value("__import__('soba_notebook').current_store().id")
        assert k.run("%%soba --background\nrun the slow command")[0] == "ok"
        _wait_for(project / "sleeper.pid")
        sleeper = int((project / "sleeper.pid").read_text())
        assert _alive(sleeper)
        status, text = k.run(switch.format(earlier=earlier))
        assert status == "ok", text
        assert f"cancelled the running turn “run the slow command” on session {busy} before switching" in text
        now = k.value("__import__('soba_notebook').current_store().id")
    finally:
        k.close()
        stray = int((project / "sleeper.pid").read_text()) if (project / "sleeper.pid").exists() else None
        outlived = stray is not None and _alive(stray)
        if outlived:  # ours: end it (the assertion below says it outlived the turn)
            os.kill(stray, signal.SIGKILL)
    assert now != busy
    assert not outlived, "the command's child was stopped with it"
    store = SessionStore.open(project / ".soba" / "sessions" / f"{busy}.jsonl")
    (slow,) = [cid for cid in _results_by_call(store) if cid.startswith("slow")]
    (result,) = _results_by_call(store)[slow]
    assert result.message.get("cancelled")
    assert pair_problems(_model_input(store)) == []
