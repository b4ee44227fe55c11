"""The background cell's board: everything a background turn shows, in ONE display made in its
own cell and updated in place (issue 20 item 4; the real kernel test is test_kernel_background_cell)."""

from __future__ import annotations

from typing import Any

from soba_notebook.events import Event
from soba_notebook.notebook.board import MIN_INTERVAL, CellBoard
from soba_notebook.notebook.live import CellRenderer


class Display:
    """A stand-in for IPython's ``display``: records what each display id shows, in order."""

    def __init__(self) -> None:
        self.made: list[str] = []
        self.sent: list[dict[str, str]] = []

    def __call__(self, obj: Any, **kwargs: Any) -> Any:
        assert kwargs.get("display_id") is True, "the board makes exactly one display, with an id"
        self.made.append("board")
        self.sent.append(dict(obj))
        display = self

        class Handle:
            display_id = "board-1"

            def update(self, bundle: Any, **_kwargs: Any) -> None:
                display.sent.append(dict(bundle))

        return Handle()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _turn(renderer: CellRenderer) -> None:
    for event in (Event("turn_start", {}, 1.0), Event("request_start", {"model": "m"}, 1.0),
                  Event("message_delta", {"text": "I will read it."}, 1.5),
                  Event("tool_start", {"name": "read_file", "arguments": {"path": "greet.py"}}, 2.0),
                  Event("tool_end", {"name": "read_file", "content": "print('hi')"}, 2.5),
                  Event("turn_end", {"outcome": "completed"}, 3.0)):
        renderer.handle(event)


def test_a_background_turn_is_one_display_whose_parts_keep_their_order_and_change_in_place() -> None:
    display, clock = Display(), Clock()
    board = CellBoard(display=display, clock=clock)
    renderer = CellRenderer("widget", display=board.display, clock=lambda: 3.0)
    _turn(renderer)
    renderer.finish(None)
    board.flush()
    assert display.made == ["board"], "every part went into the one display"
    final = display.sent[-1]
    text = final["text/plain"]
    assert text.index("I will read it.") < text.index("read_file"), text
    assert "waiting for" not in text, "the live line's place was taken by what came next"
    assert final["text/html"].count("data-soba-tool") == 1
    assert "soba-reply" in final["text/html"], "the streamed reply is in the HTML too"


def test_the_board_is_resent_at_most_every_interval_and_its_last_state_always_arrives() -> None:
    display, clock = Display(), Clock()
    board = CellBoard(display=display, clock=clock)
    parts = [board.display({"text/plain": f"line {i}", "text/html": f"<p>line {i}</p>"}) for i in range(5)]
    assert len(display.sent) == 2, "the placeholder, then one send: the rest waits for the interval"
    parts[0].update({"text/plain": "line 0 changed", "text/html": "<p>line 0 changed</p>"})
    clock.now += MIN_INTERVAL
    board.tick()
    assert len(display.sent) == 3 and display.sent[-1]["text/plain"].startswith("line 0 changed\nline 1")
    board.flush()
    assert len(display.sent) == 3, "nothing changed since: nothing is sent"
    parts[4].update({"text/plain": "", "text/html": ""})
    board.flush()
    assert display.sent[-1]["text/plain"].endswith("line 3"), "an emptied part leaves nothing behind"


def test_a_background_reply_is_drawn_as_markdown_like_a_foreground_one_and_its_raw_html_stays_text() -> None:
    display = Display()
    board = CellBoard(display=display, clock=Clock())
    renderer = CellRenderer("widget", display=board.display, clock=lambda: 1.0)
    for event in (Event("turn_start", {}, 1.0),
                  Event("message_delta", {"text": "**I will not do what you asked.** See `calc_demo/` "
                                                  "<script>alert(1)</script>"}, 1.0),
                  Event("turn_end", {"outcome": "completed"}, 1.0)):
        renderer.handle(event)
    renderer.finish(None)
    board.flush()
    html_out = display.sent[-1]["text/html"]
    # the screenshot of a background cell showed the asterisks and backticks as typed
    assert "<strong>I will not do what you asked.</strong>" in html_out and "<code>calc_demo/</code>" in html_out
    assert "**" not in html_out and "<script>" not in html_out and "&lt;script&gt;" in html_out
