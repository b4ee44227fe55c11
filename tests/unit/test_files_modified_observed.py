"""Files modified are observed, not guessed: python-tool writes, scripts the shell runs, ``cp`` restores."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from agent_support import make_agent
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401

from soba_notebook.agent.file_changes import diff, snapshot
from soba_notebook.compaction.extract import extract_facts
from soba_notebook.compaction.file_changes import FileChanges
from soba_notebook.session.entries import Entry, ToolCall, assistant_message, tool_result


def _calls(*calls: tuple[str, str, dict]) -> list[dict]:
    return [{"id": cid, "name": name, "arguments": args} for cid, name, args in calls]


def test_python_tool_write_script_run_by_shell_and_cp_restore_all_reach_the_next_capsules_files_modified(
        tmp_path: Path, fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url, compaction={"keepRecentTokens": 10})
    ws = agent.workspace
    monkeypatch.chdir(ws)  # a kernel runs in its project directory: relative paths in Python land there
    (ws / "data.csv").write_text("x\n1\n")
    (ws / "target.py").write_text("VALUE = 1\n")
    (ws / "backup.cfg").write_text("restored = true\n")
    (ws / "settings.cfg").write_text("broken = true\n")
    (ws / "fix.py").write_text("from pathlib import Path\nPath('target.py').write_text('VALUE = 2\\n')\n")
    q = fake_server.openai
    q.enqueue(tool_calls=_calls(("p1", "python", {"code": "open('report.txt', 'w').write('rows: 1')"})))
    q.enqueue(tool_calls=_calls(("s1", "shell", {"command": "python3 fix.py"})))
    q.enqueue(tool_calls=_calls(("s2", "shell", {"command": "cp backup.cfg settings.cfg"})))
    # a long closing reply: the capsule then replaces more than it costs (a compact that would grow
    # the context appends nothing)
    q.enqueue(text="done. " + "The report, the fix and the restored settings are in place. " * 150)
    assert asyncio.run(agent.run_turn("write a report, apply the fix, restore the settings")).outcome == "completed"
    results = {e.tool_call_id: e.message for e in agent.store.path() if e.role == "tool"}
    assert results["p1"]["filesChanged"]["created"] == ["report.txt"]
    assert results["s1"]["filesChanged"]["modified"] == ["target.py"]
    assert results["s1"]["exitCode"] == 0
    assert results["s2"]["filesChanged"]["modified"] == ["settings.cfg"]
    q.enqueue(text="You are welcome.")
    assert asyncio.run(agent.run_turn("thanks")).outcome == "completed"  # the first turn leaves the kept tail
    q.enqueue(text="the summary")  # (the summarizer's answer is not JSON: the facts still merge in)
    outcome = asyncio.run(agent.compact())
    assert outcome.outcome == "completed"
    state = outcome.entry.data["state"]
    assert {"report.txt", "target.py", "settings.cfg"} <= set(state["filesModified"])
    assert "data.csv" not in state["filesModified"]


def _session(changes: dict | None, command: str) -> list[Entry]:
    return [assistant_message("", [ToolCall("c1", "shell", {"command": command})]),
            tool_result("c1", "shell", "[exit code 0]", exit_code=0, files_changed=changes)]


def test_observed_changes_replace_shell_parsing_and_parsing_stays_the_fallback() -> None:
    observed = FileChanges(created=("out/new.txt",), modified=("src/app.py",)).to_json()
    facts = extract_facts(_session(observed, "python3 tools/rewrite.py > log.txt"))
    assert facts.files_modified == ("out/new.txt", "src/app.py")  # log.txt was not changed in the workspace
    fallback = extract_facts(_session(None, "sed -i 's/a/b/' src/app.py"))
    assert fallback.files_modified == ("src/app.py",)
    bounded = FileChanges(modified=("a.py",), truncated="more than 10 files").to_json()
    assert set(extract_facts(_session(bounded, "sed -i 's/a/b/' b.py")).files_modified) == {"a.py", "b.py"}


def test_snapshot_diff_sees_created_modified_deleted_and_skips_tooling_directories(tmp_path: Path) -> None:
    (tmp_path / "keep.py").write_text("a")
    (tmp_path / "gone.py").write_text("b")
    (tmp_path / "same_size.txt").write_text("1234")
    for skipped in (".git", ".soba", "node_modules", "__pycache__", "env"):
        (tmp_path / skipped).mkdir()
    (tmp_path / "env" / "pyvenv.cfg").write_text("home = /usr")
    before = snapshot(tmp_path)
    (tmp_path / "gone.py").unlink()
    (tmp_path / "new.py").write_text("c")
    (tmp_path / "same_size.txt").write_text("5678")  # same size: the mtime/ctime tell
    os.utime(tmp_path / "same_size.txt", ns=(1, 1))
    for skipped in (".git", ".soba", "node_modules", "__pycache__", "env"):
        (tmp_path / skipped / "noise.txt").write_text("x")
    changes = diff(before, snapshot(tmp_path))
    assert changes == FileChanges(created=("new.py",), modified=("same_size.txt",), deleted=("gone.py",))


def test_a_snapshot_bound_is_said_in_the_entry(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"f{i}.txt").write_text(str(i))
    before = snapshot(tmp_path, max_files=3)
    changes = diff(before, snapshot(tmp_path, max_files=3))
    assert not changes.complete and "more than 3 files" in (changes.truncated or "")
    assert changes.created == () and changes.deleted == ()  # files beyond the bound are not invented changes
    ticks = iter(range(100))
    slow = snapshot(tmp_path, max_seconds=0.5, clock=lambda: float(next(ticks)))
    assert slow.truncated is not None and "stopped after" in slow.truncated
