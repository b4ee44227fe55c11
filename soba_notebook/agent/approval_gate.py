"""The agent's side of approvals: ask before a call runs, record the answer, answer a denial.

:class:`ApprovalGate` sits between the agent loop and the tool registry. For each call the policy
(:mod:`.approval`) says may not run on its own, it builds an :class:`~.approval.ApprovalRequest`
(the full command or code, a diff for writes, the rule "Allow for this session" would add) and
asks the injected :class:`~.approval.Approver`, bounded by ``tools.approvalTimeoutMs`` and the
turn's cancel token, so nothing waits forever and the stop button ends a pending question.

Every answer is an ``approval`` entry in the transcript (who decided what, when; a call a session
rule allowed too). Entries of that type are never model input: the model hears a denial only as
the call's result, ``denied by the user`` and the reason. Session rules live on the path: they are
rebuilt from its ``approval`` entries at each turn start, so a resumed session keeps them and a
rewind past the answer that added one drops it.

After a call runs, :meth:`ApprovalGate.review` does the same for what a sandboxed ``shell`` command
left where Python in this kernel imports from (:mod:`.import_guard`): a card asks whether to keep it
(under ``"never"`` it is kept and named), and anything but a yes rolls it back into
``.soba/quarantine/<call id>/``.

With no approver (an :class:`~.loop.Agent` used from plain Python, no notebook or terminal to ask
in) a call that would ask is denied at once, with a message saying how to set the mode.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..cancel import CancelToken, abandon
from ..config import ToolsConfig
from ..errors import SobaError
from ..session.entries import Entry, ToolCall
from . import workspace as ws
from .approval import (
    EDIT_TOOLS,
    MCP_PREFIX,
    ApprovalRequest,
    Approver,
    Decision,
    Rule,
    matches,
    needs_approval,
    no_rule_reason,
    suggested_rules,
)
from .confine import STATE_DIR_NAME
from .import_guard import PLANTED_KEY, Planted, import_reason, import_roots, roll_back
from .notebook_run import preview_run
from .notebook_tools import preview_edit
from .tools import ToolContext, ToolOutcome

if TYPE_CHECKING:
    from ..session.store import SessionStore

__all__ = ["DIFF_LIMIT", "ApprovalGate", "NotebookPreview", "approval_entry", "mode_hint", "rules_on_path"]

#: The most characters of a diff a card shows (a rewritten 5 MB file is summarized, not shipped).
DIFF_LIMIT = 200_000
_FILE_LIMIT = 2_000_000
#: The title of the card after a sandboxed command ("SOBA asks to …"): it asks to keep, not to run.
_KEEP_FILES = "keep files a sandboxed command left where this kernel imports from"

#: What a ``notebook_edit`` call would change, computed as the edit computes it but written nowhere:
#: ``(where, the cell's source before, after)``; raises :class:`SobaError` saying why it cannot.
NotebookPreview = Callable[[Mapping[str, Any]], tuple[str, str, str]]


def mode_hint() -> str:
    """How a user lets the agent act without asking (said by every denial that no one answered)."""
    return ('to let the agent act without asking, run `%soba approval never` (or `%soba approval edits`: writes '
            'in the workspace run, shell and python still ask), or set "tools": {"approval": "never"} in '
            ".soba/config.json")


def approval_entry(call: ToolCall, decision: Decision, *, mode: str, subject: str) -> Entry:
    """The transcript entry of one answer (never model input: its type is not ``message``)."""
    data: dict[str, Any] = {"toolCallId": call.id, "tool": call.name, "verdict": decision.verdict,
                            "decidedBy": decision.by, "mode": mode, "subject": subject[:500]}
    if decision.reason:
        data["reason"] = decision.reason
    if decision.rules:
        data["rules"] = [rule.to_json() for rule in decision.rules]
    return Entry("approval", data)


def rules_on_path(path: Iterable[Entry]) -> tuple[Rule, ...]:
    """The session rules the ``approval`` entries on ``path`` added, in order, each once."""
    found: list[Rule] = []
    for entry in path:
        _add_rules(found, entry)
    return tuple(found)


def _add_rules(found: list[Rule], entry: Entry) -> None:
    """Add to ``found`` the session rules ``entry`` (an ``approval`` with that verdict) added."""
    if entry.type != "approval" or entry.data.get("verdict") != "session":
        return
    for raw in entry.data.get("rules") or ():
        rule = Rule.from_json(raw)
        if rule is not None and rule not in found:
            found.append(rule)


def _safe(call_id: str) -> str:
    """A call id as one directory name (ids come from the model)."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", call_id)[:80].lstrip(".")
    return name or "call"


def _subject(tool: str, arguments: Mapping[str, Any]) -> str:
    if tool == "shell":
        return str(arguments.get("command", ""))
    if tool == "python":
        return str(arguments.get("code", ""))
    if tool.startswith(MCP_PREFIX):  # another program's tool: what it is sent, in full
        return json.dumps(dict(arguments), ensure_ascii=False, indent=1)
    path = arguments.get("path")
    if tool == "notebook_edit":  # where in which notebook: the card must say more than the file
        cell, action = arguments.get("cell_id"), arguments.get("action")
        what = (f"insert a cell after {cell}" if cell else "insert a cell at the top") if action == "insert_after" \
            else f"{action or 'edit'} cell {cell}"
        return f"{path or 'this kernel’s notebook'}: {what}"
    return str(path) if path is not None else ""


def _diff(workspace: Path, tool: str, arguments: Mapping[str, Any], preview: NotebookPreview | None) -> str | None:
    """What a write would change, as a unified diff of the text before and after (None for a call
    that is not a write): the whole file's for ``write_file`` and ``edit_file``, the cell's for
    ``notebook_edit`` (``preview`` applies the edit to the notebook as it is now, writing nothing)."""
    path = str(arguments.get("path", ""))
    note = ""
    if tool == "write_file":
        before = _current_text(workspace, path)
        after = str(arguments.get("content", ""))
    elif tool == "edit_file":
        old, new = str(arguments.get("old", "")), str(arguments.get("new", ""))
        before = _current_text(workspace, path)
        count = before.count(old) if old else 0
        if count == 1 or (count and arguments.get("replace_all")):
            after = before.replace(old, new) if arguments.get("replace_all") else before.replace(old, new, 1)
        else:  # the tool will refuse it (no match, or not unique): show what was asked
            before, after = old, new
            note = "(old is not found exactly once in the file as it is now, so the edit will be refused)\n"
        if arguments.get("replace_all"):
            path += " (every occurrence)"
    elif tool == "notebook_edit":
        path = _subject(tool, arguments)
        after = "" if arguments.get("action") == "delete" else str(arguments.get("source", ""))
        before = ""
        try:
            if preview is None:
                raise SobaError("no notebook can be read here")
            path, before, after = preview(arguments)
        except (SobaError, OSError, ValueError) as exc:
            note = f"(the cell as it is now cannot be shown: {exc}; the new source only)\n"
        if not before and not after:
            return note + f"{path}: the cell is removed\n"
    else:
        return None
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 f"a/{path}", f"b/{path}")
    text = note + "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    if len(text) > DIFF_LIMIT:
        text = text[:DIFF_LIMIT] + f"\n… {len(text) - DIFF_LIMIT:,} more characters of the diff not shown\n"
    return text if text != note else note + "(no change)\n"


def _current_text(workspace: Path, path: str) -> str:
    """The file's text as the workspace's own confinement reads it ("" when new or unreadable)."""
    try:
        target = ws.resolve_in_workspace(workspace, path)
        if not target.is_file() or target.stat().st_size > _FILE_LIMIT:
            return ""
        return target.read_text(encoding="utf-8", errors="replace")
    except (SobaError, OSError, ValueError):
        return ""


class ApprovalGate:
    """Asks before the calls the mode says must ask (module docstring).

    ``config()`` gives the current tools config (``%soba approval edits`` applies at the next call);
    ``append(entry)`` records an entry (the agent's scrubbed append); ``approver`` answers, or
    ``None`` when no one can; ``context`` is the tools' context, through which a ``notebook_edit``
    card reads the cell it would change (without it the card shows the new source only).
    """

    def __init__(self, workspace: Path, config: Callable[[], ToolsConfig], append: Callable[[Entry], Any],
                 approver: Approver | None = None, context: ToolContext | None = None) -> None:
        self.workspace = workspace
        #: how a notebook_edit's card shows the cell before and after (the tools' context: the open notebook)
        self.preview: NotebookPreview | None = None if context is None else partial(preview_edit, context)
        #: what a notebook_run's card shows: the notebook and the sources of the cells it would run
        self.run_preview: Callable[[Mapping[str, Any]], str] | None = \
            None if context is None else partial(preview_run, context)
        self._config = config
        self._append = append
        self.approver = approver
        self.rules: tuple[Rule, ...] = ()
        # what follow() read: the path list it saw, how far, and the rules found on it so far
        self._followed: tuple[list[str], int, list[Rule]] | None = None

    def restore(self, path: Iterable[Entry]) -> None:
        """Take the session rules from the path (turn start: resume and rewind keep them right)."""
        self.rules = rules_on_path(path)
        self._followed = None

    def follow(self, store: SessionStore) -> None:
        """:meth:`restore` from ``store``'s current path, reading only the ``approval`` entries on it
        that it has not read yet: at a turn start after appends only, the new ones; after a leaf
        move (a new :meth:`~SessionStore.path_ids` list), the path's approval entries again. Never
        the whole path read back: the store keeps old entries on disk, and a turn stays O(1)."""
        ids = store.path_ids()
        seen_ids, seen, found = self._followed or (ids, 0, [])
        if seen_ids is not ids or seen > len(ids):
            seen, found = 0, []
        type_of = store.type_of
        for eid in ids[seen:]:
            if type_of(eid) == "approval":
                _add_rules(found, store.get(eid))
        self._followed = (ids, len(ids), found)
        self.rules = tuple(found)

    async def check(self, call: ToolCall, cancel: CancelToken) -> ToolOutcome | None:
        """``None``: the call may run. Otherwise the result it gets instead (denied, or cancelled)."""
        config = self._config()
        mode, sandbox = config.approval, config.sandbox
        arguments = call.arguments
        why = self._imported_here(call.name, arguments) if mode == "edits" else ""
        if not needs_approval(mode, sandbox, (), call.name, arguments,
                              sandbox_skips_approval=config.sandbox_skips_approval, imported_here=bool(why)):
            return None
        subject = _subject(call.name, arguments)
        if call.name == "notebook_run":
            subject = await asyncio.to_thread(self._run_subject, arguments)
        if matches(self.rules, call.name, arguments):
            self._append(approval_entry(call, Decision("once", "allowed by a session rule", by="rule"),
                                        mode=mode, subject=subject))
            return None
        diff = await asyncio.to_thread(_diff, self.workspace, call.name, arguments, self.preview)
        request = ApprovalRequest(call.id, call.name, subject, diff, suggested_rules(call.name, arguments),
                                  config.approval_timeout_ms / 1000, mode, no_rule_reason(call.name, arguments),
                                  why=f"Asks under approval “edits”: {why}." if why else "")
        decision = await self._ask(request, cancel)
        self._append(approval_entry(call, decision, mode=mode, subject=subject))
        if decision.verdict == "session":
            self.rules = (*self.rules, *(rule for rule in decision.rules if rule not in self.rules))
        if decision.allowed:
            return None
        if decision.verdict == "cancelled":
            return ToolOutcome(f"[cancelled: {call.name} was not run; the approval was still pending]", True,
                               data={"cancelled": True})
        return ToolOutcome(self._denial(call.name, decision, request.timeout_s), True, data={"denied": True})

    def _run_subject(self, arguments: Mapping[str, Any]) -> str:
        """A ``notebook_run`` card's body: the cells' sources, or why they cannot be shown."""
        where = str(arguments.get("path") or "this kernel’s notebook")
        if self.run_preview is None:
            return f"{where}: run cells {', '.join(map(str, arguments.get('cell_ids') or ()))}"
        try:
            return self.run_preview(arguments)
        except (SobaError, OSError, ValueError) as exc:
            return f"{where}: the cells cannot be shown ({exc}); the run will report the same problem"

    def _imported_here(self, tool: str, arguments: Mapping[str, Any]) -> str:
        """Why Python in this kernel would import the file this write targets ("" for none, or not a
        write): under "edits" such a write asks, as the sandbox's review asks about the same files."""
        path = arguments.get("path")
        if tool not in EDIT_TOOLS or not isinstance(path, str) or not path.strip():
            return ""
        return import_reason(self.workspace / path.strip(), import_roots(self.workspace), self.workspace)

    async def _ask(self, request: ApprovalRequest, cancel: CancelToken) -> Decision:
        approver = self.approver
        if approver is None:
            return Decision("deny", "no one can answer here (no notebook or terminal)", by="headless")
        task = asyncio.ensure_future(approver.ask(request, cancel))
        waiter = asyncio.ensure_future(cancel.wait())
        try:
            await asyncio.wait({task, waiter}, timeout=request.timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            await abandon(task)
        if task.done() and not task.cancelled() and task.exception() is None and not cancel.cancelled:
            decision = task.result()
        elif cancel.cancelled:
            decision = Decision("cancelled", cancel.reason or "stopped", by="user")
        elif task.done() and not task.cancelled() and task.exception() is not None:
            decision = Decision("deny", f"the approval prompt failed: {task.exception()!r}", by="error")
        else:
            decision = Decision("timeout", by="timeout")
        settle = getattr(approver, "settle", None)
        if settle is not None:
            settle(request, decision)  # the card or prompt shows how it ended
        return decision

    async def review(self, call: ToolCall, outcome: ToolOutcome, cancel: CancelToken) -> ToolOutcome:
        """After a sandboxed ``shell`` call: the files it left where Python in this kernel imports from
        (:mod:`.import_guard`) stay only when the mode asks nothing or the user keeps them on a card;
        a denial, no answer, no front end or a stop rolls them back into ``.soba/quarantine/<call id>/``.
        The result's last line says which (the model reads it, the cell shows it)."""
        found = outcome.data.get(PLANTED_KEY)
        if PLANTED_KEY not in outcome.data:
            return outcome
        data = {k: v for k, v in outcome.data.items() if k != PLANTED_KEY}
        if not isinstance(found, Planted):
            return replace(outcome, data=data)
        config = self._config()
        names, kept = found.names(), config.approval == "never"
        if kept:
            note = f"[kept (approval never): this command left code Python in this kernel would import: {names}]"
        else:
            where = f"{STATE_DIR_NAME}/quarantine/{_safe(call.id)}"
            subject = f"keep {names}"
            body = (f"Keep what this sandboxed command left where Python in this kernel imports from? {names}. "
                    f"The kernel, unsandboxed, would run it at the next import of that name. Deny moves it to "
                    f"{where}/ and restores what was there.\n\n$ {call.arguments.get('command', '')}")
            request = ApprovalRequest(call.id, call.name, body, found.diff(DIFF_LIMIT), (),
                                      config.approval_timeout_ms / 1000, config.approval, asks=_KEEP_FILES)
            decision = await self._ask(request, cancel)
            self._append(approval_entry(call, decision, mode=config.approval, subject=subject))
            kept = decision.allowed
            if kept:
                note = f"[kept (allowed by the user): {names}]"
            else:
                lines = await asyncio.to_thread(roll_back, found, self.workspace / where)
                note = (f"[rolled back ({decision.verdict} by {decision.by}): files Python in this kernel would "
                        f"import are not kept: " + "; ".join(lines) + "]")
        data[PLANTED_KEY] = {**found.to_json(), "kept": kept}
        return replace(outcome, content=f"{outcome.content.rstrip()}\n{note}", data=data)

    @staticmethod
    def _denial(tool: str, decision: Decision, timeout_s: float) -> str:
        if decision.verdict == "timeout":
            return (f"denied: no answer to the approval request within {timeout_s:,.0f} s "
                    f"(tools.approvalTimeoutMs), so {tool} was not run; {mode_hint()}")
        if decision.by == "headless":
            return f"denied: {tool} was not run, {decision.reason}; {mode_hint()}"
        if decision.by == "error":
            return f"denied: {tool} was not run, {decision.reason}"
        reason = decision.reason.strip()
        return f"denied by the user: {reason}" if reason else "denied by the user (no reason given)"
