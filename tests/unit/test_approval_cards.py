"""What an approval card and the terminal prompt show before the answer, and what the transcript
keeps of it (issue 37, items 3, 10, 11, 12), on a real agent over the loopback server.

* Control characters in a command are shown as escapes, never acted on (one pure function for the
  terminal and the card), with a line that says the text holds some.
* A write's card shows the text before and after: the whole file for ``write_file`` and
  ``edit_file``, the cell's old and new source for ``notebook_edit`` replace and delete.
* A chain runs by session rules only when every program in it is covered; a program that runs
  whatever follows it is never a rule; a card that offers no session rule says why.
* ``views.transcript`` says, on each approval row, the verdict, who decided, what and why.

The same card and prompt in a real kernel and a real terminal: test_kernel_approval_cards.py.
"""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import nbformat
import pytest
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401

from soba_notebook import views
from soba_notebook.agent.approval import ApprovalRequest, Decision, Rule, no_rule_reason, shell_prefixes
from soba_notebook.notebook.approvals import PendingApproval, shown_request
from soba_notebook.visible import controls_note, visible_controls
from unit.test_approvals import Scripted, _agent, _calls

#: Shown on a terminal, this erases its line and returns to its start: it reads ``git status``.
SPOOF = "touch PWNED >/dev/null # \x1b[2K\rgit status"


# -- item 3: control characters made visible --------------------------------------------------------

def test_control_characters_are_shown_as_escapes_and_never_acted_on() -> None:
    assert visible_controls(SPOOF) == "touch PWNED >/dev/null # \\x1b[2K\\rgit status"
    assert visible_controls("rm -rf \u202eexe.txt") == "rm -rf \\u202eexe.txt"  # a bidi override
    assert visible_controls("a\u0085b\x9bc\x7f\u200b\u2066") == "a\\x85b\\x9bc\\x7f\\u200b\\u2066"  # C1, DEL, invisible
    assert visible_controls("line one\n\tline two ünïcode") == "line one\n\tline two ünïcode"  # text stays text
    note = controls_note(SPOOF) or ""
    assert "\\x1b" in note and "\\r" in note
    assert controls_note("git status") is None


def test_the_terminal_prompt_shows_a_spoofing_command_as_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    why = no_rule_reason("shell", {"command": SPOOF})
    request = ApprovalRequest("c1", "shell", SPOOF, None, (), 300.0, no_rule=why)
    pending = PendingApproval(request, "terminal")
    pending.show(stdin=io.StringIO("n no\n"))
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out
    assert "touch PWNED >/dev/null # \\x1b[2K\\rgit status" in out
    assert "Careful: it holds control characters" in out
    assert "No “Allow for this session”: it has a redirection" in out


def test_the_card_shows_every_text_with_its_control_characters_visible() -> None:
    from soba_notebook.notebook.approval_card import ApprovalCard

    rules = (Rule("edits", "notes\u202e.txt"),)
    request = ApprovalRequest("c1", "write_file", "notes\u202e.txt", "+x\x1b[31m\n", rules, 300.0)
    card = ApprovalCard(PendingApproval(request, "notebook"))
    shown = card.request
    assert shown == shown_request(request)
    assert shown["body"] == "notes\\u202e.txt" and shown["diff"] == "+x\\x1b[31m\n"
    assert shown["rule"] == "edits of notes\\u202e.txt"
    assert "\\u202e" in shown["controls"] and "\\x1b" in shown["controls"]
    assert not any(ch in json.dumps(shown, ensure_ascii=False) for ch in "\x1b\u202e")


# -- item 10: the text before and after, before the answer ---------------------------------------------

def _notebook(path: Path, *sources: str) -> list[str]:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(s) if s.startswith("#") else nbformat.v4.new_code_cell(s)
                for s in sources]
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell{i}"
    path.write_text(nbformat.writes(nb))
    return [cell["id"] for cell in nb.cells]


def test_a_replace_card_shows_the_cells_old_and_new_source_before_the_answer(tmp_path: Path,
                                                                              fake_server: FakeServer) -> None:
    approver = Scripted(Decision("deny", "keep it"), Decision("deny", "keep it"))
    agent = _agent(tmp_path, fake_server, approver)
    _notebook(agent.workspace / "a.ipynb", "# My analysis", "x = 41 + 1")
    fake_server.openai.enqueue(tool_calls=_calls(("c1", "notebook_edit", {
        "path": "a.ipynb", "action": "replace", "cell_id": "cell0", "source": "# My analysis (rewritten)"})))
    fake_server.openai.enqueue(tool_calls=_calls(("c2", "notebook_edit", {
        "path": "a.ipynb", "action": "delete", "cell_id": "cell1"})))
    fake_server.openai.enqueue(text="ok")
    asyncio.run(agent.run_turn("rewrite the heading, drop the sum"))
    replace, delete = (r.diff or "" for r in approver.asked)
    assert "--- a/a.ipynb cell cell0" in replace
    assert "-# My analysis\n" in replace and "+# My analysis (rewritten)\n" in replace
    assert "@@ -0,0" not in replace  # not shown as an insert
    assert "-x = 41 + 1\n" in delete and not [line for line in delete.splitlines()[2:] if line.startswith("+")]
    assert "My analysis (rewritten)" not in (agent.workspace / "a.ipynb").read_text()  # denied: nothing written


def test_a_notebook_edit_card_that_cannot_read_the_cell_says_why_and_shows_the_new_source(
        tmp_path: Path, fake_server: FakeServer) -> None:
    approver = Scripted(Decision("deny"))
    agent = _agent(tmp_path, fake_server, approver)
    _notebook(agent.workspace / "a.ipynb", "x = 1")
    fake_server.openai.enqueue(tool_calls=_calls(("c1", "notebook_edit", {
        "path": "a.ipynb", "action": "replace", "cell_id": "nosuch", "source": "y = 2"})))
    fake_server.openai.enqueue(text="ok")
    asyncio.run(agent.run_turn("edit"))
    diff = approver.asked[0].diff or ""
    assert diff.startswith("(the cell as it is now cannot be shown: no cell with id 'nosuch'")
    assert "+y = 2" in diff


def test_an_edit_file_card_shows_the_whole_files_diff_with_its_context(tmp_path: Path,
                                                                       fake_server: FakeServer) -> None:
    approver = Scripted(Decision("once"), Decision("deny"))
    agent = _agent(tmp_path, fake_server, approver)
    (agent.workspace / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    fake_server.openai.enqueue(tool_calls=_calls(("c1", "edit_file", {
        "path": "calc.py", "old": "a - b", "new": "a + b"})))
    fake_server.openai.enqueue(tool_calls=_calls(("c2", "edit_file", {
        "path": "calc.py", "old": "no such text", "new": "x"})))
    fake_server.openai.enqueue(text="ok")
    asyncio.run(agent.run_turn("fix"))
    found, missing = (r.diff or "" for r in approver.asked)
    assert " def add(a, b):\n" in found  # the context line around the change
    assert "-    return a - b\n" in found and "+    return a + b\n" in found
    assert missing.startswith("(old is not found exactly once in the file as it is now")
    assert (agent.workspace / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"


# -- item 11: what a session rule covers -------------------------------------------------------------

def test_a_chain_runs_by_session_rules_only_when_every_part_is_covered(tmp_path: Path,
                                                                        fake_server: FakeServer) -> None:
    """Allowing ``cd . && rm -f x`` for the session adds ``cd …`` and ``rm …``: a later chain of
    only those runs unasked, one with any other program asks (README "Approvals" says so)."""
    approver = Scripted(Decision("session", rules=(Rule("shell", "cd"), Rule("shell", "rm"))), Decision("deny"))
    agent = _agent(tmp_path, fake_server, approver)
    ws = agent.workspace
    for name in ("x", "y", "z"):
        (ws / name).write_text(name)
    fake_server.openai.enqueue(tool_calls=_calls(("c1", "shell", {"command": "cd . && rm -f x"})))
    fake_server.openai.enqueue(tool_calls=_calls(("c2", "shell", {"command": "cd . ; rm -f y"})))
    fake_server.openai.enqueue(tool_calls=_calls(("c3", "shell", {"command": "rm -f z && touch w"})))
    fake_server.openai.enqueue(text="done")
    asyncio.run(agent.run_turn("clean"))
    assert approver.asked[0].rule_text == "shell: cd …, shell: rm …"
    assert [r.body for r in approver.asked] == ["cd . && rm -f x", "rm -f z && touch w"]
    assert not (ws / "x").exists() and not (ws / "y").exists() and (ws / "z").exists() and not (ws / "w").exists()


@pytest.mark.parametrize("command", [
    "sudo rm -rf /tmp/x", "env rm x", "bash -c 'rm x'", "xargs rm < list", "if true; then rm x; fi",
    "for f in *; do rm $f; done", "find . -delete", "timeout 5 rm x", "nohup rm x"])
def test_a_program_that_runs_any_command_is_never_a_session_rule_and_the_card_says_why(command: str) -> None:
    assert shell_prefixes(command) is None
    reason = no_rule_reason("shell", {"command": command})
    assert reason.startswith("No “Allow for this session”: ") and "\n" not in reason


@pytest.mark.parametrize(("tool", "args", "why"), [
    ("shell", {"command": "ls > files.txt"}, "redirection"),
    ("shell", {"command": "FOO=1 make"}, "environment assignment"),
    ("shell", {"command": "echo 'unclosed"}, "quoting"),
    ("write_file", {"path": "../outside.txt"}, "not inside the workspace"),
    ("notebook_edit", {"action": "delete", "cell_id": "a"}, "no path was given"),
])
def test_a_card_that_offers_no_session_rule_says_why_in_one_line(tool: str, args: dict[str, Any], why: str) -> None:
    reason = no_rule_reason(tool, args)
    assert why in reason and "\n" not in reason
    assert no_rule_reason("shell", {"command": "git status"}) == ""  # a rule is offered: nothing to say


# -- item 12: who approved what, in views.transcript ----------------------------------------------------

def test_approval_rows_in_views_transcript_say_the_verdict_who_decided_the_subject_and_the_reason(
        tmp_path: Path, fake_server: FakeServer) -> None:
    approver = Scripted(Decision("session", rules=(Rule("shell", "touch"),)), Decision("deny", "not that folder"))
    agent = _agent(tmp_path, fake_server, approver)
    fake_server.openai.enqueue(tool_calls=_calls(("c1", "shell", {"command": "touch a"})))
    fake_server.openai.enqueue(tool_calls=_calls(("c2", "shell", {"command": "touch b"})))
    fake_server.openai.enqueue(tool_calls=_calls(("c3", "shell", {"command": "mkdir c"})))
    fake_server.openai.enqueue(text="done")
    asyncio.run(agent.run_turn("files"))
    df = views.transcript(agent.store)
    rows = df[df.type == "approval"]
    assert [list(r) for r in rows[["tool_name", "verdict", "decided_by", "subject"]].itertuples(index=False)] == [
        ["shell", "session", "user", "touch a"], ["shell", "once", "rule", "touch b"],
        ["shell", "deny", "user", "mkdir c"]]
    assert list(rows.reason.fillna("")) == ["", "allowed by a session rule", "not that folder"]
    assert rows.detail.iloc[0] == "adds shell: touch …"
    assert str(df.verdict.dtype) == "category" and df[df.type != "approval"].verdict.isna().all()
