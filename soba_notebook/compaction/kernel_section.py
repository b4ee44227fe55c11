"""The kernel-state section of a capsule: which variables the kernel held when it was made.

When the history that defined ``df`` is compacted away, the model would no longer know ``df``
exists. So at each compaction the engine asks its kernel-state provider (injected by the
notebook layer; the engine itself knows no kernel) for a bounded list of ``name: type, shape``
lines and stores it in the ``capsule`` entry as ``kernelState``. It is a snapshot, not rolled
state: the next compaction takes a new one.

This module owns the entry field and its rendering into model input. The section is marked
informative: the variables may have changed since, and a capsule loaded into another session
(``kernelStateLoaded``) cannot recreate them at all, which the heading says.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..session.payloads import KernelStateData
from .capsule import quote

__all__ = ["KernelStateProvider", "kernel_state_field", "kernel_state_text", "with_kernel_state"]

#: Returns ``name: summary`` lines, most recently changed first, already bounded and scrubbed.
KernelStateProvider = Callable[[], Sequence[str]]

#: At most this many lines are stored, whatever a provider returns.
MAX_LINES = 61
MAX_LINE_CHARS = 240

_LIVE = ("## Kernel state (informative only: the user variables in the kernel when this capsule was made, "
         "type and shape, no values; check before relying on one, it may have changed since)")
_LOADED = ("## Kernel state of the source session (informative only: these variables existed in the kernel "
           "where this capsule was made; loading the capsule cannot recreate them, so they do not exist here "
           "unless recreated)")


def kernel_state_field(provider: KernelStateProvider | None) -> KernelStateData:
    """``{"kernelState": [...]}`` for a capsule entry, or ``{}`` without a provider or variables.

    A provider that fails costs the section, never the compaction.
    """
    if provider is None:
        return {}
    try:
        lines = [str(line)[:MAX_LINE_CHARS] for line in provider()][:MAX_LINES]
    except Exception:  # a misbehaving object in the namespace must not break compaction
        return {}
    return {"kernelState": lines} if lines else {}


def kernel_state_text(data: Mapping[str, Any]) -> str:
    """The section as the model reads it, from a capsule entry's data; ``""`` when there is none.

    Each line is quoted like every other capsule text (:func:`.capsule.quote`): a variable name or
    type string, live or from a loaded file, is data and cannot close the wrapper or start a heading.
    """
    raw = data.get("kernelState")
    lines = [s for s in raw if isinstance(s, str)] if isinstance(raw, list) else []
    if not lines:
        return ""
    heading = _LOADED if data.get("kernelStateLoaded") else _LIVE
    return heading + "\n" + "\n".join(f"- {quote(line)}" for line in lines)


def with_kernel_state(rendered: str, data: Mapping[str, Any]) -> str:
    """A rendered capsule with the kernel-state section inserted before its closing tag."""
    section = kernel_state_text(data)
    if not section:
        return rendered
    close = "</context_capsule>"
    head, sep, tail = rendered.rpartition(close)
    if not sep:
        return f"{rendered}\n\n{section}"
    return f"{head}{section}\n\n{close}{tail}"
