"""A background job's cell output: ONE display, made while its cell runs, updated in place.

Why it exists: a ``%%soba --background`` cell returns at once, and the kernel goes on to run other
cells while the turn works. Output *appended* later would go to whichever cell runs then (or be
dropped by a frontend that closed the finished cell's request); an *update* of a display made in
the background cell reaches that cell in every frontend, whatever runs meanwhile (the message
names its ``display_id``, and frontends route it to the output that showed that id).

So :class:`CellBoard` is the display function a :class:`~.live.CellRenderer` draws with for a
background job: every output the renderer would append (the streamed reply, each tool block, the
live line, the cell's summary) becomes a *part* of the board, and the board's one display shows
all parts, in order, in HTML and in text/plain. Parts change in place as the renderer updates
them. Re-sending the whole board is throttled (:data:`MIN_INTERVAL`; :meth:`CellBoard.tick`
sends what is pending, :meth:`CellBoard.flush` at once). Thread-safe.
"""

from __future__ import annotations

import html
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..trusted_import import trusted_import
from . import cellview

__all__ = ["MIN_INTERVAL", "CellBoard", "reply_html"]

#: The fewest seconds between two re-sends of the board (the last state is always sent).
MIN_INTERVAL = 0.3

_TEXT_STYLE = "margin:4px 0"


def reply_html(text: str) -> str:
    """The model's markdown reply as HTML for the board (a foreground cell shows it through the
    front end's markdown renderer; the board's one HTML display must render it itself). Raw HTML in
    the reply is escaped, never passed through: a reply is data. Without ``mistune`` (it comes with
    Jupyter's nbconvert and is a dependency here) the words are shown as written."""
    try:
        mistune = trusted_import("mistune")
    except ImportError:  # absent, or only where a sandboxed command could have planted it
        return f"<div style='white-space:pre-wrap'>{html.escape(text)}</div>"
    return str(mistune.create_markdown(escape=True)(text))

Bundle = Mapping[str, str]


class _Part:
    """The handle the renderer gets back for one part (what ``display(..., display_id=True)`` returns)."""

    def __init__(self, board: CellBoard, index: int) -> None:
        self._board, self._index = board, index

    def update(self, obj: Any, **_kwargs: Any) -> None:
        self._board.set_part(self._index, obj)


class CellBoard:
    """Parts shown as one display in the cell that made the board (module docstring).

    ``display`` defaults to IPython's ``display``; ``clock`` to :func:`time.monotonic`.
    """

    def __init__(self, first: str = "starting in the background", *, display: Callable[..., Any] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._parts: list[dict[str, str]] = []
        self._clock = clock
        self._sent_at = -1e18
        self._pending = False
        placeholder = cellview.activity(first)
        show = display or _ipython_display
        # made now, on the kernel thread while the cell runs: the display the board updates later
        self._handle = show({"text/html": placeholder.html, "text/plain": placeholder.text}, raw=True,
                            display_id=True)

    @property
    def display_id(self) -> str | None:
        return getattr(self._handle, "display_id", None)

    def display(self, obj: Any, **kwargs: Any) -> _Part:
        """The renderer's ``display``: a new part (raw bundles, as :class:`~.live.CellRenderer` sends)."""
        with self._lock:
            self._parts.append(_bundle(obj))
            index = len(self._parts) - 1
            self._pending = True
        self.tick()
        return _Part(self, index)

    def set_part(self, index: int, obj: Any) -> None:
        with self._lock:
            self._parts[index] = _bundle(obj)
            self._pending = True
        self.tick()

    def tick(self) -> None:
        """Send the board if it changed and the last send is :data:`MIN_INTERVAL` old."""
        self._send(force=False)

    def flush(self) -> None:
        """Send the board now if it changed (the job ended)."""
        self._send(force=True)

    def text(self) -> str:
        """The board as text/plain, as last composed (for terminals and tests)."""
        with self._lock:
            return self._compose()["text/plain"]

    def _send(self, *, force: bool) -> None:
        with self._lock:
            now = self._clock()
            if not self._pending or (not force and now - self._sent_at < MIN_INTERVAL):
                return
            self._pending, self._sent_at = False, now
            bundle = self._compose()
        if self._handle is not None:  # None: no shell to display in (a plain script); nothing to update
            self._handle.update(bundle, raw=True)

    def _compose(self) -> dict[str, str]:
        htmls, texts = [], []
        for part in self._parts:
            text = part.get("text/plain", "")
            if "text/html" in part:
                htmls.append(part["text/html"])
            elif text:  # the streamed reply: markdown, drawn as the foreground cell draws it
                htmls.append(f"<div class='soba-reply' style='{_TEXT_STYLE}'>{reply_html(text)}</div>")
            if text:
                texts.append(text)
        return {"text/html": "".join(htmls), "text/plain": "\n".join(texts)}


def _bundle(obj: Any) -> dict[str, str]:
    if isinstance(obj, Mapping):
        return {str(k): str(v) for k, v in obj.items() if k in ("text/html", "text/plain", "text/markdown")} \
            | ({"text/plain": str(obj.get("text/markdown", ""))} if "text/plain" not in obj else {})
    return {"text/plain": str(obj)}


def _ipython_display(obj: Any, **kwargs: Any) -> Any:
    from IPython.display import display

    return display(obj, **kwargs)
