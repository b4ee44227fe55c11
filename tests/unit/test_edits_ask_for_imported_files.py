"""Under approval "edits", a write to a file Python in this kernel would import asks (issue 37).

"edits" lets writes in the workspace run without a card, but a ``write_file`` of ``mistune.py`` in
the kernel's working directory (first on its ``sys.path``) is code the kernel itself runs at the next
``import mistune``, unsandboxed. Such a write asks as under "ask", with a line saying why; the files
that count are the ones the sandbox's review looks at (:mod:`soba_notebook.agent.import_guard`).
Real files in a real workspace that is the process's cwd with ``''`` on ``sys.path``; the person
answering is the one boundary stubbed.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from soba_notebook.agent.approval import ApprovalRequest, Decision, needs_approval
from soba_notebook.agent.approval_gate import ApprovalGate
from soba_notebook.agent.import_guard import import_reason, import_roots, take
from soba_notebook.cancel import CancelToken
from soba_notebook.config import ToolsConfig
from soba_notebook.notebook.approvals import shown_request
from soba_notebook.session.entries import Entry, ToolCall

UPPER_BOUND_SEC = 30  # only ever a cap on a wait, never an expectation


class Answer:
    """The person at the notebook: denies every card and keeps what was asked."""

    def __init__(self) -> None:
        self.asked: list[ApprovalRequest] = []

    async def ask(self, request: ApprovalRequest, cancel: CancelToken) -> Decision:
        self.asked.append(request)
        return Decision("deny")


@pytest.fixture
def ws(tmp_path: Path) -> Iterator[Path]:
    """A workspace that is the cwd, with ``''`` and ``src`` on ``sys.path`` (as a kernel started there)."""
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "lib").mkdir()
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    here, path = os.getcwd(), list(sys.path)
    os.chdir(root)
    sys.path[:0] = ["", str(root / "src")]
    try:
        yield root
    finally:
        os.chdir(here)
        sys.path[:] = path


def _asked(ws: Path, tool: str, path: str, mode: str = "edits") -> list[ApprovalRequest]:
    answer = Answer()
    entries: list[Entry] = []
    gate = ApprovalGate(ws, lambda: ToolsConfig(approval=mode), entries.append, answer)
    arguments = {"path": path, "content": "x = 1\n"} if tool == "write_file" else {"path": path, "old": "a", "new": "b"}
    asyncio.run(asyncio.wait_for(gate.check(ToolCall("c1", tool, arguments), CancelToken()), UPPER_BOUND_SEC))
    return answer.asked


IMPORTED = ["mistune.py", "sitecustomize.py", "usercustomize.py", "evil.pth", "yaml/__init__.py", "pkg/__init__.py",
            "__pycache__/helpers.cpython-311.pyc", "pkg/__pycache__/__init__.cpython-311.pyc", "src/requests.py",
            "src/yaml/__init__.py", "fast.cpython-311-x86_64-linux-gnu.so"]
NOT_IMPORTED = ["notes.txt", "pkg/sub.py", "lib/mistune.py", "analysis.ipynb", "data/x.py", "README.md"]


@pytest.mark.parametrize("path", IMPORTED)
def test_under_edits_a_write_to_a_file_this_kernel_imports_asks_saying_why(ws: Path, path: str) -> None:
    (asked,) = _asked(ws, "write_file", path)
    assert asked.why.startswith(f"Asks under approval “edits”: Python in this kernel would import {path}: "), asked.why
    assert "on this kernel's sys.path" in asked.why
    assert shown_request(asked)["why"] == asked.why  # the card and the terminal prompt show it
    (asked,) = _asked(ws, "edit_file", path)
    assert asked.why


@pytest.mark.parametrize("path", NOT_IMPORTED)
def test_under_edits_a_write_python_would_not_import_still_runs_without_asking(ws: Path, path: str) -> None:
    assert _asked(ws, "write_file", path) == []
    assert _asked(ws, "edit_file", path) == []


def test_under_ask_every_write_asks_and_the_card_needs_no_extra_line(ws: Path) -> None:
    (asked,) = _asked(ws, "write_file", "mistune.py", mode="ask")
    assert asked.why == ""
    assert _asked(ws, "write_file", "mistune.py", mode="never") == []


def test_a_module_link_counts_by_its_name_wherever_it_points(ws: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere.txt").write_text("")
    (ws / "helper.py").symlink_to(tmp_path / "elsewhere.txt")  # import helper loads the link's target
    (asked,) = _asked(ws, "write_file", "helper.py")
    assert "would import helper.py: a top-level module in the workspace's top folder" in asked.why


def test_needs_approval_under_edits_asks_for_a_write_the_caller_says_is_imported_here() -> None:
    args = {"path": "mistune.py", "content": ""}
    assert not needs_approval("edits", "none", (), "write_file", args)
    assert needs_approval("edits", "none", (), "write_file", args, imported_here=True)
    assert not needs_approval("never", "none", (), "write_file", args, imported_here=True)


def test_an_edit_asks_for_exactly_the_files_the_sandbox_review_looks_at(ws: Path) -> None:
    """One classification: every file the review after a sandboxed command would find is one a
    write under "edits" asks about, and the review finds none of the files an edit may write unasked."""
    for path in IMPORTED + NOT_IMPORTED:
        (ws / path).parent.mkdir(parents=True, exist_ok=True)
        (ws / path).write_text("")
    roots = import_roots(ws)
    found = {os.path.relpath(p, ws) for p in take(ws, keep=False, roots=roots).stamps}
    assert found == {p for p in IMPORTED + NOT_IMPORTED if import_reason(ws / p, roots, ws)}
    assert found == set(IMPORTED)


@pytest.mark.parametrize("path", ["bad\0dir/x.py", "x\0.py", "a" * 5_000 + "/x.py"])
def test_a_path_no_file_can_have_is_no_crash_of_the_gate(ws: Path, path: str) -> None:
    assert _asked(ws, "write_file", path) == []  # the tool itself refuses it, naming the path
