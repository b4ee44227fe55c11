"""The approval card: one question in a cell, as an anywidget (``js/approval_card.js``).

Kept apart from :mod:`.approvals` so importing the notebook layer does not import anywidget
until a question is shown. What it shows and how a click travels: see :mod:`.approvals`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anywidget
import traitlets

from ..agent.approval import Decision
from .widget import asset_path

if TYPE_CHECKING:
    from .approvals import PendingApproval

__all__ = ["ApprovalCard"]


class ApprovalCard(anywidget.AnyWidget):
    """One question in a cell. ``request`` (synced) is what is asked; ``decision`` (synced) is
    empty until settled, then ``{"verdict", "text"}``. A front end answers with the custom message
    ``{"answer": "once" | "session" | "deny", "reason": "..."}``."""

    _esm = asset_path("approval_card.js")
    _css = asset_path("approval_card.css")

    request = traitlets.Dict().tag(sync=True)
    decision = traitlets.Dict().tag(sync=True)

    def __init__(self, pending: PendingApproval, **kwargs: Any) -> None:
        r = pending.request
        super().__init__(request={"tool": r.tool, "body": r.body, "diff": r.diff or "", "rule": r.rule_text,
                                  "timeout_s": r.timeout_s, "call_id": r.call_id}, **kwargs)
        self._pending = pending
        self.on_msg(self._on_frontend_msg)

    def _on_frontend_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict):
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
        return f"SOBA asks to run {self.request.get('tool')}: {self.request.get('body')}\n[{shown}]"
