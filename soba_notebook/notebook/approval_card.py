"""The approval card: one question in a cell, as an anywidget (``js/approval_card.js``).

Kept apart from :mod:`.approvals` so importing the notebook layer does not import anywidget
until a question is shown. What it shows and how a click travels: see :mod:`.approvals`.

The card opens its comm itself (:meth:`ApprovalCard.open`): pinned to SOBA's subshell and with its
handlers attached *before* the ``comm_open`` goes out. ipywidgets publishes first and attaches its
handler after, and a message that lands in between is dropped; a front end that answers the
moment it learns of the card (its view's ``shown`` report, a test client's click) would otherwise
be lost now and then, or queued behind the busy main shell, and the turn would wait for nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anywidget
import comm
import traitlets
from ipywidgets import __protocol_version__  # type: ignore[import-untyped]

from ..agent.approval import Decision
from .approvals import shown_request
from .busy_comms import answer_while_busy
from .widget import asset_path

if TYPE_CHECKING:
    from .approvals import PendingApproval

__all__ = ["ApprovalCard"]


class ApprovalCard(anywidget.AnyWidget):
    """One question in a cell. ``request`` (synced) is what is asked; ``decision`` (synced) is
    empty until settled, then ``{"verdict", "text"}``. A front end answers with the custom message
    ``{"answer": "once" | "session" | "deny", "reason": "..."}``, and says its view rendered with
    ``{"shown": true}`` (how a kernel tells a person who can click from a headless run)."""

    _esm = asset_path("approval_card.js")
    _css = asset_path("approval_card.css")

    request = traitlets.Dict().tag(sync=True)
    decision = traitlets.Dict().tag(sync=True)

    def __init__(self, pending: PendingApproval, **kwargs: Any) -> None:
        self._pending = pending
        self.on_msg(self._on_frontend_msg)  # before the comm opens (module docstring)
        super().__init__(request=shown_request(pending.request), **kwargs)

    def open(self) -> None:
        """ipywidgets' ``open``, in the order that loses no message (module docstring)."""
        if getattr(self, "comm", None) is not None:
            return
        state = self.get_state()  # JSON only: no trait of the card holds binary buffers
        made = comm.create_comm(target_name="jupyter.widget", primary=False,
                                **({"comm_id": self._model_id} if self._model_id is not None else {}))
        answer_while_busy(made)
        self.comm = made  # ipywidgets attaches its message handler here
        made.primary = True
        made.open(data={"state": state, "buffer_paths": []}, metadata={"version": __protocol_version__})

    def _on_frontend_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict):
            return
        if content.get("shown"):
            self._pending.mark_shown()
            return
        answer, reason = content.get("answer"), content.get("reason")
        request = self._pending.request
        reason_text = reason.strip()[:2_000] if isinstance(reason, str) else ""
        if answer == "once":
            self._pending.answer(Decision("once"))
        elif answer == "session":
            self._pending.answer(Decision("session", rules=request.rules) if request.rules else Decision("once"))
        elif answer == "deny":
            self._pending.answer(Decision("deny", reason_text))

    def __repr__(self) -> str:  # where widgets cannot render (a saved notebook viewed as text)
        shown = self.decision.get("text") or "waiting for an answer"
        return f"{self.request.get('title')}: {self.request.get('body')}\n[{shown}]"
