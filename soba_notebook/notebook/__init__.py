"""The notebook layer: IPython magics, the budget widget, the terminal fallback.

This package is the only place that may import IPython, ipywidgets or anywidget (DESIGN.md,
"Layers"). Keep this ``__init__`` light: importing ``soba_notebook.notebook`` must not pull in a
widget framework, so the UI-free pieces (``display``, ``throttle``) stay usable headless.
"""

from __future__ import annotations

import contextlib
from typing import Any

__all__ = ["current", "load_ipython_extension", "unload_ipython_extension"]

_LOADED: dict[int, Any] = {}


def load_ipython_extension(ipython: Any) -> None:
    """Register the magics (``%load_ext soba_notebook``, or ``c.InteractiveShellApp.extensions``)
    and the input transform that lets their lines end in ``?`` (:mod:`.verbatim`)."""
    from . import verbatim
    from .magics import SobaMagics

    if id(ipython) in _LOADED:
        return
    magics = SobaMagics(ipython)
    ipython.register_magics(magics)
    _LOADED[id(ipython)] = magics
    if hasattr(ipython, "input_transformer_manager"):
        verbatim.install(ipython)
    events = getattr(ipython, "events", None)
    if events is not None:  # the user's own cells: for the next turn's note and the kernel state's order
        from .kernel_cells import KernelCells
        from .user_outputs import DisplayRecorder

        magics.session.kernel_cells = KernelCells(ipython, magics.session.cell_history)  # notebook_run's cells
        magics.session.user_displays = DisplayRecorder(ipython)  # the user's display() calls, for the note
        events.register("pre_run_cell", magics.session.kernel_cells.before_cell)
        events.register("pre_run_cell", magics.session.user_displays.before_cell)
        events.register("post_run_cell", magics.session.after_cell)


def unload_ipython_extension(ipython: Any) -> None:
    """Remove the magics and their input transform, and stop the agent thread (``%unload_ext soba_notebook``)."""
    from . import verbatim

    magics = _LOADED.pop(id(ipython), None)
    if magics is None:
        return
    if hasattr(ipython, "input_transformer_manager"):
        verbatim.uninstall(ipython)
    magics.session.close()
    events = getattr(ipython, "events", None)
    if events is not None:
        with contextlib.suppress(ValueError):
            events.unregister("post_run_cell", magics.session.after_cell)
        if magics.session.kernel_cells is not None:
            with contextlib.suppress(ValueError):
                events.unregister("pre_run_cell", magics.session.kernel_cells.before_cell)
        if magics.session.user_displays is not None:
            with contextlib.suppress(ValueError):
                events.unregister("pre_run_cell", magics.session.user_displays.before_cell)
            magics.session.user_displays.close()
    for kind, names in magics.magics.items():
        for name in list(names):
            ipython.magics_manager.magics[kind].pop(name, None)
    ipython.magics_manager.registry.pop(type(magics).__name__, None)


def current(ipython: Any = None) -> Any:
    """The :class:`~.controller.NotebookSession` of this kernel (after ``%load_ext soba_notebook``)."""
    if ipython is None:
        from IPython import get_ipython

        ipython = get_ipython()
    magics = _LOADED.get(id(ipython))
    if magics is None:
        raise RuntimeError("soba_notebook is not loaded in this kernel: run %load_ext soba_notebook first")
    return magics.session
