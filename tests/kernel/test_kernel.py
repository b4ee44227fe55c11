"""A real kernel: the quickstart notebook end to end, and a kernel interrupt during a turn."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import nbformat
from agent_support import file_writer, is_summary_request
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from jupyter_client import KernelManager
from kernel_support import run_cell, trust_project_config
from nbclient import NotebookClient

from soba_notebook.session import SessionStore, list_sessions
from soba_notebook.session.context import pair_problems

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "notebooks" / "quickstart.ipynb"


def _widget_states(nb: nbformat.NotebookNode) -> list[dict]:
    saved = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    return [m["state"]["state"] for m in saved.get("state", {}).values() if "state" in m.get("state", {})]


def test_quickstart_runs_end_to_end_and_its_saved_widget_shows_a_completed_compaction(tmp_path: Path) -> None:
    nb = nbformat.read(QUICKSTART, as_version=4)
    env_home = tmp_path / "home"
    env_home.mkdir()
    client = NotebookClient(nb, timeout=300, kernel_name="python3", store_widget_state=True, iopub_timeout=300,
                            raise_on_iopub_timeout=True, resources={"metadata": {"path": str(tmp_path)}})
    old_home = os.environ.get("HOME")
    os.environ["HOME"] = str(env_home)  # no user config leaks into the run
    try:
        client.execute()
    finally:
        if old_home is not None:
            os.environ["HOME"] = old_home
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert errors == []
    states = _widget_states(nb)
    assert states, "the budget widget's state was saved with the notebook"
    last = states[0]["last_compaction"]
    assert last["outcome"] == "completed" and last["reclaimed_tokens"] > 0 and last["checkpoint_id"].startswith("ck_")
    assert states[0]["effective"] <= states[0]["hard_limit"]
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                      if o.output_type == "stream")
    notes = [o["data"]["text/html"] for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
             if o.output_type == "display_data" and "soba-note" in o.get("data", {}).get("text/html", "")]
    assert notes and "offline demo script" in notes[0], "the offline notice is a styled note"
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                if o.output_type == "stream" and o.name == "stderr" and "offline" in o.text], "not on stderr"
    assert "exported ck_" in outputs
    # the "Compact on demand" cell shows what it describes: a real compaction, on every run
    (compact,) = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("%compact")]
    compact_text = "".join(o.get("data", {}).get("text/plain", "") + o.get("text", "") for o in compact.outputs)
    assert re.search(r"✓ user · [\d,]+ → [\d,]+ tokens · reclaimed \d+\.\d%", compact_text), compact_text
    assert any("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code"
               for o in c.get("outputs", [])), "the budget plot is a real image"


def _execute(kc, code: str, timeout: float = 60) -> tuple[str, list[dict]]:
    reply, messages = run_cell(kc, code, timeout)
    return reply["status"], [m["content"] for m in messages
                             if m["msg_type"] in ("stream", "error", "display_data", "execute_result")]


def test_kernel_interrupt_during_a_compaction_cancels_the_turn_and_appends_no_capsule(
        tmp_path: Path, fake_server: FakeServer) -> None:
    project = tmp_path / "project"
    (project / ".soba").mkdir(parents=True)
    (project / ".soba" / "config.json").write_text(json.dumps({
        "model": {"provider": "openai", "model": "gpt-4o-mini", "baseUrl": fake_server.openai_base_url,
                  "apiKeyEnv": "SOBA_TEST_KEY", "contextWindow": 16000, "maxOutputTokens": 1000},
        "compaction": {"safetyReserveTokens": 1000, "keepRecentTokens": 2000, "minTokensForAutoCompact": 4000,
                       "minReclaimableTokens": 500, "timeoutMs": 60000},
        "tools": {"approval": "never"}}))
    # the summary comes so slowly that the interrupt lands first (headers_delay: a stream carrying
    # no usage makes the provider ask without streaming, and a plain reply is slow only before its headers)
    slow_summary = {"text": ["{", '"goal": ', '"g"', "}"], "headers_delay": 2.0, "usage": False}
    fake_server.handler = file_writer(6, "data " * 700, slow_summary, "done")
    trust_project_config(project, tmp_path / "home")
    km = KernelManager(kernel_name="python3")
    env = {**os.environ, "SOBA_TEST_KEY": "k" * 16, "HOME": str(tmp_path / "home"),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    km.start_kernel(cwd=str(project), env=env)
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        status, _ = _execute(kc, "%load_ext soba_notebook")
        assert status == "ok"
        status, outputs = _execute(kc, "%soba write six files", timeout=120)
        assert status == "ok", outputs
        msg_id = kc.execute("%soba and now summarize what you did")
        deadline = time.monotonic() + 60
        while not any(is_summary_request(r.body) for r in fake_server.requests):
            assert time.monotonic() < deadline, "the barrier never started a summary"
            time.sleep(0.05)
        km.interrupt_kernel()
        shown = []  # what the cell shows, as each bundle's text/html and text/plain
        while True:
            msg = kc.get_iopub_msg(timeout=60)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            # update_display_data too: the cell's live line is replaced in place by what follows it
            if msg["msg_type"] in ("display_data", "update_display_data", "execute_result"):
                shown.append(msg["content"]["data"])
            if msg["msg_type"] == "error":
                shown.append({"text/plain": "\n".join(msg["content"]["traceback"])})
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
        said = [d for d in shown if "Turn cancelled" in d.get("text/plain", "")]
        assert said, f"the cell says the turn was cancelled: {shown}"
        assert "no capsule was appended" in said[0]["text/plain"]
        assert "soba-note" in said[0]["text/html"] and "Turn cancelled" in said[0]["text/html"]
        assert "no capsule was appended" in said[0]["text/html"]
        summary = [d for d in shown if "soba-summary" in d.get("text/html", "")]
        assert summary and "After this cancelled turn" in summary[-1]["text/plain"]
        assert not any("Traceback" in d.get("text/plain", "") for d in shown)
        requests_after_interrupt = len(fake_server.requests)
        time.sleep(2.5)  # the slow summary would have finished by now
        assert len(fake_server.requests) == requests_after_interrupt, "nothing was sent after the cancel"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    (info,) = list_sessions(project / ".soba" / "sessions")
    store = SessionStore.open(info.path)
    assert [e for e in store.entries() if e.type == "capsule"] == [], "no late capsule after the interrupt"
    assert pair_problems([e for e in store.path() if e.is_model_input]) == []
    assert [e.text for e in store.path() if e.role == "user"][-1] == "and now summarize what you did"


def test_extension_loads_from_ipython_config(tmp_path: Path) -> None:
    import subprocess

    profile = tmp_path / "ipython"
    (profile / "profile_default").mkdir(parents=True)
    (profile / "profile_default" / "ipython_config.py").write_text(
        "c.InteractiveShellApp.extensions = ['soba_notebook']\n")
    code = "print(sorted(k for k in get_ipython().magics_manager.magics['line'] if k in ('soba','compact','budget')))"
    out = subprocess.run([sys.executable, "-m", "IPython", "--no-banner", "--colors=NoColor", "-c", code],
                         env={**os.environ, "IPYTHONDIR": str(profile), "HOME": str(tmp_path)},
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert "['budget', 'compact', 'soba']" in out.stdout, out.stderr


def test_capsule_exported_by_one_session_starts_the_first_request_in_a_fresh_kernel_elsewhere(
        tmp_path: Path, fake_server: FakeServer) -> None:
    import asyncio

    from soba_notebook.agent import open_agent
    from soba_notebook.memory import handoff

    # Session one: the offline scripted model does a task; an explicit compact makes a checkpoint.
    first = tmp_path / "first"
    (first / ".soba").mkdir(parents=True)
    (first / ".soba" / "config.json").write_text(json.dumps({"compaction": {"keepRecentTokens": 500}}))
    handle = open_agent(first, overrides={"tools": {"approval": "never"}})  # no one answers here
    assert asyncio.run(handle.agent.run_turn("Create a tiny calculator package and make its tests pass.")
                       ).outcome == "completed"
    outcome = asyncio.run(handle.agent.compact())
    assert outcome.outcome == "completed"
    exported = handoff.export_checkpoint(handle.store, first, outcome.checkpoint_id, tmp_path / "calc.capsule.md")

    # A fresh kernel in another directory, on another provider, loads it.
    second = tmp_path / "second"
    (second / ".soba").mkdir(parents=True)
    (second / ".soba" / "config.json").write_text(json.dumps({"model": {
        "provider": "openai", "model": "gpt-4o-mini", "baseUrl": fake_server.openai_base_url,
        "apiKeyEnv": "SOBA_TEST_KEY"}}))
    fake_server.openai.enqueue(text="continuing from the capsule")
    trust_project_config(second, tmp_path / "home")
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(second), env={**os.environ, "SOBA_TEST_KEY": "k" * 16, "HOME": str(tmp_path / "home"),
                                          "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])})
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        for code in ("%load_ext soba_notebook", f"%capsule load {exported}", "%soba carry on with the calculator"):
            status, outputs = _execute(kc, code, timeout=120)
            assert status == "ok", outputs
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    (request,) = fake_server.requests
    messages = [m for m in request.body["messages"] if m["role"] != "system"]
    assert messages[0]["role"] == "user" and messages[0]["content"].startswith("<context_capsule")
    assert "calc" in messages[0]["content"], "the capsule's content reached the model"
    assert messages[-1]["content"] == "carry on with the calculator"


def test_saved_widget_state_is_final_in_five_concurrent_headless_quickstart_runs(tmp_path: Path) -> None:
    """The widget is flushed before each cell ends, so a saved notebook never holds an older state,
    even with five kernels competing for the CPU (it was stale in 2 of 7 runs under load)."""
    import subprocess

    env = dict(os.environ, HOME=str(tmp_path / "home"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    (tmp_path / "home").mkdir()
    runs = [tmp_path / f"run{i}" for i in range(5)]
    procs = [subprocess.Popen([sys.executable, str(REPO / "scripts" / "run_notebook.py"), str(QUICKSTART),
                               str(run / "quickstart.executed.ipynb")], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT) for run in runs]
    logs = [p.communicate(timeout=900)[0].decode(errors="replace") for p in procs]
    failed = {i: log[-4000:] for i, (p, log) in enumerate(zip(procs, logs, strict=True)) if p.returncode != 0}
    # the tail of each failing run's log: where nbclient says what went wrong
    assert not failed, "\n\n".join(f"run {i} exited {procs[i].returncode}; its log ends:\n{tail}"
                                     for i, tail in failed.items())
    for run in runs:
        nb = nbformat.read(run / "quickstart.executed.ipynb", as_version=4)
        (session_file,) = (run / "soba-quickstart").glob("*/.soba/sessions/*.jsonl")
        store = SessionStore.open(session_file)
        capsules = [e for e in store.path() if e.type == "capsule"]
        completed = [e for e in store.entries() if e.type == "capsule"]
        (state,) = _widget_states(nb)
        assert state["turn_active"] is False and state["phase"] != "compacting"
        assert state["last_compaction"]["checkpoint_id"] == capsules[-1].data["checkpointId"], run
        assert len(state["compactions"]) == min(6, len(completed))
        assert state["effective"] <= state["hard_limit"]
