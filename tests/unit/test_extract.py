"""The deterministic extractor: facts from transcript entries alone, and the degraded capsule.

Each test is named after the rule it proves. Shell-command analysis is tested through the public
``classify_shell_command``; extraction through ``extract_facts`` / ``deterministic_capsule`` on
entries built with the session helpers; the last tests run on a real pi session.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soba_notebook.compaction import extract
from soba_notebook.compaction.capsule import Capsule, EntryRange, Verification, render
from soba_notebook.compaction.extract import (
    MAX_FILES,
    ShellEffects,
    classify_shell_command,
    deterministic_capsule,
    extract_facts,
    verification_status,
)
from soba_notebook.compaction.verification import verification_outcome
from soba_notebook.session.entries import (
    Entry,
    ToolCall,
    assistant_message,
    checkpoint,
    config_change,
    tool_result,
    user_message,
)

# -- helpers -----------------------------------------------------------------------------------


def with_ids(items: Iterable[Entry], prefix: str = "e") -> list[Entry]:
    out: list[Entry] = []
    parent = None
    for n, entry in enumerate(items, 1):
        entry = entry.with_ids(f"{prefix}{n}", parent, f"2025-01-01T00:00:{n % 60:02d}.000Z")
        parent = entry.id
        out.append(entry)
    return out


_counter = iter(range(1, 1_000_000))


def call(tool: str, result: str = "ok", /, *, is_error: bool = False, cancelled: bool = False,
         no_result: bool = False, text: str = "", **args: Any) -> list[Entry]:
    """An assistant call of ``tool`` with arguments ``args`` and (unless ``no_result``) its result."""
    call_id = f"call_{next(_counter)}"
    entries = [assistant_message(text, [ToolCall(call_id, tool, args)])]
    if not no_result:
        entries.append(tool_result(call_id, tool, result, is_error=is_error, cancelled=cancelled))
    return entries


def session(*parts: Entry | list[Entry]) -> list[Entry]:
    flat: list[Entry] = []
    for part in parts:
        flat.extend(part if isinstance(part, list) else [part])
    return with_ids(flat)


def shell(command: str, output: str = "[exit code 0]", **kw: Any) -> list[Entry]:
    return call("shell", output, command=command, **kw)


def check_of(capsule: Capsule, command: str) -> Verification:
    found = [v for v in capsule.verification if v.command == command]
    assert found, f"no verification {command!r} in {capsule.verification}"
    return found[0]


# -- shell commands: files ---------------------------------------------------------------------


@pytest.mark.parametrize("command", [
    "sed -i 's/a/b/' src/parser.py",
    "sed -i '' 's/a/b/g' src/parser.py",  # BSD
    "sed -i.bak -e 's/a/b/' src/parser.py",
    "sed -i -E 's/(a)/b/' ./src/parser.py",
    "gsed --in-place 's/a/b/' src/parser.py",
])
def test_sed_in_place_marks_file_modified(command: str) -> None:
    fx = classify_shell_command(command)
    assert fx.writes == ("src/parser.py",)
    assert fx.reads == ()


def test_sed_in_place_handles_several_files() -> None:
    fx = classify_shell_command(r"sed -i 's/np\.Inf/np.inf/g' ./pvlib/singlediode.py ./pvlib/pvsystem.py")
    assert fx.writes == ("pvlib/singlediode.py", "pvlib/pvsystem.py")


def test_sed_print_range_is_a_read() -> None:
    assert classify_shell_command("sed -n '957,980p' src/marshmallow/schema.py").reads == ("src/marshmallow/schema.py",)


@pytest.mark.parametrize(("command", "reads"), [
    ("cat a.py", ("a.py",)),
    ("cat -n a.py b.py", ("a.py", "b.py")),
    ("head -n 20 src/a.py | tail -5", ("src/a.py",)),
    ("tail -n 50 log.txt", ("log.txt",)),
    ("less README.md", ("README.md",)),
    ("nl -ba src/x.py", ("src/x.py",)),
    ("wc -l a.txt", ("a.txt",)),
    ('grep -n "def foo" src/x.py', ("src/x.py",)),
    ('grep -A 5 "borderColor" pkg/editor.ts', ("pkg/editor.ts",)),
    ("grep -e foo -e bar a.py b.py", ("a.py", "b.py")),
    ("awk '{print $1}' data.csv", ("data.csv",)),
])
def test_read_commands_record_files_read(command: str, reads: tuple[str, ...]) -> None:
    fx = classify_shell_command(command)
    assert fx.reads == reads
    assert fx.writes == ()


def test_recursive_grep_and_globs_record_no_file() -> None:
    assert classify_shell_command('grep -rn "x" src/').reads == ()
    assert classify_shell_command('grep -n "x" src/*.py').reads == ()
    assert classify_shell_command("cat $FILE").reads == ()


def test_redirect_to_dev_null_is_not_a_write() -> None:
    fx = classify_shell_command("python setup.py check > /dev/null 2>&1")
    assert fx.writes == ()
    assert classify_shell_command("cat a.txt 2>/dev/null").writes == ()


def test_stderr_duplication_is_not_a_write() -> None:
    assert classify_shell_command("make 2>&1 | tail -3").writes == ()
    assert classify_shell_command("echo oops >&2").writes == ()


def test_redirections_and_tee_are_writes() -> None:
    assert classify_shell_command("echo hi > out.txt").writes == ("out.txt",)
    assert classify_shell_command("echo hi >> log/run.log").writes == ("log/run.log",)
    assert classify_shell_command("pytest &> result.txt").writes == ("result.txt",)
    assert classify_shell_command("echo x | tee -a notes.md other.md").writes == ("notes.md", "other.md")


def test_heredoc_body_is_ignored_and_target_is_written() -> None:
    command = "cat > fix.py <<'EOF'\nimport os\nprint('it''s > not.txt')\nrm -rf /\nEOF\npython fix.py"
    fx = classify_shell_command(command)
    assert fx.writes == ("fix.py",)
    assert fx.deletes == ()


def test_here_string_is_not_a_heredoc() -> None:
    assert classify_shell_command('grep x <<<"abc"\nabc\ncat f.py').reads == ("f.py",)


def test_python_heredoc_writes_nothing_known() -> None:
    fx = classify_shell_command("python - <<EOF\nopen('x.txt', 'w').write('1')\nEOF")
    assert fx == ShellEffects()


def test_git_mv_marks_both_paths_modified() -> None:
    assert classify_shell_command("git mv src/old.py src/new.py").writes == ("src/old.py", "src/new.py")


def test_mv_cp_rm_touch_are_modifications() -> None:
    mv = classify_shell_command("mv a.py b.py")
    assert mv.writes == ("a.py", "b.py") and mv.deletes == ("a.py",)
    assert classify_shell_command("cp -r src/a.py backup/").writes == ("backup/a.py",)
    assert classify_shell_command("cp a.py a.py.orig").writes == ("a.py.orig",)
    rm = classify_shell_command("rm -f build.log && git rm -q old.py")
    assert rm.writes == ("build.log", "old.py") and rm.deletes == ("build.log", "old.py")
    assert classify_shell_command("git rm --cached secret.env").writes == ()
    assert classify_shell_command("touch new.py").writes == ("new.py",)


def test_patch_file_is_recorded_as_read() -> None:
    assert classify_shell_command("patch -p1 < fix.diff") == ShellEffects(reads=("fix.diff",))
    assert classify_shell_command("git apply --check changes.patch").reads == ("changes.patch",)


def test_cd_prefix_resolves_relative_paths() -> None:
    fx = classify_shell_command("cd packages/tui && sed -i '' 's/a/b/' test/editor.test.ts && cat /etc/hosts")
    assert fx.writes == ("packages/tui/test/editor.test.ts",)
    assert fx.reads == ("/etc/hosts",)
    assert classify_shell_command("(cd sub && touch a) && touch b").writes == ("sub/a", "b")


def test_paths_are_normalized_textually() -> None:
    assert classify_shell_command("cat ./a/../b/./c.py").reads == ("b/c.py",)
    assert classify_shell_command("cd .. && cat x.py").reads == ("../x.py",)
    assert classify_shell_command("touch /abs//path/f.txt").writes == ("/abs/path/f.txt",)


def test_chains_and_newlines_are_all_analysed() -> None:
    fx = classify_shell_command("cat a.py; head b.py || tail c.py\nwc d.py && echo x > e.txt")
    assert fx.reads == ("a.py", "b.py", "c.py", "d.py")
    assert fx.writes == ("e.txt",)


def test_unbalanced_quotes_fall_back_without_raising() -> None:
    fx = classify_shell_command("echo 'unbalanced && cat a.py")
    assert isinstance(fx, ShellEffects)
    assert classify_shell_command('grep "x a.py').writes == ()


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_classify_shell_command_never_raises(command: str) -> None:
    assert isinstance(classify_shell_command(command), ShellEffects)


_SHELLISH = st.lists(st.sampled_from([
    "cat", "sed", "-i", "''", "-n", "grep", "-r", "-e", "pytest", "npm", "run", "test", "cd", "..", "a.py",
    ">", ">>", "2>&1", "|", "&&", "||", ";", "\n", "(", ")", "<<", "EOF", "'", '"', "\\", "$(", "`", "tee",
    "mv", "cp", "rm", "git", "mv", "python", "-m", "make", "/dev/null", "*.py", "~", "-", "--", "<",
]), max_size=25).map(" ".join)


@settings(max_examples=300, deadline=None)
@given(_SHELLISH)
def test_shell_like_noise_never_raises(command: str) -> None:
    fx = classify_shell_command(command)
    assert all(isinstance(p, str) and p for p in (*fx.reads, *fx.writes))


def test_non_string_command_gives_empty_effects() -> None:
    assert classify_shell_command(None) == ShellEffects()  # type: ignore[arg-type]
    assert classify_shell_command(["ls"]) == ShellEffects()  # type: ignore[arg-type]


# -- shell commands: verification -------------------------------------------------------------


VERIFICATION_KINDS = [
    ("pytest", "test"), ("pytest tests/ -q", "test"), ("python -m pytest -x", "test"), ("py.test", "test"),
    ("python3 -m unittest discover", "test"), ("tox -e py311", "test"), ("nox", "test"),
    ("npm test", "test"), ("npm run test", "test"), ("yarn test", "test"), ("pnpm test", "test"),
    ("cargo test", "test"), ("go test ./...", "test"), ("make test", "test"), ("ctest", "test"),
    ("mvn test", "test"), ("gradle test", "test"), ("./gradlew test", "test"), ("jest", "test"),
    ("npx vitest run", "test"), ("uv run pytest", "test"), ("timeout 60 pytest", "test"),
    ("PYTHONPATH=src pytest", "test"),
    ("ruff check .", "lint"), ("ruff", "lint"), ("flake8 src", "lint"), ("pylint pkg", "lint"),
    ("eslint .", "lint"), ("npm run lint", "lint"), ("black --check .", "lint"),
    ("mypy src", "typecheck"), ("pyright", "typecheck"), ("tsc --noEmit", "typecheck"),
    ("npx tsc --noEmit", "typecheck"),
    ("make", "build"), ("cargo build --release", "build"), ("npm run build", "build"), ("go build ./...", "build"),
    ("python -m build", "build"),
]


def test_verification_commands_are_recognised_with_their_kind() -> None:
    """One table of test, lint, type-check and build commands (runners, wrappers, env prefixes);
    the failure names every command classified wrongly."""
    wrong = [(command, kind, fx.verification, fx.kind) for command, kind in VERIFICATION_KINDS
             if not ((fx := classify_shell_command(command)).verification and fx.kind == kind)]
    assert not wrong, wrong


@pytest.mark.parametrize("command", [
    "npm install", "ruff format .", "git status", "make clean", "python script.py", "ls -la", "pip install pytest",
    "cat pytest.ini", "echo pytest", "black .",
])
def test_other_commands_are_not_verification(command: str) -> None:
    assert not classify_shell_command(command).verification


def test_verification_command_is_normalized_without_filters() -> None:
    fx = classify_shell_command("cd packages/coding-agent && npm run check 2>&1 | tail -20")
    assert fx.check == "cd packages/coding-agent && npm run check"
    assert classify_shell_command("pytest -q 2>&1").check == "pytest -q"
    assert classify_shell_command("ruff check . && pytest -q").check == "ruff check . && pytest -q"


def test_piped_check_has_unreliable_exit_code() -> None:
    assert classify_shell_command("pytest -q").exit_code_reliable
    assert classify_shell_command("cd x && pytest -q && echo ok").exit_code_reliable
    assert not classify_shell_command("pytest -q | tail -5").exit_code_reliable
    assert not classify_shell_command("pytest -q; echo done").exit_code_reliable
    assert not classify_shell_command("pytest -q || true").exit_code_reliable


# -- verification status -----------------------------------------------------------------------


def test_exit_code_markers_decide_status() -> None:
    assert verification_status("....\n[exit code 0]", None) == "passed"
    assert verification_status("boom\n[exit code 2]", None) == "failed"
    assert verification_status("<returncode>0</returncode>\n<output>\nok\n</output>", None) == "passed"
    assert verification_status("<returncode>1</returncode>\n<output>\nE\n</output>", None) == "failed"
    assert verification_status("src/a.ts(1,1): oops\n\nCommand exited with code 2", None) == "failed"


def test_runner_summaries_decide_status_without_exit_code() -> None:
    assert verification_status("===== 12 passed, 1 warning in 0.52s =====", None) == "passed"
    assert verification_status("FAILED t.py::x\n===== 1 failed, 11 passed in 0.6s =====", None) == "failed"
    assert verification_status("==== 1 error in 0.10s ====", None) == "failed"
    assert verification_status("All checks passed!", None) == "passed"
    assert verification_status("a.py:1:1: F401 unused\nFound 1 error.", None) == "failed"
    assert verification_status("src/x.ts(3,4): error TS2339: nope", None) == "failed"
    assert verification_status("Success: no issues found in 3 source files", None) == "passed"
    assert verification_status("....\nRan 4 tests in 0.01s\n\nOK", None) == "passed"
    assert verification_status("==== 3 passed, 1 skipped ====", None) == "passed"
    assert verification_status("ERROR tests/test_x.py - ImportError: no module", None) == "failed"


def test_is_error_means_failed_and_no_evidence_is_unknown() -> None:
    assert verification_status("timed out", True) == "failed"
    assert verification_status("some output", None) == "unknown"
    assert verification_status("some output", False) == "unknown"
    assert verification_status("", None) == "unknown"


def test_piped_check_ignores_the_filters_exit_status() -> None:
    # ``npm run check | grep "error TS"`` exits 1 when grep finds nothing: that is not a failure
    assert verification_outcome("Command exited with code 1", True, exit_code_reliable=False)[0] == "unknown"
    assert verification_outcome("x.ts(1,1): error TS2304: y", False, exit_code_reliable=False)[0] == "failed"
    assert verification_outcome("3 passed in 0.1s\n[exit code 0]", None, exit_code_reliable=False)[0] == "passed"


# -- extraction: files -------------------------------------------------------------------------


def test_soba_tools_record_reads_and_modifications() -> None:
    entries = session(
        user_message("fix the parser"),
        call("read_file", "1: x", path="./src/parser.py", start_line=1, end_line=20),
        call("edit_file", "edited", path="src/parser.py", old="a", new="b"),
        call("write_file", "wrote", path="src/new_module.py", content="x = 1\n"),
        call("list_files", "a\nb", path="src"),
        call("glob", "src/a.py", pattern="src/**/*.py"),
        call("grep", "src/util.py:3: foo", pattern="foo", path="src/util.py"),
        call("grep", "hits", pattern="foo", path="src"),
        call("recall", "entry text", entry_id="e1"),
        call("python", "42", code="open('out.csv','w').write('x')"),
    )
    facts = extract_facts(entries)
    assert facts.files_read == ("src/parser.py", "src/util.py")
    assert facts.files_modified == ("src/parser.py", "src/new_module.py")
    assert facts.artifacts == ("src/new_module.py",)


def test_failed_edit_is_not_counted_as_modified() -> None:
    entries = session(
        call("edit_file", "old text not found", is_error=True, path="src/a.py", old="x", new="y"),
        call("write_file", "permission denied", is_error=True, path="src/b.py", content=""),
        call("read_file", "no such file", is_error=True, path="src/c.py"),
    )
    facts = extract_facts(entries)
    assert facts.files_modified == ()
    assert facts.files_read == ()
    assert facts.artifacts == ()


def test_call_without_result_is_not_counted_and_is_pending() -> None:
    entries = session(
        user_message("go"),
        call("edit_file", path="src/a.py", old="x", new="y", no_result=True),
        call("shell", "", cancelled=True, command="npm run build"),
    )
    facts = extract_facts(entries)
    assert facts.files_modified == ()
    capsule = deterministic_capsule(entries)
    assert capsule.pending == ("edit_file: src/a.py (interrupted, no result)",
                               "shell: npm run build (interrupted, no result)")


def test_interrupted_call_that_was_rerun_is_not_pending() -> None:
    entries = session(shell("npm run build", no_result=True), shell("npm run build", "[exit code 0]"))
    assert deterministic_capsule(entries).pending == ()


def test_imported_agent_tools_are_understood() -> None:
    entries = session(
        # pi
        call("read", "text", path="packages/a/src/x.ts"),
        call("edit", "Successfully replaced text", path="packages/a/src/x.ts", oldText="a", newText="b"),
        call("write", "Successfully wrote", path="packages/a/NEW.md", content="# new"),
        call("bash", "", command="cd packages/a && sed -i '' 's/x/y/' src/y.ts"),
        # Claude Code
        call("Read", "text", file_path="/repo/README.md"),
        call("Edit", "ok", file_path="/repo/README.md", old_string="a", new_string="b"),
        call("MultiEdit", "ok", file_path="/repo/setup.cfg", edits=[]),
        call("NotebookEdit", "ok", notebook_path="/repo/analysis.ipynb", new_source="x"),
        call("Write", "ok", file_path="/repo/notes.txt", content="n"),
        # SWE-agent
        call("str_replace_editor", "Here's the result of running `cat -n`", command="view", path="/testbed/a.py"),
        call("str_replace_editor", "Here's the files and directories up to 2 levels deep", command="view",
             path="/testbed"),
        call("str_replace_editor", "File created successfully", command="create", path="/testbed/repro.py"),
        call("str_replace_editor", "The file has been edited", command="str_replace", path="/testbed/a.py",
             old_str="a", new_str="b"),
        # SWE-agent windowed tools: edits go to the file last opened
        call("open", "[File: /repo/tests/m.py (10 lines total)]", path="/repo/tests/m.py"),
        call("edit", "File updated", search="def f()", replace="def f():"),
    )
    facts = extract_facts(entries)
    assert set(facts.files_read) == {"packages/a/src/x.ts", "/repo/README.md", "/testbed/a.py", "/repo/tests/m.py"}
    assert facts.files_modified == (
        "packages/a/src/x.ts", "packages/a/NEW.md", "packages/a/src/y.ts", "/repo/README.md", "/repo/setup.cfg",
        "/repo/analysis.ipynb", "/repo/notes.txt", "/testbed/repro.py", "/testbed/a.py", "/repo/tests/m.py")
    assert facts.artifacts == ("packages/a/NEW.md", "/repo/notes.txt", "/testbed/repro.py")


def test_swe_agent_error_text_is_not_a_modification() -> None:
    entries = session(call("str_replace_editor", "No replacement was performed, old_str `x` did not appear",
                           command="str_replace", path="/testbed/a.py", old_str="x", new_str="y"))
    assert extract_facts(entries).files_modified == ()


def test_tool_calls_left_in_content_blocks_are_read() -> None:
    raw = Entry("message", {"message": {"role": "assistant", "content": [
        {"type": "text", "text": "editing"},
        {"type": "toolCall", "id": "t1", "name": "edit", "arguments": {"path": "a.ts", "oldText": "x", "newText": "y"}},
    ]}})
    result = Entry("message", {"message": {"role": "toolResult", "toolCallId": "t1", "isError": False,
                                           "content": [{"type": "text", "text": "ok"}]}})
    assert extract_facts(with_ids([raw, result])).files_modified == ("a.ts",)


def test_shell_writes_count_only_when_the_command_succeeded() -> None:
    entries = session(
        shell("sed -i 's/a/b/' ok.py"),
        shell("sed -i 's/a/b/' broken.py", "sed: can't read broken.py", is_error=True),
        shell("cat seen.py", "x = 1\n[exit code 0]"),
    )
    facts = extract_facts(entries)
    assert facts.files_modified == ("ok.py",)
    assert facts.files_read == ("seen.py",)


def test_new_files_written_are_artifacts_but_overwrites_are_not() -> None:
    entries = session(
        call("read_file", "old", path="src/existing.py"),
        call("write_file", "ok", path="src/existing.py", content="new"),
        call("write_file", "ok", path="report.md", content="# report"),
        call("write_file", "ok", path="tmp.txt", content="x"),
        shell("rm tmp.txt"),
        shell("jupyter nbconvert --to notebook --execute --inplace analysis.ipynb"),
    )
    facts = extract_facts(entries)
    assert facts.artifacts == ("report.md", "analysis.ipynb")
    assert "tmp.txt" in facts.files_modified


def test_covers_spans_the_entries() -> None:
    entries = session(user_message("a"), assistant_message("b"), user_message("c"))
    assert extract_facts(entries).covers == EntryRange("e1", "e3", 3)
    assert extract_facts([]).covers == EntryRange(None, None, 0)


# -- extraction: verification ------------------------------------------------------------------


def test_later_passing_run_supersedes_failure() -> None:
    entries = session(
        shell("pytest tests/ -q", "F.\n1 failed, 1 passed in 0.2s\n[exit code 1]"),
        call("edit_file", "ok", path="src/parser.py", old="a", new="b"),
        shell("pytest tests/ -q 2>&1", "..\n2 passed in 0.2s\n[exit code 0]"),
    )
    facts = extract_facts(entries)
    assert facts.verification == (Verification("pytest tests/ -q", "passed", "2 passed in 0.2s"),)
    assert deterministic_capsule(entries).blockers == ()


def test_later_failure_supersedes_pass_and_becomes_a_blocker() -> None:
    entries = session(
        shell("ruff check .", "All checks passed!\n[exit code 0]"),
        shell("ruff check .", "a.py:1:1: F401\nFound 1 error.\n[exit code 1]"),
    )
    capsule = deterministic_capsule(entries)
    assert check_of(capsule, "ruff check .").status == "failed"
    assert capsule.blockers == ("ruff check . failed (Found 1 error.)",)


def test_unknown_rerun_keeps_known_result() -> None:
    entries = session(
        shell("npm test", "Tests: 3 passed, 3 total\n[exit code 0]"),
        shell("npm test | tail -1", "...", ),
    )
    assert check_of(extract_facts(entries), "npm test").status == "passed"


def test_mini_swe_agent_returncode_is_read() -> None:
    entries = session(call("bash", "<returncode>1</returncode>\n<output>\nE   AssertionError\n</output>",
                           command="cd /testbed && python -m pytest tests/test_x.py"))
    check = check_of(extract_facts(entries), "cd /testbed && python -m pytest tests/test_x.py")
    assert check.status == "failed" and check.detail == "exit 1"


# -- extraction: goal, corrections, skills, checkpoints -----------------------------------------


def test_goal_is_first_user_message_and_corrections_are_kept() -> None:
    entries = session(
        user_message("Fix the date parser so that ISO weeks work.\n\nDetails follow."),
        user_message("<context_capsule>old state</context_capsule>"),
        user_message("state from a handoff", source="capsule_load"),
        user_message("capsule text", source="capsule"),
        *[user_message(f"correction {i}") for i in range(1, 8)],
        user_message("x" * 500),
        assistant_message("on it"),
    )
    facts = extract_facts(entries)
    assert facts.goal == "Fix the date parser so that ISO weeks work.\n\nDetails follow."
    assert facts.constraints == ("User: correction 4", "User: correction 5", "User: correction 6",
                                 "User: correction 7", "User: " + "x" * 199 + "…")
    assert all(len(c) <= len("User: ") + 200 for c in facts.constraints)


def test_long_goal_prefers_first_paragraph() -> None:
    first = "Port user-message-selector.ts to the new theme API, following the other selectors."
    facts = extract_facts(session(user_message(first + "\n\n" + "log line\n" * 200)))
    assert facts.goal == first
    long_single = "word " * 200
    assert len(extract_facts(session(user_message(long_single))).goal) <= 400


def test_slash_commands_and_long_pastes_are_not_corrections() -> None:
    entries = session(user_message("/mode"), user_message("make the tests pass"),
                      user_message("it crashed:\n\n" + "Traceback line\n" * 200), user_message("/compact"))
    facts = extract_facts(entries)
    assert facts.goal == "make the tests pass"
    assert facts.constraints == ("User: it crashed:",)


def test_active_skills_follow_tool_calls_and_config_changes() -> None:
    entries = session(
        call("activate_skill", "ok", name="pandas"),
        call("activate_skill", "ok", name="plotting"),
        call("activate_skill", "unknown skill", is_error=True, name="nope"),
        call("deactivate_skill", "ok", name="pandas"),
        call("activate_skill", "ok", name="sql"),
    )
    assert extract_facts(entries).active_skills == ("plotting", "sql")
    replaced = session(*entries, config_change({"activeSkills": ["review", "git"]}),
                       call("activate_skill", "ok", name="docs"))
    assert extract_facts(replaced).active_skills == ("review", "git", "docs")


def test_checkpoints_become_milestones_and_decisions() -> None:
    entries = session(
        checkpoint("milestone", "parser rewritten"),
        checkpoint("plan_pivot", "use sqlite instead of json files"),
        call("checkpoint", "recorded", kind="milestone", note="tests green"),
    )
    facts = extract_facts(entries)
    assert facts.done == ("Milestone: parser rewritten", "Milestone: tests green")
    assert [(d.what, d.why) for d in facts.decisions] == [("use sqlite instead of json files", "plan pivot")]


# -- the degraded capsule ----------------------------------------------------------------------


def test_degraded_work_summary_lists_done_active_and_blockers() -> None:
    entries = session(
        user_message("fix it"),
        call("edit_file", "ok", path="src/parser.py", old="a", new="b"),
        shell("pytest tests/", "3 passed in 0.1s\n[exit code 0]"),
        shell("mypy src", "src/a.py:1: error: x\nFound 1 error in 1 file\n[exit code 1]"),
        assistant_message("The parser is fixed; mypy still reports one error in src/a.py.\n\nNext: fix the type "
                          "error in src/a.py"),
    )
    capsule = deterministic_capsule(entries)
    assert capsule.done == ("Modified src/parser.py", "pytest tests/ passed")
    assert capsule.active == ("The parser is fixed; mypy still reports one error in src/a.py. Next: fix the type "
                              "error in src/a.py",)
    assert capsule.blockers == ("mypy src failed (Found 1 error in 1 file)",)
    assert capsule.next_steps == ("fix the type error in src/a.py",)
    assert capsule.goal == "fix it"


def test_next_steps_only_from_an_explicit_next_line() -> None:
    plain = session(assistant_message("I looked at the code and it is fine."))
    assert deterministic_capsule(plain).next_steps == ()
    listed = session(assistant_message("Done with A.\n\n**Next steps:**\n1. wire B\n2. test C\n\nThanks"))
    assert deterministic_capsule(listed).next_steps == ("wire B", "test C")
    sentence = session(assistant_message("Build passes.\nNext, I'll update the changelog."))
    assert deterministic_capsule(sentence).next_steps == ("Next, I'll update the changelog.",)


def test_rolling_keeps_files_from_previous_capsule() -> None:
    previous = Capsule(goal="ship the importer", files_read=("docs/spec.md",), files_modified=("src/old.py",),
                       verification=(Verification("pytest", "failed"),), active_skills=("python",),
                       covers=EntryRange("a1", "a9", 9))
    entries = session(call("edit_file", "ok", path="src/new.py", old="a", new="b"),
                      shell("pytest", "1 passed in 0.1s\n[exit code 0]"))
    capsule = deterministic_capsule(entries, previous, "ck_prev")
    assert capsule.files_modified == ("src/old.py", "src/new.py")
    assert capsule.files_read == ("docs/spec.md",)
    assert capsule.verification == (Verification("pytest", "passed", "1 passed in 0.1s"),)
    assert capsule.active_skills == ("python",)
    assert capsule.rolled_from == ("ck_prev",)
    assert capsule.covers == EntryRange("a1", "e4", 13)


def test_rolling_keeps_previous_goal_and_records_new_first_message_as_correction() -> None:
    previous = Capsule(goal="ship the importer")
    capsule = deterministic_capsule(session(user_message("also handle empty files")), previous)
    assert capsule.goal == "ship the importer"
    assert capsule.constraints == ("User: also handle empty files",)
    # extract_facts alone has no previous goal: the first message of the span is its goal
    assert extract_facts(session(user_message("also handle empty files"))).goal == "also handle empty files"


def test_rolling_drops_blockers_and_pending_resolved_in_the_span() -> None:
    previous = Capsule(blockers=("pytest -q failed (exit 1)", "`pytest -q` is red", "waiting for API key"),
                       pending=("shell: npm run build (interrupted, no result)",))
    entries = session(shell("pytest -q", "5 passed in 1.0s\n[exit code 0]"), shell("npm run build"))
    capsule = deterministic_capsule(entries, previous)
    assert capsule.blockers == ("waiting for API key",)
    assert capsule.pending == ()


def test_rolling_activation_adds_to_previous_skills() -> None:
    capsule = deterministic_capsule(session(call("activate_skill", "ok", name="sql")),
                                    Capsule(active_skills=("python",)))
    assert capsule.active_skills == ("python", "sql")


def test_lists_are_capped() -> None:
    entries = session(*[call("write_file", "ok", path=f"gen/f{i}.py", content="") for i in range(MAX_FILES + 50)])
    capsule = deterministic_capsule(entries)
    assert len(capsule.files_modified) == MAX_FILES
    assert capsule.files_modified[-1] == f"gen/f{MAX_FILES + 49}.py"  # the most recent are kept
    assert len(capsule.done) <= 12


def test_malformed_entries_do_not_crash() -> None:
    weird = [
        Entry("message", {"message": {"role": "assistant", "toolCalls": 5}}),
        Entry("message", {"message": {"role": "assistant", "toolCalls": [{"name": "edit_file", "arguments": "{}"}]}}),
        Entry("message", {"message": {"role": "assistant", "toolCalls": [None, {"id": 3}]}}),
        Entry("message", {"message": {"role": "tool", "toolCallId": None, "content": None}}),
        Entry("message", {"message": "not a mapping"}),
        Entry("message", {"message": {"role": "user", "content": ["odd", {"type": "text", "text": 7}]}}),
        Entry("checkpoint", {"kind": None, "note": 3}),
        Entry("config", {"changes": {"activeSkills": "not a list"}}),
        Entry("leaf", {"targetId": "x"}),
        Entry("some_future_type", {}),
    ]
    capsule = deterministic_capsule(with_ids(weird))
    assert capsule.covers.count == len(weird)


# -- a real session --------------------------------------------------------------------------


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content or () if isinstance(b, Mapping) and b.get("type") == "text")


def _pi_entries(path: Path) -> tuple[list[Entry], list[dict[str, Any]], dict[str, bool]]:
    """SOBA entries from a pi session file, plus pi's tool calls and each result's isError."""
    entries: list[Entry] = []
    calls: list[dict[str, Any]] = []
    errors: dict[str, bool] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        raw = json.loads(line)
        message = raw.get("message")
        if raw.get("type") != "message" or not isinstance(message, dict):
            continue
        role = message.get("role")
        if role == "user":
            entries.append(user_message(_text(message.get("content"))))
        elif role == "assistant":
            blocks = [b for b in message.get("content") or () if b.get("type") == "toolCall"]
            calls.extend(blocks)
            entries.append(assistant_message(_text(message.get("content")),
                                             [ToolCall(b["id"], b["name"], b.get("arguments") or {}) for b in blocks]))
        elif role == "toolResult":
            errors[message["toolCallId"]] = bool(message.get("isError"))
            entries.append(tool_result(message["toolCallId"], message.get("toolName", ""),
                                       _text(message.get("content")), is_error=bool(message.get("isError"))))
    return with_ids(entries, "pi"), calls, errors


def test_real_pi_session_keeps_every_successful_edit_and_write(pi_session: Path) -> None:
    entries, calls, errors = _pi_entries(pi_session)
    facts = extract_facts(entries)
    edited = {c["arguments"]["path"] for c in calls
              if c["name"] in ("edit", "write") and errors.get(c["id"]) is False}
    assert edited, "the fixture should contain successful edits"
    missing = {p for p in edited if p.removeprefix("./") not in facts.files_modified}
    assert missing == set()
    read = {c["arguments"]["path"] for c in calls if c["name"] == "read" and errors.get(c["id"]) is False}
    assert read <= set(facts.files_read)
    # sed -i '' inside ``cd … &&`` chains is seen too
    assert "packages/tui/test/editor.test.ts" in facts.files_modified
    assert facts.goal.startswith("read packages/coding-agent/docs/theme.md")
    assert any(v.command == "cd packages/coding-agent && npm run check" for v in facts.verification)


def test_extract_facts_reads_each_message_of_a_real_session_once(pi_session: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # The extractor runs on every compaction over everything it covers: its work is one read of
    # each message's text and one look at each assistant's calls, counted here rather than timed.
    entries, _, _ = _pi_entries(pi_session)
    texts: list[int] = []
    calls: list[int] = []
    read_text, read_calls = extract._content_text, extract._tool_calls
    monkeypatch.setattr(extract, "_content_text", lambda content: texts.append(1) or read_text(content))
    monkeypatch.setattr(extract, "_tool_calls", lambda message: calls.append(1) or read_calls(message))
    extract_facts(entries)
    messages = [e for e in entries if e.type == "message"]
    assistants = [e for e in messages if e.message.get("role") == "assistant"]
    assert len(messages) > 500, "the real session should be long enough to show a second pass"
    assert 0 < len(texts) <= len(messages)
    assert len(calls) == len(assistants)


def test_real_pi_degraded_capsule_is_much_smaller_than_the_history(pi_session: Path) -> None:
    entries, _, _ = _pi_entries(pi_session)
    capsule = deterministic_capsule(entries)
    history = sum(len(json.dumps(e.to_json())) for e in entries)
    rendered = render(capsule, checkpoint_id="ck_test", quality="degraded")
    assert len(rendered) < history / 20
    assert Capsule.from_json(capsule.to_json()) == capsule  # it validates as a stored capsule
