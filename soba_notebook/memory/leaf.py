"""Handoffs that are true as of now: a capsule brought up to the session's leaf before it leaves.

A Context Capsule covers only the history before its retained tail; the tail and everything
after the capsule stay verbatim in the model input. Exported as it is, a capsule made before the
tests finally passed would hand over "blocker: the tests fail" and "next: fix the failing tests"
although the session's last word was "all tests pass". So before a capsule is exported it is
brought up to the leaf: the facts of every entry after what it covers (latest verification
results, files modified, milestones, the latest user request, the last thing the assistant
said) are folded in with the deterministic extractor, and the result states the entry it is
true as of (``as-of`` in the ``.capsule.md`` header).

When that cannot be done truthfully (the checkpoint is on another branch than the leaf, or a
created capsule file does not say what it is true as of) :class:`StaleCapsuleError` refuses and
points to ``%capsule create``, which summarizes the current state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..compaction.capsule import Capsule, merge_unique
from ..compaction.extract import deterministic_capsule
from ..errors import SobaError
from ..session.context import context_start
from ..session.entries import Entry
from ..session.payloads import capsule_data
from ..session.store import SessionStore
from .portable import PortableCapsule

__all__ = ["StaleCapsuleError", "bring_up_to_leaf", "entries_after", "latest_request"]

_CREATE_HINT = "use %capsule create \"title\" for a handoff of the current state"


class StaleCapsuleError(SobaError):
    """A capsule cannot be made true as of the session's leaf (it is on another branch)."""


def entries_after(path: Sequence[Entry], capsule_index: int) -> list[Entry]:
    """The entries of ``path`` a capsule at ``capsule_index`` does not cover: its retained tail and
    everything after it, capsule entries left out (their facts come from the entries themselves)."""
    start, _ = context_start(path[: capsule_index + 1])
    return [e for e in path[start:] if e.type != "capsule"]


#: User messages that are not requests: capsules, loaded capsules, the note of the user's cells.
_NOT_REQUESTS = frozenset({"capsule", "capsule_load", "cell_history"})
REQUEST_CHARS = 200


def latest_request(path: Sequence[Entry]) -> str | None:
    """The user's latest request on ``path`` (one line, clipped), or None."""
    for entry in reversed(path):
        if entry.role != "user" or entry.message.get("source") in _NOT_REQUESTS:
            continue
        text = " ".join(entry.text.split())
        if text and not text.startswith("<context_capsule"):
            return text if len(text) <= REQUEST_CHARS else text[: REQUEST_CHARS - 1] + "…"
    return None


def _fold(capsule: Capsule, newer: Sequence[Entry], checkpoint_id: str | None, path: Sequence[Entry]) -> Capsule:
    """The facts of ``newer`` folded in, and the latest request kept even when a summary dropped it."""
    folded = deterministic_capsule(list(newer), capsule, checkpoint_id) if newer else capsule
    request = latest_request(path)
    if request is None or request == " ".join(folded.goal.split()) or any(request in c for c in folded.constraints):
        return folded
    return replace(folded, constraints=merge_unique(folded.constraints, [f"User (latest request): {request}"]))


def bring_up_to_leaf(store: SessionStore, pc: PortableCapsule, *, kernel_state: Sequence[str] | None = None
                     ) -> PortableCapsule:
    """``pc`` (a checkpoint of ``store``'s session, or a capsule created in it) true as of the leaf.

    A transcript checkpoint on the current branch gets the facts of the entries it does not cover;
    a created capsule those of the entries after its ``as_of``. ``kernel_state`` (the live
    kernel's, when there is one) replaces the recorded one. Raises :class:`StaleCapsuleError`
    when the capsule is not on the path to the leaf, or says nothing about what it is true as of.
    """
    path = store.path()
    leaf = path[-1].id if path else None
    state = tuple(kernel_state) if kernel_state is not None else pc.kernel_state
    index = next((i for i, e in enumerate(path) if e.type == "capsule"
                  and capsule_data(e).get("checkpointId") == pc.source_checkpoint), None)
    if index is not None and pc.source_session == store.id:
        newer = entries_after(path, index)
    elif pc.source_session == store.id and pc.as_of is not None and pc.as_of in {e.id for e in path}:
        position = next(i for i, e in enumerate(path) if e.id == pc.as_of)
        newer = [e for e in path[position + 1:] if e.type != "capsule"]
    elif pc.source_session == store.id:
        where = ("it does not record the entry it is true as of" if pc.as_of is None
                 else f"it is true as of entry {pc.as_of}, which is not on the path to the leaf {leaf}")
        raise StaleCapsuleError(f"checkpoint {pc.source_checkpoint or pc.id} cannot be brought up to the session's "
                                f"leaf ({where}); {_CREATE_HINT}")
    else:
        return pc  # another session's capsule (Project Memory, a loaded file): exported as it is
    return replace(pc, capsule=_fold(pc.capsule, newer, pc.source_checkpoint, path), as_of=leaf,
                   kernel_state=state)
