"""A ``%soba`` prompt ending in ``?`` reaches the agent verbatim in a real kernel (read back from the
session transcript), not IPython's help pager; the kernel-free rules of a ``%soba`` line are in
``tests/unit/test_magic_prompts.py``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kernel_support import Kernel, run_cell

from soba_notebook.session import SessionStore, list_sessions


def _run(kc: Any, code: str, timeout: float = 120) -> tuple[dict[str, Any], str]:
    """Execute ``code``; its execute_reply content and the text it showed (streams, errors, displays)."""
    reply, messages = run_cell(kc, code, timeout)
    shown: list[str] = []
    for msg in messages:
        content = msg["content"]
        if msg["msg_type"] == "stream":
            shown.append(content["text"])
        elif msg["msg_type"] == "error":
            shown.append(f"{content['ename']}: {content['evalue']}")
        elif msg["msg_type"] in ("display_data", "execute_result"):
            shown.append(content["data"].get("text/plain", ""))
    return reply, "".join(shown)


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[tuple[Any, Path]]:
    """A real kernel in an empty project (no config: the offline scripted model), extension loaded."""
    project = tmp_path / "project"
    project.mkdir()
    running = Kernel(project, tmp_path / "home")
    try:
        yield running.kc, project
    finally:
        running.close()


def _prompts(project: Path) -> list[str]:
    """The user prompts of the project's one session, in order (cell-history notes left out)."""
    (info,) = list_sessions(project / ".soba" / "sessions")
    store = SessionStore.open(info.path)
    return [e.text for e in store.path() if e.role == "user" and e.message.get("source") != "cell_history"]


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
