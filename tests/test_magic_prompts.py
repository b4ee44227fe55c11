"""What a ``%soba`` line means: a prompt ending in ``?`` reaches the agent verbatim (in a real
kernel, read back from the session transcript), and a mistyped subcommand or option is named
instead of being sent to the model as a prompt."""

from __future__ import annotations

import os
import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from jupyter_client import KernelManager
from test_magics import shell  # noqa: F401  (the magics' one shell fixture)

from soba_notebook.notebook import verbatim
from soba_notebook.session import SessionStore, list_sessions

REPO = Path(__file__).resolve().parents[1]


def _run(kc: Any, code: str, timeout: float = 120) -> tuple[dict[str, Any], str]:
    """Execute ``code``; its execute_reply content and the text it showed (streams, errors, displays)."""
    msg_id = kc.execute(code)
    shown: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        content = msg["content"]
        if msg["msg_type"] == "stream":
            shown.append(content["text"])
        elif msg["msg_type"] == "error":
            shown.append(f"{content['ename']}: {content['evalue']}")
        elif msg["msg_type"] in ("display_data", "execute_result"):
            shown.append(content["data"].get("text/plain", ""))
        elif msg["msg_type"] == "status" and content["execution_state"] == "idle":
            while True:
                reply = kc.get_shell_msg(timeout=10)
                if reply["parent_header"].get("msg_id") == msg_id:
                    return reply["content"], "".join(shown)
    raise TimeoutError(f"cell did not finish: {code[:60]}")


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[tuple[Any, Path]]:
    """A real kernel in an empty project (no config: the offline scripted model), extension loaded."""
    project = tmp_path / "project"
    project.mkdir()
    (tmp_path / "home").mkdir()
    km = KernelManager(kernel_name="python3")
    env = {**os.environ, "HOME": str(tmp_path / "home"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    km.start_kernel(cwd=str(project), env=env)
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        reply, shown = _run(kc, "%load_ext soba_notebook")
        assert reply["status"] == "ok", shown
        yield kc, project
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _prompts(project: Path) -> list[str]:
    """The user prompts of the project's one session, in order (cell-history notes left out)."""
    (info,) = list_sessions(project / ".soba" / "sessions")
    store = SessionStore.open(info.path)
    return [e.text for e in store.path() if e.role == "user" and e.data.get("source") != "cell_history"]


@pytest.mark.kernel
def test_prompts_ending_in_a_question_mark_reach_the_agent_verbatim_in_a_real_kernel(
        kernel: tuple[Any, Path]) -> None:
    kc, project = kernel
    for code in ("%soba what does greet.py print?", "%soba what's in greet.py??", "%%soba\nexplain this cell?",
                 "x = 1\n%soba what is x?"):
        reply, shown = _run(kc, code)
        assert reply["status"] == "ok", shown
        assert not reply.get("payload"), f"{code!r} opened IPython's help pager"
        assert "not found" not in shown and "Docstring" not in shown, shown
    assert _prompts(project) == ["what does greet.py print?", "what's in greet.py??", "explain this cell?",
                                 "what is x?"]

    reply, shown = _run(kc, '%capsule create "why?"')
    assert reply["status"] == "ok" and "created ck_" in shown, shown
    reply, shown = _run(kc, "%capsule create why not?")
    assert reply["status"] == "error" and "usage: %capsule create" in shown, "the magic read it, not the pager"
    reply, shown = _run(kc, "%compact what matters?")
    assert reply["status"] == "ok" and not reply.get("payload") and "not found" not in shown, shown

    reply, _ = _run(kc, "print?")
    assert "print(" in reply["payload"][0]["data"]["text/plain"], "ordinary help is unchanged"
    reply, _ = _run(kc, "%soba?")
    assert "Run one agent turn" in reply["payload"][0]["data"]["text/plain"], "%soba? is still its help"

    reply, shown = _run(kc, "%unload_ext soba_notebook")
    assert reply["status"] == "ok", shown
    reply, shown = _run(kc, "print(get_ipython().transform_cell('%soba where?'))")
    assert "pinfo" in shown, "unloading removed the transform"
    assert len(_prompts(project)) == 4


@pytest.mark.parametrize(("cell", "expected"), [
    ("%soba what does greet.py print?", "get_ipython().run_line_magic('soba', 'what does greet.py print?')\n"),
    ("%compact keep the parser??", "get_ipython().run_line_magic('compact', 'keep the parser??')\n"),
    ("if ready:\n    %soba go?\n", "if ready:\n    get_ipython().run_line_magic('soba', 'go?')\n"),
    ("%soba one \\\ntwo?", "get_ipython().run_line_magic('soba', 'one  two?')\n"),
    ("%soba?", "get_ipython().run_line_magic('pinfo', '%soba')\n"),
    ("%soba??", "get_ipython().run_line_magic('pinfo2', '%soba')\n"),
    ("len?", "get_ipython().run_line_magic('pinfo', 'len')\n"),
    ("%sobax y?", "get_ipython().run_line_magic('pinfo', 'y')\n"),
    ("%%soba\nis this verbatim?\n%soba and this?", "get_ipython().run_cell_magic('soba', '', "
                                                  "'is this verbatim?\\n%soba and this?\\n')\n"),
    ('s = """\n%soba inside a string?\n"""', 's = """\n%soba inside a string?\n"""\n'),
])
def test_only_our_magic_lines_ending_in_a_question_mark_are_rewritten(shell: InteractiveShell,  # noqa: F811
                                                                      cell: str, expected: str) -> None:
    assert shell.transform_cell(cell) == expected


def test_loading_twice_installs_the_transform_once_and_unloading_removes_it(shell: InteractiveShell  # noqa: F811
                                                                            ) -> None:
    transforms = shell.input_transformer_manager.line_transforms
    shell.run_line_magic("load_ext", "soba_notebook")
    assert transforms.count(verbatim.verbatim_magic_lines) == 1
    shell.run_line_magic("unload_ext", "soba_notebook")
    assert verbatim.verbatim_magic_lines not in transforms
    shell.run_line_magic("load_ext", "soba_notebook")  # the fixture unloads it again
