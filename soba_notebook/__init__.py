"""soba_notebook: a long-lived coding agent inside Jupyter that never silently drops history.

``%load_ext soba_notebook`` registers the magics (``%soba``, ``%compact``, ``%budget``,
``%auto_compact``, ``%capsule``); :func:`current_store` is the session the kernel's agent writes.
The core below the notebook layer is UI-free and importable on its own: sessions, tokens, budget,
compaction, providers, agent. ``__all__`` below is this module's public API; ``docs/API.md``
lists it with the other public modules.
"""

from __future__ import annotations

from typing import Any

from .budget import BudgetCheck, BudgetTracker, hard_limit, soft_limit
from .config import SobaConfig, load_config
from .errors import ConfigError, SessionError, SobaError
from .session import Entry, SessionStore

__version__ = "0.1.0"

__all__ = [
    "BudgetCheck",
    "BudgetTracker",
    "ConfigError",
    "Entry",
    "SessionError",
    "SessionStore",
    "SobaConfig",
    "SobaError",
    "__version__",
    "current_store",
    "hard_limit",
    "load_config",
    "load_ipython_extension",
    "soft_limit",
    "unload_ipython_extension",
]


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext soba_notebook``: register the magics on ``ipython``."""
    from .notebook import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from .notebook import unload_ipython_extension as unload

    unload(ipython)


def current_store() -> SessionStore:
    """The session store this kernel's agent is using (``views.transcript(current_store())``).

    Opens the agent (on a new session of this kernel's own) if no turn has run yet; raises :class:`RuntimeError`
    when ``%load_ext soba_notebook`` has not been run in this kernel.
    """
    from .notebook import current

    return current().ensure().store
