"""Running one notebook cell for ``notebook_run``: its outputs as nbformat output dicts.

A cell the agent runs must end up as if the user had run it: an execution count from the kernel's
own sequence, ``stream`` outputs (stdout and stderr, in order), ``display_data`` from ``display()``,
an ``execute_result`` for a trailing expression, and an ``error`` with its traceback. The run
itself is :mod:`.pyexec`'s (a dedicated thread, the thread's writes routed to the cell, a
``KeyboardInterrupt`` on stop or timeout); what only a kernel knows comes through
:class:`CellKernel`, which the notebook layer implements with IPython (its cell transformer for
``%magics``, its execution count, its display formatter and publisher). A headless agent uses
:class:`PlainCells`: plain Python, ``repr`` results, its own counter. Either way a DataFrame's
output carries its shape and dtypes in its metadata (:func:`.table_facts.table_metadata`), which
no mime bundle holds. While the cell runs, an optional ``progress`` callback is given its outputs
so far, at most every :data:`PROGRESS_EVERY_S` seconds and only when they changed (a live front
end shows them as they come).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import linecache
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from itertools import count
from typing import TYPE_CHECKING, Any, Protocol

from .pyexec import capture_this_thread, run_code, run_on_thread, user_traceback
from .table_facts import table_metadata

if TYPE_CHECKING:
    from ..cancel import CancelToken

__all__ = ["PROGRESS_EVERY_S", "CellKernel", "CellRun", "DisplaySink", "PlainCells", "Progress", "run_cell"]

Output = dict[str, Any]
#: Where ``display()`` calls go while a cell runs: ``sink(data by MIME type, metadata)``.
DisplaySink = Callable[[dict[str, Any], dict[str, Any]], None]
#: Given a running cell's outputs so far (copies); awaited, so the next call comes after it ends.
Progress = Callable[[list[dict[str, Any]]], Awaitable[None]]
#: The fewest seconds between two ``progress`` calls of one cell.
PROGRESS_EVERY_S = 0.5
_filenames = count(1)


class CellKernel(Protocol):
    """What the kernel lends a cell run. ``displays`` is entered on the cell's own thread."""

    def transform(self, source: str) -> str:
        """The cell as plain Python (IPython: ``%magic`` and ``!command`` lines translated)."""
        ...

    def next_count(self) -> int:
        """The execution count this run takes from the kernel's sequence."""
        ...

    def result_data(self, value: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """A trailing expression's value as ``(data by MIME type, metadata)``; a DataFrame's
        metadata carries its shape and dtypes (:func:`.table_facts.table_metadata`)."""
        ...

    def displays(self, sink: DisplaySink) -> contextlib.AbstractContextManager[Any]:
        """While inside, ``display()`` calls of this thread go to ``sink(data, metadata)``."""
        ...

    def ran(self, cell_id: str, number: int, source: str, error: Output | None) -> None:
        """Record the run in the kernel's history (what ``notebook_read`` lists)."""
        ...


@dataclass(slots=True)
class PlainCells:
    """:class:`CellKernel` without IPython: plain Python, ``repr`` results, no displays."""

    _counter: Iterator[int] = field(default_factory=lambda: count(1))

    def transform(self, source: str) -> str:
        return source

    def next_count(self) -> int:
        return next(self._counter)

    def result_data(self, value: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        return {"text/plain": repr(value)}, table_metadata(value) or {}

    def displays(self, sink: DisplaySink) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def ran(self, cell_id: str, number: int, source: str, error: Output | None) -> None:
        return None


@dataclass(frozen=True, slots=True)
class CellRun:
    """One cell's run: its count, its outputs (nbformat dicts; an error is the last one), and
    ``stopped`` (``""``, ``"cancelled"``, ``"timeout"``) with ``still_running`` as in :mod:`.pyexec`."""

    number: int
    outputs: list[Output]
    stopped: str = ""
    still_running: bool = False

    @property
    def error(self) -> Output | None:
        last = self.outputs[-1] if self.outputs else None
        return last if last is not None and last.get("output_type") == "error" else None


class _Outputs:
    """The outputs in the order the cell made them; consecutive writes to one stream joined."""

    def __init__(self) -> None:
        self.items: list[Output] = []

    def stream(self, name: str) -> Callable[[str], None]:
        def write(text: str) -> None:
            last = self.items[-1] if self.items else None
            if last is not None and last["output_type"] == "stream" and last["name"] == name:
                last["text"] += text
            elif text:
                self.items.append({"output_type": "stream", "name": name, "text": text})
        return write

    def display(self, data: dict[str, Any], metadata: dict[str, Any]) -> None:
        self.items.append({"output_type": "display_data", "data": dict(data), "metadata": dict(metadata)})


def _error(exc: BaseException, filename: str) -> Output:
    lines = user_traceback(exc, filename).rstrip("\n").splitlines()
    return {"output_type": "error", "ename": type(exc).__name__, "evalue": str(exc), "traceback": lines}


def _execute(source: str, namespace: dict[str, Any], kernel: CellKernel, number: int, filename: str,
             out: _Outputs) -> list[Output]:
    """Run the cell on this thread, REPL-style: its outputs (module docstring)."""
    with capture_this_thread({"stdout": out.stream("stdout"), "stderr": out.stream("stderr")}), \
            kernel.displays(out.display):
        try:
            code = kernel.transform(source)
            linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
            tree = ast.parse(code, filename, "exec")
            last: ast.Expression | None = None
            if tree.body and isinstance(tail := tree.body[-1], ast.Expr):
                tree.body.pop()
                last = ast.Expression(tail.value)
            flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
            run_code(compile(tree, filename, "exec", flags=flags), namespace)
            if last is not None:
                value = run_code(compile(last, filename, "eval", flags=flags), namespace)
                if value is not None:
                    data, metadata = kernel.result_data(value)
                    out.items.append({"output_type": "execute_result", "execution_count": number, "data": data,
                                      "metadata": metadata})
        except BaseException as exc:  # the cell's own errors (and the stop's interrupt) are its output
            out.items.append(_error(exc, filename))
    return out.items


async def _watch(out: _Outputs, progress: Progress, stop: asyncio.Event, every: float) -> None:
    """Call ``progress`` with the outputs so far whenever they changed, every ``every`` seconds, until ``stop``."""
    shown: list[Output] = []
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every)
        if stop.is_set():
            return
        now = [dict(o) for o in list(out.items)]  # the cell's thread appends and extends them meanwhile
        if now != shown:
            shown = now
            await progress(now)


async def run_cell(source: str, namespace: dict[str, Any], kernel: CellKernel, cancel: CancelToken | None = None,
                   timeout: float | None = None, progress: Progress | None = None,
                   every: float = PROGRESS_EVERY_S) -> CellRun:
    """Run one cell's ``source`` in ``namespace`` on its own thread (module docstring)."""
    number = kernel.next_count()
    filename = f"<soba-cell-{next(_filenames)}>"
    out = _Outputs()
    interrupted: list[Output] = [{"output_type": "error", "ename": "KeyboardInterrupt", "evalue": "",
                                  "traceback": ["KeyboardInterrupt: interrupted before the code started"]}]
    stop = asyncio.Event()
    watcher = asyncio.ensure_future(_watch(out, progress, stop, every)) if progress is not None else None
    try:
        ended = await run_on_thread(lambda: _execute(source, namespace, kernel, number, filename, out), interrupted,
                                    cancel, timeout, name="soba-notebook-run")
    finally:
        stop.set()
        if watcher is not None:
            await watcher  # a progress call under way ends before the run's own result is shown
    outputs = list(ended.value) if ended.value is not None else list(out.items)
    if ended.stopped and not (outputs and outputs[-1].get("output_type") == "error"):
        outputs.append({"output_type": "error", "ename": "KeyboardInterrupt", "evalue": "",
                        "traceback": [f"KeyboardInterrupt: the run was stopped ({ended.stopped})"]})
    return CellRun(number, outputs, ended.stopped, ended.still_running)
