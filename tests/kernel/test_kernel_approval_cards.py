"""What a person sees before answering, in a real kernel and a real terminal IPython (issue 37,
items 3 and 10): a command built to read as another (``ESC[2K`` erases the line, ``CR`` returns to
its start, so ``touch PWNED … # ESC[2K CR git status`` shows ``git status``) is shown with its
control characters as escapes, on the card and on the terminal prompt; a card for replacing a
cell shows the cell's old source and its new one before the answer. The helpers (a kernel that
answers cards as JupyterLab does, IPython in a pseudo-terminal) are test_kernel_approvals.py's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import pexpect
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401

from kernel import test_kernel_approvals
from kernel.test_kernel_approvals import _follow, _ipython, _project, _tool_results

started = test_kernel_approvals.started  # the fixture: a kernel on a project whose model is the loopback server

SPOOF = "touch PWNED >/dev/null # \x1b[2K\rgit status"
SHOWN = "touch PWNED >/dev/null # \\x1b[2K\\rgit status"


def _shell(server: FakeServer, command: str) -> None:
    server.openai.enqueue(tool_calls=[{"id": "c1", "name": "shell", "arguments": {"command": command}}])
    server.openai.enqueue(text="done")


def test_a_spoofing_command_reads_as_itself_on_the_terminal_prompt(tmp_path: Path, fake_server: FakeServer) -> None:
    project = _project(tmp_path, fake_server)
    _shell(fake_server, SPOOF)
    child = _ipython(project, tmp_path / "home")
    try:
        child.sendline("%soba check the status")
        child.expect("SOBA asks to run shell:")
        child.expect(r"\[y\] allow once, \[n\] deny.*\? ")
        asked = child.before
        child.sendline("n")
        child.expect("Denied")
        child.expect(r"In \[3\]: ")
    finally:
        child.sendline("exit")
        child.expect(pexpect.EOF)
    assert SHOWN in asked and "\x1b[2K" not in asked
    assert "Careful: it holds control characters, shown here as escapes and not acted on: \\x1b, \\r" in asked
    assert "No “Allow for this session”: it has a redirection" in asked
    assert not (project / "PWNED").exists()


def test_a_spoofing_command_reads_as_itself_on_a_card_in_a_kernel(started: Any, fake_server: FakeServer) -> None:
    kernel, project = started()
    _shell(fake_server, SPOOF)
    seen = _follow(kernel, kernel.submit("%soba check the status"), [{"answer": "deny", "reason": "spoof"}])
    (card,) = seen.cards
    assert card["body"] == SHOWN
    assert card["controls"].startswith("Careful: it holds control characters")
    assert card["rule"] == "" and card["no_rule"].startswith("No “Allow for this session”: it has a redirection")
    assert not (project / "PWNED").exists()
    assert _tool_results(project)[-1] == "denied by the user: spoof"


def test_a_replace_card_in_a_kernel_shows_the_cells_old_and_new_source_before_the_answer(
        started: Any, fake_server: FakeServer) -> None:
    kernel, project = started()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# My analysis"), nbformat.v4.new_code_cell("x = 41 + 1")]
    nb.cells[0]["id"], nb.cells[1]["id"] = "head", "sum"
    (project / "live.ipynb").write_text(nbformat.writes(nb))
    fake_server.openai.enqueue(tool_calls=[{"id": "c1", "name": "notebook_edit", "arguments": {
        "path": "live.ipynb", "action": "replace", "cell_id": "head",
        "source": "# My analysis (heading rewritten by the agent)"}}])
    fake_server.openai.enqueue(text="done")
    seen = _follow(kernel, kernel.submit("%soba rewrite the heading"), [{"answer": "deny", "reason": "keep"}])
    (card,) = seen.cards
    assert "-# My analysis\n" in card["diff"] and "+# My analysis (heading rewritten by the agent)\n" in card["diff"]
    assert "--- a/live.ipynb cell head" in card["diff"]
    assert "heading rewritten" not in (project / "live.ipynb").read_text()
