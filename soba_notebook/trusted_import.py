"""SOBA's own run-time imports, which a module planted in the kernel's working directory cannot take over.

An IPython kernel puts ``''`` (its working directory) first on ``sys.path``, and the working directory
is usually the workspace the agent's sandboxed ``shell`` may write. A ``mistune.py`` written there
would run, in the kernel, at SOBA's first ``import mistune`` (a background cell rendering a reply).
:func:`trusted_import` is how SOBA imports a module lazily (inside a function): while it runs, on
this thread only, import does not look in a distrusted directory — ``''``, the kernel's current
directory, and any directory inside a workspace registered with :func:`distrust` (the agent does so
for its own) except a virtual environment's ``site-packages`` — for that module nor for anything it
imports in turn. A name found only there is refused, and a module already loaded from there (someone
imported it before) is refused too: an :class:`ImportError` that names the file. Other threads (the
user's own cells) import as always: the finder is inert for them.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["distrust", "distrusted", "trusted_import"]

_local = threading.local()
_workspaces: set[Path] = set()
_lock = threading.Lock()


def distrust(directory: str | os.PathLike[str]) -> None:
    """Never load a module for SOBA from inside ``directory`` (a workspace sandboxed commands write)."""
    with _lock:
        _workspaces.add(Path(directory).resolve())


def distrusted(entry: str) -> bool:
    """Whether the ``sys.path`` entry ``entry`` is one :func:`trusted_import` does not look in."""
    if not entry:
        return True
    try:
        cwd = Path.cwd().resolve()
        path = (cwd / entry).resolve()
    except (OSError, RuntimeError):
        return True
    if path == cwd:
        return True
    if "site-packages" in path.parts or "dist-packages" in path.parts:
        return False  # a virtual environment in the project: its packages, not the project's files
    return any(path == root or root in path.parents for root in tuple(_workspaces))


class _TrustedFinder:
    """A ``sys.meta_path`` finder that, while :func:`trusted_import` runs on this thread, finds modules
    in trusted path entries only, and refuses a name found nowhere else than in a distrusted one."""

    def find_spec(self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> Any:
        if not getattr(_local, "active", False):
            return None
        search = [e for e in (sys.path if path is None else path) if isinstance(e, str)]
        spec = importlib.machinery.PathFinder.find_spec(name, [e for e in search if not distrusted(e)], target)
        if spec is not None:
            return spec
        planted = importlib.machinery.PathFinder.find_spec(name, [e for e in search if distrusted(e)], target)
        if planted is not None and planted.origin not in (None, "namespace"):
            raise ImportError(f"SOBA will not import {name!r} from {planted.origin}: that directory is the kernel's "
                              f"working directory or inside the workspace, where a sandboxed command can write",
                              name=name, path=planted.origin)
        return None  # a built-in or frozen module: the finders after this one have it


_FINDER = _TrustedFinder()


def _install() -> None:
    with _lock:
        if not any(isinstance(f, _TrustedFinder) for f in sys.meta_path):
            sys.meta_path.insert(0, _FINDER)


def _check_loaded(name: str) -> None:
    """Refuse ``name`` or a package above it when the module loaded under that name came from a distrusted place."""
    parts = name.split(".")
    for depth in range(1, len(parts) + 1):
        module = sys.modules.get(".".join(parts[:depth]))
        origin = getattr(getattr(module, "__spec__", None), "origin", None) or getattr(module, "__file__", None)
        if module is None or not isinstance(origin, str) or origin in ("built-in", "frozen", "namespace"):
            continue
        top = Path(origin).parent
        for _ in range(depth - 1 + (1 if hasattr(module, "__path__") else 0)):
            top = top.parent  # up to the sys.path entry the top-level package was found in
        if distrusted(str(top)):
            raise ImportError(f"SOBA will not use the module {module.__name__!r} loaded from {origin}: it lies in "
                              f"the kernel's working directory or the workspace, where a sandboxed command can "
                              f"write; move it away and restart the kernel", name=module.__name__, path=origin)


def trusted_import(name: str) -> ModuleType:
    """``importlib.import_module(name)``, never from a distrusted directory (module docstring)."""
    _install()
    _check_loaded(name)
    active = getattr(_local, "active", False)
    _local.active = True
    try:
        module = importlib.import_module(name)
    finally:
        _local.active = active
    _check_loaded(name)
    return module
