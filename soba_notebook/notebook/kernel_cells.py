"""What IPython lends ``notebook_run``: the :class:`~soba_notebook.agent.cell_exec.CellKernel` of a kernel.

A cell the agent runs should look as if the user ran it, so it takes from the shell what a user's
run takes: the cell transformer (``%magic`` and ``!command`` lines), the next execution count, the
display formatter for a trailing expression's rich reprs, and ``display()`` (IPython's display
publisher), whose calls from the cell's thread are routed to the cell while every other thread's
(the ``%soba`` cell's own rendering, the user's cells) publish as before. On those threads the
display formatter also adds a DataFrame's shape and dtypes to its output's metadata
(:func:`~soba_notebook.agent.table_facts.table_metadata`), for a trailing ``df`` as for
``display(df)``: the model is then given them, which the mime bundle does not hold.

Execution counts: an idle kernel's ``execution_count`` is the next cell's number, so an agent run
takes it and moves it on. While a cell runs (a foreground ``%soba``, or a user's cell during a
background turn) the running cell's reply will carry the counter's value at its end less one, and
the counter then is either the running cell's number (older IPython adds one when a cell
ends) or already one past it (IPython 9.x since late 2025 adds it when the cell starts; its displayhook's
``prompt_count`` then trails ``execution_count`` by one, which is how the two are told apart). An
agent run during a running cell takes the number after the running cell's (the next run in that
cell the one after that) and moves the counter so the running cell's reply lands one past the
agent's last run: ``%soba`` as [2], the cells it ran [3] and [4], its reply [5], the user's next
cell [6]; no number is used twice. The runs join the kernel's history
(:class:`.cell_history.CellHistory`), so ``notebook_read`` lists them with the user's.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

from ..agent.cell_exec import DisplaySink
from ..agent.table_facts import table_metadata
from .cell_history import CellHistory

__all__ = ["KernelCells"]


class _RoutedPublisher:
    """Stands in for the shell's ``display_pub``: the registered threads' ``publish`` calls go to
    their sink, every other thread's to the real publisher."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.targets: dict[int, DisplaySink] = {}

    def publish(self, data: dict[str, Any], metadata: dict[str, Any] | None = None, *args: Any, **kwargs: Any) -> None:
        sink = self.targets.get(threading.get_ident())
        if sink is None:
            self.real.publish(data, metadata, *args, **kwargs)
            return
        sink(dict(data or {}), dict(metadata or {}))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


class _TableFormat:
    """Stands in for the display formatter's ``format`` (an instance attribute over the method): on
    the registered threads a DataFrame's metadata gets its table facts."""

    def __init__(self, real: Any, threads: dict[int, DisplaySink]) -> None:
        self.real = real
        self.threads = threads

    def __call__(self, obj: Any, *args: Any, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        data, metadata = self.real(obj, *args, **kwargs)
        facts = table_metadata(obj) if threading.get_ident() in self.threads else None
        return (data, {**metadata, **facts}) if facts else (data, metadata)


class KernelCells:
    """The :class:`~soba_notebook.agent.cell_exec.CellKernel` of ``shell`` (module docstring)."""

    def __init__(self, shell: Any, history: CellHistory) -> None:
        self.shell = shell
        self.history = history
        self._lock = threading.Lock()
        self._running = 0  # cells the shell is executing now (pre_run_cell .. post_run_cell)
        self._moved = False  # an agent run already moved the running cell's reply count

    # -- the shell's events (registered with post_run_cell by the extension) ------------------
    def before_cell(self, _info: Any = None) -> None:
        with self._lock:
            self._running += 1
            self._moved = False

    def after_cell(self, _result: Any = None) -> None:
        with self._lock:
            self._running = max(0, self._running - 1)

    # -- CellKernel ---------------------------------------------------------------------------
    def transform(self, source: str) -> str:
        return str(self.shell.transform_cell(source))

    def next_count(self) -> int:
        with self._lock:
            counter = int(self.shell.execution_count)
            if not self._running:
                self.shell.execution_count = counter + 1
                return counter
            counts_first = _counts_at_start(self.shell)
            reply = counter - 1 if counts_first else counter  # what the running cell's reply would say
            number = reply if self._moved else reply + 1  # never the running cell's own number
            self.shell.execution_count = counter + (1 if self._moved else 2)
            self._moved = True
            return number

    def result_data(self, value: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        data, metadata = self.shell.display_formatter.format(value)
        return dict(data), dict(metadata)

    @contextlib.contextmanager
    def displays(self, sink: DisplaySink) -> Iterator[None]:
        ident = threading.get_ident()
        with self._lock:
            router = self.shell.display_pub
            if not isinstance(router, _RoutedPublisher):
                router = _RoutedPublisher(router)
                self.shell.display_pub = router
            router.targets[ident] = sink
            formatter = self.shell.display_formatter
            wrapped = vars(formatter).get("format")
            if isinstance(wrapped, _TableFormat):
                wrapped.threads = router.targets
            else:
                formatter.format = _TableFormat(formatter.format, router.targets)
        try:
            yield
            _flush_inline_figures()  # what the inline backend shows when a user's cell ends
        finally:
            with self._lock:
                router.targets.pop(ident, None)
                if not router.targets and self.shell.display_pub is router:
                    self.shell.display_pub = router.real
                    vars(self.shell.display_formatter).pop("format", None)

    def ran(self, cell_id: str, number: int, source: str, error: dict[str, Any] | None) -> None:
        outcome = "ok" if error is None else f"{error.get('ename')}: {error.get('evalue')}"
        trace = "" if error is None else "\n".join(str(line) for line in error.get("traceback") or ())
        self.history.record_run(number, cell_id, source, outcome, trace)


def _counts_at_start(shell: Any) -> bool:
    """Whether this IPython adds one to ``execution_count`` when a cell starts (module docstring)."""
    try:
        return int(shell.displayhook.prompt_count) == int(shell.execution_count) - 1
    except (AttributeError, TypeError, ValueError):
        return False


def _flush_inline_figures() -> None:
    """Matplotlib's inline backend shows a cell's open figures after the cell; do it for this one."""
    inline = sys.modules.get("matplotlib_inline.backend_inline")
    pyplot = sys.modules.get("matplotlib.pyplot")
    if inline is None or pyplot is None or "inline" not in str(pyplot.get_backend()):
        return
    with contextlib.suppress(Exception):  # a figure that fails to draw is the user's, not the run's
        inline.flush_figures()
