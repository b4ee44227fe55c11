"""A capsule entry read back: its structured state, and the message it is in model input.

One place for both, because every reader of the transcript needs them the same way: the engine
(the capsule in force), the replay simulator, the views, and a loaded handoff.
"""

from __future__ import annotations

from typing import Any

from ..session.entries import Entry
from ..session.payloads import capsule_data
from .capsule import Capsule, render
from .kernel_section import with_kernel_state

__all__ = ["capsule_message", "capsule_of"]


def capsule_of(entry: Entry) -> Capsule:
    return Capsule.from_json(capsule_data(entry).get("state"), where=f"capsule entry {entry.id}")


def capsule_message(entry: Entry) -> dict[str, Any]:
    """The capsule entry as the first message of model input."""
    data = capsule_data(entry)
    text = render(capsule_of(entry), checkpoint_id=data.get("checkpointId"),
                  quality=str(data.get("quality", "ok")), handoff=data.get("trigger") == "capsule_load")
    return {"role": "user", "content": with_kernel_state(text, entry.data)}
