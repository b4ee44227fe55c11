"""The live budget widget docked in JupyterLab's right sidebar, so it stays in view while the user scrolls.

Owns :func:`open_side_panel`. It uses the ``sidecar`` package (PyPI; its JupyterLab extension
renders widgets in the Lab shell). The panel is docked in the *right sidebar* (sidecar's
``anchor="right"``), next to the property inspector and the debugger, never as a split of the main
area: a split halves the notebook's width, which wraps ``%capsule list`` rows and squeezes plots.

One panel per session: opening it again only re-activates it. There is no Lab shell to dock into
when ``sidecar`` is missing, or when no Jupyter server started this kernel (a headless run through
nbclient, nbconvert or papermill; VS Code; a terminal): then it returns ``False`` and the caller
shows the widget inline, without a hint about a panel nobody can see. A Jupyter server names the
notebook of every kernel it starts in ``JPY_SESSION_NAME``; that is how a served kernel is told
from a headless one.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from ..trusted_import import trusted_import

__all__ = ["ANCHOR", "PANEL_TITLE", "open_side_panel", "served_by_jupyter",
           "side_panel_available"]

PANEL_TITLE = "SOBA budget"
#: sidecar's anchor for JupyterLab's right sidebar (``"split-right"`` would halve the main area).
ANCHOR = "right"

_lock = threading.Lock()
_panels: dict[str, Any] = {}


def side_panel_available() -> bool:
    """Is the ``sidecar`` package importable in this kernel?"""
    try:
        trusted_import("sidecar")
    except ImportError:
        return False
    return True


def served_by_jupyter() -> bool:
    """Did a Jupyter server (JupyterLab, Notebook 7) start this kernel for a notebook it shows?"""
    return bool(os.environ.get("JPY_SESSION_NAME"))


def open_side_panel(widget: Any, key: str, *, title: str = PANEL_TITLE) -> bool:
    """Show ``widget`` in the right-sidebar panel ``key`` (created once).

    ``False``, and nothing shown, without ``sidecar`` or outside a served notebook (see the module)."""
    if not served_by_jupyter():
        return False
    try:
        Sidecar = trusted_import("sidecar").Sidecar
    except ImportError:
        return False
    from IPython.display import display

    with _lock:
        panel: Any = _panels.get(key)
        fresh = panel is None
        if fresh:
            panel = _panels[key] = Sidecar(title=f"{title} · {key}" if key else title, anchor=ANCHOR)
    if fresh:
        with panel:
            display(widget)
    return True
