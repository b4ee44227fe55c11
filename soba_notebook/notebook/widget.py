"""The anywidget budget widget, one per session, fed from the session's event bus.

Owns :class:`BudgetWidget`, the per-session registry (:func:`widget_for`), the helper that picks
widget or terminal for a session (:func:`attach_budget_display`), and finding the shipped
front-end files (:func:`asset_path`).

Data flow: ``EventBus.emit`` (agent thread) → :meth:`BudgetWidget.apply` folds the event into a
:class:`~soba_notebook.notebook.display.BudgetState` and pushes it into a
:class:`~soba_notebook.notebook.throttle.Throttle` → at most ``max_rate`` times a second the
throttle assigns ``BudgetState.snapshot()`` to the synced ``state`` trait → one comm message →
``js/budget_widget.js`` re-renders. The whole display state lives in ONE ``Dict`` trait so every
update reaches the browser atomically (the view never sees a new phase with an old percent).

The ES module and CSS live in the repository's ``js/`` directory. Installed wheels carry them at
``soba_notebook/notebook/static/``; :func:`asset_path` looks there first, then in ``js/`` next to
the package (an editable install or a plain checkout).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from ..events import Event, EventBus
from .display import BudgetState, Frontend, TerminalBudgetDisplay, budget_line, detect_frontend
from .throttle import Clock, Throttle, TimerFactory, thread_timer

__all__ = [
    "CSS_NAME",
    "ESM_NAME",
    "BudgetWidget",
    "asset_path",
    "attach_budget_display",
    "forget_session",
    "widget_for",
]

ESM_NAME = "budget_widget.js"
CSS_NAME = "budget_widget.css"

#: Message the ES module sends once a view has rendered (see :meth:`BudgetWidget.wait_rendered`).
_RENDERED_MSG = "soba:rendered"


def asset_path(name: str) -> Path:
    """Where the shipped front-end file ``name`` is: the package's ``static/`` or the repo's ``js/``."""
    try:
        candidate = resources.files(__package__ or "soba_notebook.notebook").joinpath("static", name)
        if candidate.is_file():
            return Path(str(candidate))
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError):
        pass
    fallback = Path(__file__).resolve().parents[2] / "js" / name
    if fallback.is_file():
        return fallback
    raise FileNotFoundError(
        f"soba_notebook front-end file {name!r} not found in soba_notebook/notebook/static/ "
        f"or {fallback.parent}; the package was built without its js/ assets"
    )


class BudgetWidget(anywidget.AnyWidget):
    """Token budget, live compaction progress and the last compaction, for one session.

    Synced traits: ``session_id`` (str) and ``state`` (dict; exactly
    :meth:`BudgetState.snapshot`, see that method and ``js/budget_widget.js`` for the keys). Safe
    to feed from any thread: :meth:`apply` (or a bus attached with :meth:`attach`) only touches
    the reducer and the throttle; the trait is assigned at most ``max_rate`` times per second and
    the final state always arrives (trailing flush; :meth:`flush` forces it).
    """

    _esm = asset_path(ESM_NAME)
    _css = asset_path(CSS_NAME)

    session_id = traitlets.Unicode("").tag(sync=True)
    state = traitlets.Dict().tag(sync=True)

    def __init__(self, session_id: str = "", *, max_rate: float = 10.0, clock: Clock | None = None,
                 timer: TimerFactory | None = None, **kwargs: Any) -> None:
        self._budget = BudgetState()
        super().__init__(session_id=session_id, state=self._budget.snapshot(), **kwargs)
        throttle_kwargs: dict[str, Any] = {"max_rate": max_rate, "timer": timer or thread_timer}
        if clock is not None:
            throttle_kwargs["clock"] = clock
        self._throttle: Throttle[BudgetState] = Throttle(self._publish, **throttle_kwargs)
        self._unsubscribe: Callable[[], None] | None = None
        self._attach_lock = threading.Lock()
        self._rendered = threading.Event()
        self.on_msg(self._on_frontend_msg)

    # -- feeding -------------------------------------------------------------------------------

    @property
    def budget(self) -> BudgetState:
        """The reducer behind the widget (current even between throttled trait updates)."""
        return self._budget

    @property
    def throttle(self) -> Throttle[BudgetState]:
        return self._throttle

    def apply(self, event: Event) -> None:
        """Fold ``event`` into the state and schedule a throttled trait update (any thread)."""
        self._budget.apply(event)
        self._throttle.push(self._budget)

    def attach(self, bus: EventBus) -> BudgetWidget:
        """Subscribe to ``bus`` (replacing an earlier bus). Returns ``self``, so a cell ending in
        ``widget_for(sid).attach(bus)`` displays the widget."""
        with self._attach_lock:
            if self._unsubscribe is not None:
                self._unsubscribe()
            self._unsubscribe = bus.subscribe(self.apply)
        return self

    def detach(self) -> None:
        """Stop listening and deliver the final state."""
        with self._attach_lock:
            unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe()
        self.flush()

    def flush(self) -> bool:
        """Push the current state to the frontend now, bypassing the rate limit."""
        return self._throttle.flush()

    def _publish(self, budget: BudgetState) -> None:
        self.state = budget.snapshot()

    # -- frontend ------------------------------------------------------------------------------

    def wait_rendered(self, timeout: float | None = None) -> bool:
        """Block until a browser view has rendered this widget (or ``timeout`` seconds pass).

        Call it from a background thread: the kernel handles the frontend's message only while
        it is not busy running a cell.
        """
        return self._rendered.wait(timeout)

    def _on_frontend_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if isinstance(content, dict) and content.get("type") == _RENDERED_MSG:
            self._rendered.set()

    def close(self) -> None:
        self.detach()
        _unregister(self)
        super().close()

    def __repr__(self) -> str:
        # Shown as text/plain wherever widgets cannot render: a budget line, never trait dumps.
        return f"soba budget [{self.session_id or 'no session'}] · {budget_line(self._budget.snapshot())}"


_registry_lock = threading.Lock()
_widgets: dict[str, BudgetWidget] = {}
_terminals: dict[str, TerminalBudgetDisplay] = {}


def widget_for(session_id: str, **kwargs: Any) -> BudgetWidget:
    """The session's widget, created on first use (``kwargs`` go to :class:`BudgetWidget`)."""
    with _registry_lock:
        widget = _widgets.get(session_id)
        if widget is None or widget.comm is None:  # closed widgets have no comm
            widget = BudgetWidget(session_id, **kwargs)
            _widgets[session_id] = widget
        return widget


def forget_session(session_id: str) -> None:
    """Drop the session's widget and terminal display from the registry, detaching both."""
    with _registry_lock:
        widget = _widgets.pop(session_id, None)
        terminal = _terminals.pop(session_id, None)
    if widget is not None:
        widget.detach()
    if terminal is not None:
        terminal.detach()


def _unregister(widget: BudgetWidget) -> None:
    with _registry_lock:
        if _widgets.get(widget.session_id) is widget:
            del _widgets[widget.session_id]


def attach_budget_display(bus: EventBus, session_id: str, *, frontend: Frontend | None = None,
                          show: bool = True) -> BudgetWidget | TerminalBudgetDisplay:
    """Hook the right budget display for this frontend to a session's bus, once per session.

    In a kernel: the session's :class:`BudgetWidget`, attached, and displayed if ``show``. In a
    terminal: a :class:`TerminalBudgetDisplay` writing to stdout (no widget is ever created, so no
    widget repr can reach the terminal). Calling it again for the same session re-attaches the
    same display to ``bus`` and does not display it twice.
    """
    frontend = frontend or detect_frontend()
    if frontend == "terminal":
        with _registry_lock:
            terminal = _terminals.get(session_id)
            if terminal is None:
                terminal = _terminals[session_id] = TerminalBudgetDisplay()
        return terminal.attach(bus)
    with _registry_lock:
        existed = session_id in _widgets and _widgets[session_id].comm is not None
    widget = widget_for(session_id).attach(bus)
    if show and not existed:
        from IPython.display import display

        display(widget)
    return widget
