"""What the user's own cells showed, for the note that starts the next turn.

IPython's ``post_run_cell`` gives a cell's input and outcome, not its output; IPython (9 and
later) keeps the output itself, by execution count, in its history manager
(``HistoryManager.outputs``: the cell's stdout and stderr text and its result's MIME bundle).
Its ``display()`` calls are not kept there by default (ipykernel's ``store_display_history``, which
would also file SOBA's own background displays under the user's next cell), so
:class:`DisplayRecorder` sees them through ipykernel's publisher hook, which runs on the publishing
thread: what the cell's own thread displays between ``pre_run_cell`` and ``post_run_cell``, kept as
its short text only (a figure's bytes are never kept), for the newest :data:`MAX_CELLS` cells.

:func:`output_summaries` reads those of the cells the note names and gives each as one short
text: :func:`~soba_notebook.agent.cell_outputs.outputs_for_model`'s rendering (text clipped head
+ tail, DataFrames as tables, a figure as its one-line description; figures are never attached
to the note, to keep it small), redacted, and clipped to :data:`SUMMARY_CHARS` with a marker.
Nothing is copied from the shell but these summaries. An older IPython (no ``outputs``) gives
none, and the note shows inputs and outcomes as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from ..agent.cell_outputs import outputs_for_model
from ..memory.redact import redact_text

__all__ = ["MAX_CELLS", "STREAM_KEEP", "SUMMARY_CHARS", "DisplayRecorder", "clip_summary", "output_summaries",
           "summary_of"]

#: cells whose displays are kept (the newest)
MAX_CELLS = 50

#: a stream's first and last this many characters are read (the rest is marked as left out)
STREAM_KEEP = 4_000
#: one cell's output summary in the note, at most
SUMMARY_CHARS = 600
_STREAMS = {"out_stream": "stdout", "err_stream": "stderr"}


def clip_summary(text: str, limit: int = SUMMARY_CHARS) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with how much was left out."""
    if len(text) <= limit:
        return text
    return text[:limit].rstrip() + f"\n… {len(text) - limit:,} more characters of output not shown …"


def _stream_text(chunks: Any) -> str:
    text = "".join(str(c) for c in chunks) if isinstance(chunks, list | tuple) else str(chunks or "")
    if len(text) <= 2 * STREAM_KEEP:
        return text
    left = len(text) - 2 * STREAM_KEEP
    return f"{text[:STREAM_KEEP]}\n… {left:,} characters left out …\n{text[-STREAM_KEEP:]}"


class DisplayRecorder:
    """The user's cells' ``display()`` calls as short texts, by execution count (module docstring)."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self._lock = threading.Lock()
        self._shown: OrderedDict[int, list[str]] = OrderedDict()
        self._running: tuple[list[str], int] | None = None  # the running cell's displays, and its thread
        publisher = getattr(shell, "display_pub", None)
        self._publisher = publisher if callable(getattr(publisher, "register_hook", None)) else None
        if self._publisher is not None:
            self._publisher.register_hook(self._hook)

    def close(self) -> None:
        if self._publisher is not None:
            self._publisher.unregister_hook(self._hook)
            self._publisher = None

    def before_cell(self, _info: Any = None) -> None:
        """``pre_run_cell``: this thread's displays from now on are the running cell's."""
        with self._lock:
            self._running = ([], threading.get_ident())

    def after_cell(self, result: Any = None) -> None:
        """``post_run_cell``: the displays filed under the cell's number (known only from its result)."""
        number = getattr(result, "execution_count", None)
        with self._lock:
            running, self._running = self._running, None
            if running is not None and running[0] and isinstance(number, int):
                self._shown[number] = running[0]
                while len(self._shown) > MAX_CELLS:
                    self._shown.popitem(last=False)

    def _hook(self, msg: Any) -> Any:
        try:
            with self._lock:
                running = self._running
            if running is not None and running[1] == threading.get_ident() and \
                    (msg.get("header") or {}).get("msg_type") == "display_data":
                data = (msg.get("content") or {}).get("data") or {}
                text, _ = outputs_for_model([{"output_type": "display_data", "data": dict(data)}])
                with self._lock:
                    running[0].append(text)
        except Exception:  # a hook must never stop the kernel's output
            pass
        return msg

    def take(self, number: int) -> list[str]:
        """The short texts of cell ``number``'s displays, once."""
        with self._lock:
            return self._shown.pop(number, [])


def summary_of(outputs: Iterable[Any], displays: Iterable[str] = ()) -> str:
    """IPython's recorded outputs of one cell (``HistoryOutput``: ``output_type``, ``bundle``) and
    the short texts of its ``displays``, as the note's short text, redacted and clipped; ``""``
    when the cell showed nothing."""
    found: list[dict[str, Any]] = []
    for output in outputs:
        kind, bundle = getattr(output, "output_type", None), getattr(output, "bundle", None)
        if not isinstance(bundle, Mapping):
            continue
        if kind in _STREAMS:
            found.append({"output_type": "stream", "name": _STREAMS[kind], "text": _stream_text(bundle.get("stream"))})
        elif kind in ("display_data", "execute_result"):
            found.append({"output_type": kind, "data": dict(bundle)})
    text, _ = outputs_for_model(found)  # the images are not attached: their line stands in the text
    return clip_summary(redact_text("\n".join(filter(None, [*displays, text]))))


def output_summaries(shell: Any, displays: DisplayRecorder | None, numbers: Iterable[int | None]) -> dict[int, str]:
    """The output summary of each of ``numbers``' cells that showed something: ``shell``'s history
    and the ``displays`` recorded."""
    recorded = getattr(getattr(shell, "history_manager", None), "outputs", None)
    recorded = recorded if isinstance(recorded, Mapping) else {}
    out: dict[int, str] = {}
    for number in numbers:
        if number is None:
            continue
        text = summary_of(recorded.get(number, ()), displays.take(number) if displays is not None else ())
        if text.strip():
            out[number] = text
    return out
