"""Issue 37, item 1: a sandboxed command cannot get code run in the kernel by planting a module.

The sandboxed ``shell`` may write the workspace, which is the kernel's working directory and first on
its ``sys.path``. What a command leaves there that import would find is reviewed after it (kept only
when nothing asks or the user keeps it; otherwise moved to ``.soba/quarantine/<call id>/`` and the
earlier content restored), and SOBA's own lazy imports never load from there. Real bwrap on real
files; the person answering a card is the one boundary stubbed (a fixed answer); the kernel test
(``tests/kernel/test_sandbox_imports_kernel.py``) runs a real background cell that renders a real reply.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401

from soba_notebook.agent.approval import ApprovalRequest, Decision
from soba_notebook.agent.approval_gate import ApprovalGate
from soba_notebook.agent.import_guard import import_roots
from soba_notebook.agent.tools import ToolContext, ToolOutcome, default_tools
from soba_notebook.cancel import CancelToken
from soba_notebook.config import ToolsConfig
from soba_notebook.session.entries import Entry, ToolCall
from unit.test_sandbox import bwrap  # noqa: F401  (the fixture: bwrap present and usable, or skip/fail as there)

UPPER_BOUND_SEC = 60  # only ever a cap on a wait, never an expectation
PLANT = "import pathlib; pathlib.Path({marker!r}).write_text('planted code ran')\n"


class Answer:
    """The person at the notebook, answering every card the same way and keeping what was asked."""

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        self.asked: list[ApprovalRequest] = []

    async def ask(self, request: ApprovalRequest, cancel: CancelToken) -> Decision:
        self.asked.append(request)
        return self.decision


def _run_reviewed(ws: Path, command: str, config: ToolsConfig, approver: Any) -> tuple[ToolOutcome, list[Entry]]:
    """Run ``command`` as the agent loop does a sandboxed call (with the kernel's cwd = ``ws``)."""
    entries: list[Entry] = []
    gate = ApprovalGate(ws, lambda: config, entries.append, approver)
    call = ToolCall("call/1", "shell", {"command": command})

    async def go() -> ToolOutcome:
        outcome = await default_tools(config).run("shell", call.arguments, ToolContext(ws, config))
        return await gate.review(call, outcome, CancelToken())

    here, path = os.getcwd(), list(sys.path)
    os.chdir(ws)  # as in a kernel: '' first on sys.path, and the cwd is the workspace
    sys.path.insert(0, "")
    try:
        return asyncio.run(asyncio.wait_for(go(), UPPER_BOUND_SEC)), entries
    finally:
        os.chdir(here)
        sys.path[:] = path


PLANTING = "cat > mistune.py <<'X'\nprint('planted')\nX\nmkdir yaml && touch yaml/__init__.py " \
           "&& echo x >> helpers.py && echo 'import os' > evil.pth && mkdir -p __pycache__ " \
           "&& touch __pycache__/helpers.cpython-311.pyc " \
           "&& echo notes >> notes.txt && mkdir -p pkg && echo y >> pkg/sub.py"


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "pkg").mkdir(parents=True)
    (ws / "pkg" / "__init__.py").write_text("")
    (ws / "helpers.py").write_text("VALUE = 1\n")
    (ws / "notes.txt").write_text("n\n")
    return ws


def test_import_roots_are_the_sys_path_directories_inside_the_workspace_with_empty_meaning_the_cwd(
        tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    (ws / "src").mkdir()
    roots = import_roots(ws, ["", "src", str(tmp_path), "/usr/lib/python3"], cwd=str(ws))
    assert roots == (ws.resolve(), (ws / "src").resolve())


@pytest.mark.parametrize("decision", [Decision("deny", "no", by="user"), Decision("timeout", by="timeout")])
def test_sandboxed_planted_module_is_rolled_back_into_quarantine_when_not_kept(
        bwrap: str, tmp_path: Path, decision: Decision) -> None:  # noqa: F811
    ws = _workspace(tmp_path)
    approver = Answer(decision)
    outcome, entries = _run_reviewed(ws, PLANTING, ToolsConfig(sandbox="bwrap", sandbox_skips_approval=True),
                                     approver)
    (asked,) = approver.asked
    assert "mistune.py (new)" in asked.body and "helpers.py (changed)" in asked.body and "print('planted')" in \
        (asked.diff or "")
    assert not (ws / "mistune.py").exists() and not (ws / "yaml").exists() and not (ws / "evil.pth").exists()
    assert not (ws / "__pycache__" / "helpers.cpython-311.pyc").exists()
    assert (ws / "helpers.py").read_text() == "VALUE = 1\n", "a changed module gets its earlier content back"
    quarantine = ws / ".soba" / "quarantine" / "call_1"
    assert (quarantine / "mistune.py").read_text() == "print('planted')\n"  # nothing lost
    assert (quarantine / "yaml" / "__init__.py").exists() and (quarantine / "helpers.py").read_text() == \
        "VALUE = 1\nx\n"
    assert (ws / "notes.txt").read_text() == "n\nnotes\n" and (ws / "pkg" / "sub.py").read_text() == "y\n", \
        "only what import finds at the top of a sys.path directory is reviewed"
    last = outcome.content.splitlines()[-1]
    assert last.startswith(f"[rolled back ({decision.verdict}") and "mistune.py: moved to .soba/quarantine" in last
    assert [e.data["verdict"] for e in entries] == [decision.verdict]


def test_sandboxed_planted_module_kept_when_the_user_keeps_it_and_under_never_named_in_the_result(
        bwrap: str, tmp_path: Path) -> None:  # noqa: F811
    ws = _workspace(tmp_path)
    outcome, _ = _run_reviewed(ws, "echo 'print(1)' > mistune.py", ToolsConfig(sandbox="bwrap"),
                               Answer(Decision("once")))
    assert (ws / "mistune.py").exists() and outcome.content.splitlines()[-1] == \
        "[kept (allowed by the user): mistune.py (new)]"
    (ws / "mistune.py").unlink()
    asked = Answer(Decision("deny"))
    outcome, _ = _run_reviewed(ws, "echo 'print(1)' > mistune.py", ToolsConfig(sandbox="bwrap", approval="never"),
                               asked)
    assert asked.asked == [] and (ws / "mistune.py").exists()
    assert outcome.content.splitlines()[-1].startswith("[kept (approval never): this command left code Python in "
                                                       "this kernel would import: mistune.py (new)]")


def test_a_sandboxed_command_that_leaves_nothing_importable_asks_nothing_after(bwrap: str, tmp_path: Path) -> None:  # noqa: F811
    ws = _workspace(tmp_path)
    approver = Answer(Decision("deny"))
    outcome, entries = _run_reviewed(ws, "echo more >> notes.txt; rm helpers.py", ToolsConfig(sandbox="bwrap"),
                                     approver)
    assert approver.asked == [] and entries == [] and outcome.content.splitlines()[-1] == "[exit code 0]"


_TRUSTED = """
import sys
from soba_notebook.trusted_import import trusted_import
sys.path.insert(0, '')
try:
    mod = trusted_import({name!r})
    print("LOADED", getattr(mod, "__file__", None))
except ImportError as exc:
    print("REFUSED", exc)
"""


def test_trusted_import_never_loads_a_module_planted_in_the_cwd_and_refuses_one_only_found_there(
        tmp_path: Path) -> None:
    marker = tmp_path / "ran.txt"
    (tmp_path / "colorsys.py").write_text(PLANT.format(marker=str(marker)))  # shadows a stdlib module
    (tmp_path / "only_here_xyz.py").write_text(PLANT.format(marker=str(marker)))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

    def run(code: str) -> str:
        return subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path, capture_output=True, text=True,
                              env=env, timeout=UPPER_BOUND_SEC, check=True).stdout

    # -I drops PYTHONPATH: add it back by hand, after the '' the snippet puts first
    head = f"import sys; sys.path.append({env['PYTHONPATH']!r})\n"
    assert "LOADED" in (out := run(head + _TRUSTED.format(name="colorsys"))) and str(tmp_path) not in out, out
    assert "REFUSED" in (out := run(head + _TRUSTED.format(name="only_here_xyz"))) and "working directory" in out
    assert not marker.exists(), "the planted module ran"
    plain = run(head + "import sys; sys.path.insert(0, ''); import only_here_xyz")  # the test could fail
    assert marker.exists(), plain


# -- a real kernel, a real background cell, a real render ------------------------------------------
