"""A real kernel: a background turn's output lands in the cell that started it (issue 20 item 4).

``%%soba --background`` on the offline model, and at once a second ``%soba`` cell: the kernel runs
the second cell while the first turn still works. Every message is attributed by its
``parent_header`` (the cell that sent it) and, for display updates, by its ``display_id`` (the cell
that made that display). The first turn's tool blocks and summary are in the first cell; the
second cell shows only its own turn.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernel_support import Kernel

from soba_notebook.session import SessionStore, list_sessions

#: the offline model streams slowly enough that its first turn is still running when the second
#: cell starts (it sleeps between stream events: no CPU)
SLOW_OFFLINE_MODEL = """\
from soba_notebook.demo.scripted import ScriptedModel
from soba_notebook.notebook import current
current().ensure().agent.provider = ScriptedModel(stream_delay=0.03)
"""


class RecordingKernel(Kernel):
    """A :class:`Kernel` that also keeps every iopub message it reads, in order."""

    def __init__(self, project: Path, home: Path) -> None:
        self.messages: list[dict[str, Any]] = []
        super().__init__(project, home)
        read = self.kc.get_iopub_msg

        def recording(*args: Any, **kwargs: Any) -> dict[str, Any]:
            msg = read(*args, **kwargs)
            self.messages.append(msg)
            return msg

        self.kc.get_iopub_msg = recording  # type: ignore[method-assign]

    def read_until(self, done: Callable[[], bool], timeout: float = 120) -> None:
        """Keep reading the kernel's messages until ``done()`` (a background turn's last update)."""
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError("the kernel never sent what was waited for")
            self._pump()


def _displays(messages: list[dict[str, Any]]) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """Which cell made each display id, and each display's last content."""
    made_by: dict[str, str] = {}
    last: dict[str, dict[str, str]] = {}
    for msg in messages:
        if msg["msg_type"] not in ("display_data", "update_display_data"):
            continue
        display_id = msg["content"].get("transient", {}).get("display_id")
        if display_id is None:
            continue
        if msg["msg_type"] == "display_data":
            made_by.setdefault(display_id, msg["parent_header"]["msg_id"])
        last[display_id] = msg["content"]["data"]
    return made_by, last


def _cell_html(cell: str, messages: list[dict[str, Any]]) -> str:
    """Everything a cell shows at the end: its displays' last states and its other outputs."""
    made_by, last = _displays(messages)
    shown = [last[d].get("text/html", last[d].get("text/markdown", "")) for d, c in made_by.items() if c == cell]
    for msg in messages:
        if msg["parent_header"].get("msg_id") != cell:
            continue
        if msg["msg_type"] == "display_data" and not msg["content"].get("transient", {}).get("display_id"):
            shown.append(msg["content"]["data"].get("text/html", ""))
        elif msg["msg_type"] == "stream":
            shown.append(msg["content"]["text"])
    return "\n".join(shown)


def _tool_results_per_turn(store: SessionStore) -> list[int]:
    counts: list[int] = []
    for entry in store.path():
        if entry.role == "user" and entry.message.get("source") != "cell_history":
            counts.append(0)
        elif entry.role == "tool" and counts:
            counts[-1] += 1
    return counts


def test_a_background_turn_shows_everything_in_its_own_cell_and_the_queued_cell_only_its_own_turn(
        tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    kernel = RecordingKernel(project, tmp_path / "home")
    try:
        status, text = kernel.run(SLOW_OFFLINE_MODEL)
        assert status == "ok", text
        first = kernel.submit("%%soba --background\nbuild the calculator")
        second = kernel.submit("%soba now read greet.py")
        assert kernel.wait(first)[0] == "ok"
        assert kernel.wait(second)[0] == "ok"
        kernel.read_until(lambda: "After this turn" in _cell_html(first, kernel.messages))
    finally:
        kernel.close()
    messages = kernel.messages
    made_by, _ = _displays(messages)
    first_displays = [d for d, cell in made_by.items() if cell == first]
    assert first_displays, "the background cell made its display while it ran"

    # every update of a display goes to the cell that made it, and comes from that cell's context
    for msg in messages:
        display_id = msg["content"].get("transient", {}).get("display_id")
        if msg["msg_type"] == "update_display_data" and made_by.get(display_id) == first:
            assert msg["parent_header"]["msg_id"] == first

    sessions = list_sessions(project / ".soba" / "sessions")
    assert len(sessions) == 1
    tools = _tool_results_per_turn(SessionStore.open(sessions[0].path))
    assert len(tools) == 2 and tools[0] > 0, tools
    first_shows, second_shows = _cell_html(first, messages), _cell_html(second, messages)
    assert first_shows.count("data-soba-tool") == tools[0], "each of the first turn's tool blocks, in its cell"
    assert second_shows.count("data-soba-tool") == tools[1], "the queued cell shows its own tool blocks only"
    assert first_shows.count("After this turn") == 1 and second_shows.count("After this turn") == 1
    assert "running in the background" in first_shows and "running in the background" not in second_shows
    assert re.search(r"queued: 1 turn\(s\) ahead", second_shows), "the second cell did wait for the first turn"
