"""The live budget widget in a JupyterLab side panel, so it stays in view while the user scrolls.

Owns :func:`open_side_panel`. It uses the ``sidecar`` package (PyPI; its JupyterLab extension
renders widgets in a side area of the Lab shell). One panel per session: opening it again only
re-activates it. Where there is no sidecar (not installed, or a terminal) it says so and returns
``False``, so the caller falls back to the inline widget. Classic Notebook has no side area; a
sidecar there renders nothing, so the caller also shows the widget inline once.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["PANEL_TITLE", "open_side_panel", "side_panel_available"]

PANEL_TITLE = "SOBA budget"

_lock = threading.Lock()
_panels: dict[str, Any] = {}


def side_panel_available() -> bool:
    """Is the ``sidecar`` package importable in this kernel?"""
    try:
        import sidecar  # noqa: F401
    except ImportError:
        return False
    return True


def open_side_panel(widget: Any, key: str, *, title: str = PANEL_TITLE) -> bool:
    """Show ``widget`` in the side panel ``key`` (created once). ``False`` without ``sidecar``."""
    try:
        from sidecar import Sidecar
    except ImportError:
        return False
    from IPython.display import display

    with _lock:
        panel: Any = _panels.get(key)
        fresh = panel is None
        if fresh:
            panel = _panels[key] = Sidecar(title=f"{title} · {key}" if key else title, anchor="split-right")
    if fresh:
        with panel:
            display(widget)
    return True
