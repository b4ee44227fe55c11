"""The agent's tools: confinement, file edits, shell and python execution, bounded output, refusals.

Real files in ``tmp_path``, real ``bash`` subprocesses, real threads. Waits have generous upper
bounds only; nothing asserts on how long something took.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from soba_notebook.agent.tools import ToolContext, ToolOutcome, ToolRegistry, default_tools
from soba_notebook.agent.workspace import resolve_in_workspace
from soba_notebook.cancel import CancelToken
from soba_notebook.config import ToolsConfig
from soba_notebook.errors import WorkspaceError
from soba_notebook.providers.base import ToolSpec
from soba_notebook.session.entries import ToolCall, assistant_message, tool_result, user_message
from soba_notebook.session.store import SessionStore

UPPER_BOUND_SEC = 60  # only ever a cap on a wait, never an expectation


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def run(name: str, args: Mapping[str, Any], ctx: ToolContext, registry: ToolRegistry | None = None) -> ToolOutcome:
    registry = registry or default_tools(ctx.config)
    return asyncio.run(asyncio.wait_for(registry.run(name, args, ctx), UPPER_BOUND_SEC))


def process_is_gone(pid: int) -> bool:
    """True once ``pid`` no longer runs (it may linger as a zombie until its new parent reaps it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def wait_until(predicate: Any, limit: float = UPPER_BOUND_SEC) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


# -- confinement -------------------------------------------------------------------------------

def test_read_outside_workspace_with_dotdot_is_refused(ws: Path) -> None:
    (ws.parent / "secret").write_text("top secret")
    out = run("read_file", {"path": "../secret"}, ToolContext(ws))
    assert out.is_error
    assert out.content == f"refused: ../secret is outside the workspace {ws}"
    assert "top secret" not in out.content


def test_absolute_path_outside_workspace_is_refused_and_inside_is_allowed(ws: Path) -> None:
    (ws.parent / "other.txt").write_text("outside")
    (ws / "inside.txt").write_text("inside\n")
    refused = run("read_file", {"path": str(ws.parent / "other.txt")}, ToolContext(ws))
    assert refused.is_error and "is outside the workspace" in refused.content
    allowed = run("read_file", {"path": str(ws / "inside.txt")}, ToolContext(ws))
    assert not allowed.is_error and "inside" in allowed.content


def test_dotdot_that_stays_inside_the_workspace_is_allowed(ws: Path) -> None:
    (ws / "a").mkdir()
    (ws / "b.txt").write_text("bee\n")
    out = run("read_file", {"path": "a/../b.txt"}, ToolContext(ws))
    assert not out.is_error and "bee" in out.content


def test_symlink_escape_is_refused(ws: Path) -> None:
    outside = ws.parent / "outside"
    outside.mkdir()
    (outside / "passwords.txt").write_text("hunter2")
    (ws / "link.txt").symlink_to(outside / "passwords.txt")
    (ws / "linkdir").symlink_to(outside, target_is_directory=True)
    ctx = ToolContext(ws)

    read = run("read_file", {"path": "link.txt"}, ctx)
    assert read.is_error and "hunter2" not in read.content
    assert "link.txt is outside the workspace" in read.content and str(ws) in read.content
    assert "symbolic link" in read.content

    write = run("write_file", {"path": "linkdir/new.txt", "content": "x"}, ctx)
    assert write.is_error and "outside the workspace" in write.content
    assert not (outside / "new.txt").exists()

    edit = run("edit_file", {"path": "link.txt", "old": "hunter2", "new": "pwned"}, ctx)
    assert edit.is_error and (outside / "passwords.txt").read_text() == "hunter2"


def test_grep_does_not_read_through_links_that_leave_the_workspace(ws: Path) -> None:
    outside = ws.parent / "outside.txt"
    outside.write_text("needle outside\n")
    (ws / "link.txt").symlink_to(outside)
    (ws / "own.txt").write_text("needle inside\n")
    out = run("grep", {"pattern": "needle"}, ToolContext(ws))
    assert out.content == "own.txt:1: needle inside"


def test_resolve_in_workspace_raises_workspace_error_naming_path_and_root(ws: Path) -> None:
    assert resolve_in_workspace(ws, "src/x.py") == ws / "src" / "x.py"
    assert resolve_in_workspace(ws, ".") == ws
    with pytest.raises(WorkspaceError, match=r"refused: \.\./\.\./etc is outside the workspace "):
        resolve_in_workspace(ws, "../../etc")


# -- reading, writing, editing -----------------------------------------------------------------

def test_read_file_numbers_lines_and_reads_a_range(ws: Path) -> None:
    (ws / "f.txt").write_text("alpha\nbeta\ngamma\ndelta\n")
    whole = run("read_file", {"path": "f.txt"}, ToolContext(ws))
    assert whole.content.splitlines() == ["     1\talpha", "     2\tbeta", "     3\tgamma", "     4\tdelta"]
    part = run("read_file", {"path": "f.txt", "start_line": 2, "end_line": 3}, ToolContext(ws))
    assert part.content.splitlines() == ["     2\tbeta", "     3\tgamma", "[lines 2-3 of 4 in f.txt]"]


def test_read_missing_directory_and_binary_files_give_clear_errors(ws: Path) -> None:
    (ws / "src").mkdir()
    (ws / "blob.bin").write_bytes(b"\x89PNG\x00\x00\x01")
    ctx = ToolContext(ws)
    missing = run("read_file", {"path": "src/nope.py"}, ctx)
    assert missing.is_error and missing.content == "no such file: src/nope.py"
    directory = run("read_file", {"path": "src"}, ctx)
    assert directory.is_error and "src is a directory" in directory.content and "list_files" in directory.content
    binary = run("read_file", {"path": "blob.bin"}, ctx)
    assert binary.is_error and "blob.bin looks like a binary file" in binary.content


def test_write_creates_parent_dirs_and_reports_bytes_and_lines(ws: Path) -> None:
    out = run("write_file", {"path": "deep/er/x.py", "content": "a = 1\nb = 2\n"}, ToolContext(ws))
    assert not out.is_error
    assert (ws / "deep/er/x.py").read_text() == "a = 1\nb = 2\n"
    assert out.content == "created deep/er/x.py: wrote 12 bytes (2 lines)"
    assert out.data["path"] == "deep/er/x.py"


def test_edit_replaces_a_unique_match_and_keeps_the_rest(ws: Path) -> None:
    (ws / "x.py").write_text("def f():\n    return 1\n\ndef g():\n    return 2\n")
    out = run("edit_file", {"path": "x.py", "old": "    return 2\n", "new": "    return 3\n"}, ToolContext(ws))
    assert not out.is_error, out.content
    assert (ws / "x.py").read_text() == "def f():\n    return 1\n\ndef g():\n    return 3\n"
    assert "x.py" in out.content and "line 5" in out.content


def test_edit_with_missing_text_names_the_file(ws: Path) -> None:
    (ws / "src").mkdir()
    (ws / "src/x.py").write_text("print('hi')\n")
    out = run("edit_file", {"path": "src/x.py", "old": "print('bye')", "new": "pass"}, ToolContext(ws))
    assert out.is_error
    assert out.content.startswith("no match for the given text in src/x.py")
    assert (ws / "src/x.py").read_text() == "print('hi')\n"


def test_edit_with_ambiguous_match_names_the_count(ws: Path) -> None:
    (ws / "x.py").write_text("x = 1\nx = 1\nx = 1\n")
    out = run("edit_file", {"path": "x.py", "old": "x = 1", "new": "x = 2"}, ToolContext(ws))
    assert out.is_error
    assert "matches 3 places" in out.content
    assert "add surrounding lines to make it unique or pass replace_all" in out.content
    assert (ws / "x.py").read_text() == "x = 1\nx = 1\nx = 1\n"


def test_edit_with_replace_all_replaces_every_match(ws: Path) -> None:
    (ws / "x.py").write_text("x = 1\ny\nx = 1\n")
    out = run("edit_file", {"path": "x.py", "old": "x = 1", "new": "x = 2", "replace_all": True}, ToolContext(ws))
    assert not out.is_error and "2 occurrences" in out.content
    assert (ws / "x.py").read_text() == "x = 2\ny\nx = 2\n"


def test_writes_to_soba_state_including_the_session_history_are_refused(ws: Path) -> None:
    sessions = ws / ".soba" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "s.jsonl").write_text('{"type":"session"}\n')
    ctx = ToolContext(ws)
    write = run("write_file", {"path": ".soba/sessions/s.jsonl", "content": ""}, ctx)
    edit = run("edit_file", {"path": ".soba/sessions/s.jsonl", "old": "session", "new": "x"}, ctx)
    assert write.is_error and edit.is_error and "soba's own state" in write.content
    assert (sessions / "s.jsonl").read_text() == '{"type":"session"}\n'


# -- listing and searching ---------------------------------------------------------------------

def test_list_files_shows_directories_first_then_files_with_sizes(ws: Path) -> None:
    (ws / "src").mkdir()
    (ws / "b.txt").write_text("12345")
    (ws / "src" / "m.py").write_text("")
    top = run("list_files", {}, ToolContext(ws))
    assert top.content.splitlines() == ["src/", "b.txt  (5 bytes)"]
    sub = run("list_files", {"path": "src"}, ToolContext(ws))
    assert sub.content == "src/m.py  (0 bytes)"


def test_glob_matches_across_directories_and_skips_noise_dirs(ws: Path) -> None:
    for rel in ("a.py", "src/b.py", "src/deep/c.py", "src/d.txt", ".venv/lib/e.py", "web/x.ts", "web/y.tsx"):
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text("")
    ctx = ToolContext(ws)
    assert run("glob", {"pattern": "**/*.py"}, ctx).content.splitlines() == ["a.py", "src/b.py", "src/deep/c.py"]
    assert run("glob", {"pattern": "src/*.py"}, ctx).content == "src/b.py"
    assert run("glob", {"pattern": "web/*.{ts,tsx}"}, ctx).content.splitlines() == ["web/x.ts", "web/y.tsx"]
    assert run("glob", {"pattern": ".venv/**/*.py"}, ctx).content == ".venv/lib/e.py"
    assert run("glob", {"pattern": "../**/*.py"}, ctx).is_error


def test_grep_prints_file_line_text_filters_by_glob_and_caps(ws: Path) -> None:
    (ws / "src").mkdir()
    (ws / "src/a.py").write_text("import os\nTODO: one\n")
    (ws / "src/b.md").write_text("TODO: two\n")
    ctx = ToolContext(ws)
    assert run("grep", {"pattern": r"TODO:\s+\w+"}, ctx).content.splitlines() == [
        "src/a.py:2: TODO: one", "src/b.md:1: TODO: two"]
    assert run("grep", {"pattern": "TODO", "glob": "*.py"}, ctx).content == "src/a.py:2: TODO: one"
    assert run("grep", {"pattern": "TODO", "path": "src/b.md"}, ctx).content == "src/b.md:1: TODO: two"
    bad = run("grep", {"pattern": "(unclosed"}, ctx)
    assert bad.is_error and "invalid regular expression" in bad.content
    (ws / "many.txt").write_text("hit\n" * 2000)
    capped = run("grep", {"pattern": "hit", "path": "many.txt"}, ctx)
    assert capped.data["matches"] == 500 and "stopped after 500 matches" in capped.content


# -- shell -------------------------------------------------------------------------------------

def test_shell_output_ends_with_exit_code_line(ws: Path) -> None:
    out = run("shell", {"command": "pwd; echo to-stderr >&2"}, ToolContext(ws))
    assert not out.is_error
    assert out.content.splitlines() == [str(ws), "to-stderr", "[exit code 0]"]
    assert out.data["exit_code"] == 0


def test_shell_nonzero_exit_is_an_error_outcome_with_its_code(ws: Path) -> None:
    out = run("shell", {"command": "echo failing; exit 3"}, ToolContext(ws))
    assert out.is_error
    assert out.content.endswith("failing\n[exit code 3]")
    silent = run("shell", {"command": "true"}, ToolContext(ws))
    assert silent.content == "[exit code 0]"


def test_shell_timeout_kills_the_process_group(ws: Path) -> None:
    command = "sleep 300 & echo $! > child.pid; echo started; wait"
    out = run("shell", {"command": command, "timeout_sec": 1}, ToolContext(ws))
    assert out.is_error and out.data["timed_out"]
    assert out.content.splitlines()[-1] == "[timed out after 1s]"
    assert "started" in out.content
    child = int((ws / "child.pid").read_text())
    assert wait_until(lambda: process_is_gone(child)), "the background child outlived the timeout"


def test_cancel_kills_running_shell_command(ws: Path) -> None:
    token = CancelToken()
    ctx = ToolContext(ws, ToolsConfig(shell_timeout_sec=600), cancel=token)
    pid_file = ws / "child.pid"

    async def scenario() -> ToolOutcome:
        task = asyncio.create_task(default_tools(ctx.config).run(
            "shell", {"command": "sleep 300 & echo $! > child.pid; wait"}, ctx))
        while not (pid_file.exists() and pid_file.read_text().strip()):
            await asyncio.sleep(0.02)
        threading.Thread(target=token.cancel).start()  # the stop button lives on another thread
        return await asyncio.wait_for(task, UPPER_BOUND_SEC)

    out = asyncio.run(scenario())
    assert out.is_error and out.cancelled
    assert "cancelled" in out.content.splitlines()[-1]
    assert wait_until(lambda: process_is_gone(int(pid_file.read_text())))


def test_already_cancelled_turn_runs_no_tool(ws: Path) -> None:
    token = CancelToken()
    token.cancel()
    out = run("shell", {"command": "touch ran"}, ToolContext(ws, cancel=token))
    assert out.cancelled and not (ws / "ran").exists()


# -- bounded output ----------------------------------------------------------------------------

def test_large_output_is_truncated_with_pointer_to_full_text(ws: Path) -> None:
    ctx = ToolContext(ws, ToolsConfig(max_output_chars=2_000))
    out = run("shell", {"command": "for i in $(seq 0 19999); do printf 'line %06d\\n' $i; done"}, ctx)
    assert not out.is_error
    assert len(out.content) <= 2_000
    assert out.full_chars is not None and out.full_chars > 200_000
    spill = out.data["spill_path"]
    assert spill.startswith(".soba/outputs/") and spill.endswith(".txt")
    pointer = f"[output truncated: {out.full_chars:,} characters; full text in {spill}]"
    assert pointer in out.content.splitlines()
    assert "line 000000" in out.content and "line 019999" in out.content  # head and tail kept
    full = (ws / spill).read_text()
    assert len(full) == out.full_chars and "line 010000" in full
    again = run("read_file", {"path": spill, "start_line": 10_001, "end_line": 10_001}, ctx)
    assert not again.is_error and "line 010000" in again.content  # the spill file is readable in pieces


def test_truncated_shell_output_still_ends_with_exit_code_line(ws: Path) -> None:
    ctx = ToolContext(ws, ToolsConfig(max_output_chars=500))
    out = run("shell", {"command": "seq 1 100000; exit 4"}, ctx)
    assert out.content.splitlines()[-1] == "[exit code 4]"
    assert out.full_chars is not None and len(out.content) <= 500
    assert (ws / out.data["spill_path"]).read_text().endswith("100000\n[exit code 4]")


def test_spill_dir_can_be_placed_elsewhere(ws: Path, tmp_path: Path) -> None:
    ctx = ToolContext(ws, ToolsConfig(max_output_chars=100), spill_dir=tmp_path / "spill")
    out = run("shell", {"command": "seq 1 1000"}, ctx)
    assert Path(out.data["spill_path"]).parent == tmp_path / "spill"


# -- config switches ---------------------------------------------------------------------------

@pytest.mark.parametrize(("switch", "tools", "key"), [
    ("allow_shell", ["shell"], "tools.allowShell"),
    ("allow_write", ["write_file", "edit_file"], "tools.allowWrite"),
    ("allow_python", ["python"], "tools.allowPython"),
])
def test_disabled_tools_are_absent_and_refused(ws: Path, switch: str, tools: list[str], key: str) -> None:
    config = ToolsConfig(**{switch: False})
    registry = default_tools(config)
    names = {spec.name for spec in registry.specs()}
    assert not names & set(tools)
    args = {"shell": {"command": "touch ran"}, "write_file": {"path": "ran", "content": ""},
            "edit_file": {"path": "ran", "old": "a", "new": "b"}, "python": {"code": "open('ran', 'w')"}}
    for name in tools:
        out = run(name, args[name], ToolContext(ws, config), registry)
        assert out.is_error and f"{key} is false" in out.content
    assert not (ws / "ran").exists()


def test_disabled_shell_is_absent_and_refused(ws: Path) -> None:
    config = ToolsConfig(allow_shell=False)
    assert "shell" not in {s.name for s in default_tools(config).specs()}
    # even a registry that has it refuses when the context's config disables it
    out = run("shell", {"command": "touch ran"}, ToolContext(ws, config), default_tools(ToolsConfig()))
    assert out.is_error and "disabled by config" in out.content
    assert not (ws / "ran").exists()


def test_default_tools_have_the_argument_names_the_extractor_relies_on() -> None:
    specs = {s.name: s for s in default_tools(ToolsConfig()).specs()}
    assert all(isinstance(s, ToolSpec) for s in specs.values())

    def props(name: str) -> set[str]:
        return set(specs[name].parameters["properties"])

    assert props("read_file") == {"path", "start_line", "end_line"}
    assert props("write_file") == {"path", "content"}
    assert props("edit_file") == {"path", "old", "new", "replace_all"}
    assert props("list_files") == {"path"} and props("glob") == {"pattern"}
    assert props("grep") == {"pattern", "path", "glob"}
    assert props("shell") == {"command", "timeout_sec"} and props("python") == {"code"}
    assert props("recall") == {"entry_id"} and props("checkpoint") == {"kind", "note"}
    assert props("activate_skill") == props("deactivate_skill") == {"name"}


# -- bad calls ---------------------------------------------------------------------------------

def test_unknown_tool_is_an_error_listing_the_available_tools(ws: Path) -> None:
    out = run("delete_everything", {}, ToolContext(ws))
    assert out.is_error and "unknown tool 'delete_everything'" in out.content and "read_file" in out.content


def test_missing_or_mistyped_arguments_list_the_expected_arguments(ws: Path) -> None:
    missing = run("edit_file", {"path": "x.py"}, ToolContext(ws))
    assert missing.is_error and "missing required arguments old, new" in missing.content
    assert "edit_file expects: path (string, required), old (string, required)" in missing.content
    mistyped = run("read_file", {"path": "x", "start_line": "ten"}, ToolContext(ws))
    assert mistyped.is_error and "start_line must be a whole number" in mistyped.content
    unknown = run("read_file", {"file": "x"}, ToolContext(ws))
    assert unknown.is_error and "unknown argument file" in unknown.content
    bad_kind = run("checkpoint", {"kind": "done", "note": "x"}, ToolContext(ws))
    assert bad_kind.is_error and '"milestone", "plan_pivot"' in bad_kind.content


def test_numbers_sent_as_strings_are_accepted(ws: Path) -> None:
    (ws / "f.txt").write_text("a\nb\nc\n")
    out = run("read_file", {"path": "f.txt", "start_line": "2", "end_line": 2.0}, ToolContext(ws))
    assert out.content.splitlines()[0] == "     2\tb"


def test_os_errors_become_error_outcomes(ws: Path) -> None:
    (ws / "file").write_text("")
    out = run("write_file", {"path": "file/child.txt", "content": "x"}, ToolContext(ws))
    assert out.is_error and "write_file failed" in out.content


# -- python ------------------------------------------------------------------------------------

def test_python_runs_in_the_given_namespace(ws: Path) -> None:
    namespace: dict[str, Any] = {"df_rows": 41}
    ctx = ToolContext(ws, user_namespace=namespace)
    out = run("python", {"code": "df_rows += 1\nprint('rows', df_rows)\ndf_rows * 2"}, ctx)
    assert not out.is_error
    assert out.content == "rows 42\n84"
    assert namespace["df_rows"] == 42


def test_python_without_a_namespace_keeps_a_private_one_per_context(ws: Path) -> None:
    first, second = ToolContext(ws), ToolContext(ws)
    run("python", {"code": "secret = 7"}, first)
    assert run("python", {"code": "secret"}, first).content == "7"
    other = run("python", {"code": "secret"}, second)
    assert other.is_error and "NameError" in other.content


def test_python_error_returns_the_traceback_as_an_error_outcome(ws: Path) -> None:
    out = run("python", {"code": "print('before')\ndef f():\n    return 1 / 0\nf()"}, ToolContext(ws))
    assert out.is_error
    assert out.content.startswith("before\nTraceback (most recent call last):")
    assert "return 1 / 0" in out.content and out.content.endswith("ZeroDivisionError: division by zero")
    syntax = run("python", {"code": "x ="}, ToolContext(ws))
    assert syntax.is_error and "SyntaxError" in syntax.content


def test_python_capture_leaves_sys_streams_and_other_threads_alone(ws: Path) -> None:
    before = (sys.stdout, sys.stderr)
    out = run("python", {"code": "import sys\nprint('out')\nprint('err', file=sys.stderr)"}, ToolContext(ws))
    assert out.content == "out\nerr"
    assert (sys.stdout, sys.stderr) == before


def test_cancel_interrupts_running_python_code(ws: Path) -> None:
    token = CancelToken()
    started = threading.Event()
    ctx = ToolContext(ws, user_namespace={"started": started}, cancel=token)

    async def scenario() -> ToolOutcome:
        task = asyncio.create_task(default_tools(ctx.config).run(
            "python", {"code": "started.set()\nwhile True:\n    pass"}, ctx))
        await asyncio.to_thread(started.wait, UPPER_BOUND_SEC)
        token.cancel()
        return await asyncio.wait_for(task, UPPER_BOUND_SEC)

    out = asyncio.run(scenario())
    assert out.is_error and out.cancelled
    assert out.content.endswith("[cancelled: the code was interrupted]")


# -- session tools -----------------------------------------------------------------------------

def test_recall_returns_exact_stored_entry(ws: Path, tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path / "sessions", cwd=str(ws))
    store.append(user_message("please fix the bug\nin src/x.py"))
    call = store.append(assistant_message("", [ToolCall("c1", "read_file", {"path": "src/x.py"})]))
    store.append(tool_result("c1", "read_file", "     1\tprint('ünïcode')"))
    out = run("recall", {"entry_id": call.id}, ToolContext(ws, store=store))
    assert not out.is_error
    assert json.loads(out.content) == store.get(call.id).to_json()
    reopened = SessionStore.open(store.file)
    assert json.loads(out.content) == reopened.get(call.id).to_json()


def test_recall_of_unknown_id_is_a_clear_error(ws: Path, tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path / "sessions", cwd=str(ws))
    out = run("recall", {"entry_id": "feedbeef"}, ToolContext(ws, store=store))
    assert out.is_error and "no entry with id 'feedbeef'" in out.content
    no_store = run("recall", {"entry_id": "feedbeef"}, ToolContext(ws))
    assert no_store.is_error and "unavailable" in no_store.content


def test_checkpoint_appends_the_entry_and_records_the_intent(ws: Path) -> None:
    appended: list[tuple[str, str]] = []
    intents: list[tuple[str, str]] = []

    def record(kind: str, note: str) -> bool:
        intents.append((kind, note))
        return True

    ctx = ToolContext(ws, record_intent=record, append_checkpoint=lambda k, n: appended.append((k, n)))
    out = run("checkpoint", {"kind": "milestone", "note": "tests pass"}, ctx)
    assert not out.is_error
    assert appended == intents == [("milestone", "tests pass")]
    assert "intent was recorded" in out.content and out.data["intent_recorded"] is True


def test_checkpoint_says_when_the_intent_is_disabled_by_config(ws: Path) -> None:
    appended: list[tuple[str, str]] = []
    ctx = ToolContext(ws, record_intent=lambda k, n: False, append_checkpoint=lambda k, n: appended.append((k, n)))
    out = run("checkpoint", {"kind": "plan_pivot", "note": "switch to sqlite"}, ctx)
    assert not out.is_error and appended == [("plan_pivot", "switch to sqlite")]
    assert "disabled by config" in out.content and out.data["intent_recorded"] is False


def test_context_resolves_its_workspace_and_defaults_the_spill_dir(ws: Path) -> None:
    (ws / "sub").mkdir()
    ctx = ToolContext(ws / "sub" / "..")
    assert ctx.workspace == ws.resolve() and ctx.spill_dir == ws / ".soba" / "outputs"
    from_config = ToolContext.from_config(ToolsConfig(workspace="sub"), base_dir=ws)
    assert from_config.workspace == ws / "sub"
    assert os.path.isdir(from_config.workspace)


def test_edit_keeps_windows_line_endings(ws: Path) -> None:
    (ws / "w.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    out = run("edit_file", {"path": "w.txt", "old": "one\ntwo\n", "new": "1\n2\n"}, ToolContext(ws))
    assert not out.is_error, out.content
    assert (ws / "w.txt").read_bytes() == b"1\r\n2\r\nthree\r\n"


def test_edit_refuses_a_file_that_is_not_utf8_and_leaves_it_unchanged(ws: Path) -> None:
    (ws / "latin.txt").write_bytes(b"caf\xe9 au lait\n")
    out = run("edit_file", {"path": "latin.txt", "old": "lait", "new": "milk"}, ToolContext(ws))
    assert out.is_error and "not valid UTF-8" in out.content
    assert (ws / "latin.txt").read_bytes() == b"caf\xe9 au lait\n"


def test_hidden_env_vars_are_not_visible_to_shell_commands(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOBA_TEST_API_KEY", "sk-should-not-leak")
    monkeypatch.setenv("SOBA_TEST_VISIBLE", "fine")
    ctx = ToolContext(ws, hidden_env=frozenset({"SOBA_TEST_API_KEY"}))
    out = run("shell", {"command": "env"}, ctx)
    assert "sk-should-not-leak" not in out.content and "SOBA_TEST_VISIBLE=fine" in out.content


def test_shell_runs_from_an_event_loop_on_a_background_thread(ws: Path) -> None:
    results: list[ToolOutcome] = []
    worker = threading.Thread(target=lambda: results.append(run("shell", {"command": "echo bg"}, ToolContext(ws))))
    worker.start()
    worker.join(UPPER_BOUND_SEC)
    assert results and results[0].content == "bg\n[exit code 0]"


def test_glob_accepts_an_absolute_pattern_inside_the_workspace(ws: Path) -> None:
    (ws / "pkg").mkdir()
    (ws / "pkg" / "m.py").write_text("")
    assert run("glob", {"pattern": f"{ws}/**/*.py"}, ToolContext(ws)).content == "pkg/m.py"
    outside = run("glob", {"pattern": f"{ws.parent}/**/*.py"}, ToolContext(ws))
    assert outside.is_error and "outside the workspace" in outside.content


def test_timeout_and_cancel_kill_setsid_descendants_and_say_what_was_killed(ws: Path) -> None:
    command = "setsid sleep 300 & echo $!; (setsid bash -c 'sleep 301 & echo $!; wait' &); sleep 302"
    out = run("shell", {"command": command, "timeout_sec": 2}, ToolContext(ws))
    assert out.content.endswith("[timed out after 2s]")
    pids = [int(line) for line in out.content.splitlines() if line.strip().isdigit()]
    assert len(pids) == 2
    assert all(wait_until(lambda pid=pid: process_is_gone(pid)) for pid in pids)
    note = next(line for line in out.content.splitlines() if line.startswith("[killed "))
    assert "sleep (" in note and all(f"({pid})" in note for pid in pids)
    assert {p["pid"] for p in out.data["killed"]} >= set(pids)

    token = CancelToken()
    ctx = ToolContext(ws, cancel=token)

    async def cancel_soon() -> ToolOutcome:
        task = asyncio.ensure_future(default_tools(ctx.config).run("shell", {"command": command}, ctx))
        while not list(ws.glob("never")) and not task.done():
            await asyncio.sleep(0.2)
            token.cancel("stop")
        return await task

    out = asyncio.run(asyncio.wait_for(cancel_soon(), UPPER_BOUND_SEC))
    assert out.cancelled and "[killed " in out.content
