"""What a cell shows besides the live budget widget: notes, tool results, per-turn summaries.

Owns the static, per-cell pieces of the notebook UI, as pure functions that return
:class:`CellOutput` (HTML for a notebook, plain text for a terminal and for ``text/plain``):

* :func:`activity` — the one live line of a running cell (``waiting for gpt-4o-mini · 12 s``),
  dim, updated in place by :mod:`~soba_notebook.notebook.live`;
* :func:`background_started` — the line a background cell returns with, wrapping between words;
* :func:`note` — a styled informational note (the offline-model notice): a normal note in the
  notebook's colours, never a red stderr box;
* :func:`tool_block` — one tool call's result, collapsed, with its last line (a shell's
  ``[exit code N]``) always in the summary and the body already clipped head + tail by
  :func:`soba_notebook.textclip.head_tail`;
* :func:`notebook_edit_block` — a ``notebook_edit``: the cell id and what happened in the
  summary, the source's diff (before → after) collapsed under it;
* :func:`stopped_turn` — what the stop button did to a turn, said in the cell (both forms): that
  it was cancelled and which capsules, if any, were appended before the stop;
* :func:`cell_summary` — the static record of what one cell's turn (or ``%compact``) did to the
  context: the budget when it ended and each compaction in it. The live widget is displayed once
  per session and keeps changing; these summaries are what each cell's output keeps for good.

Nothing here touches IPython; :func:`show` is the one place that displays a :class:`CellOutput`.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..pricing import spend_text
from ..textclip import head_tail, last_line
from .display import CompactionSummary, format_tokens, skip_text

__all__ = ["CellOutput", "activity", "background_started", "cell_summary", "note", "notebook_edit_block",
           "offline_notice", "show",
           "status_lines", "stopped_turn", "tool_block"]

_NOTE_STYLE = ("margin:4px 0;padding:6px 10px;border-left:3px solid var(--jp-info-color1,#0288d1);"
               "background:var(--jp-layout-color2,#f3f6f9);color:var(--jp-ui-font-color1,inherit);"
               "font-family:var(--jp-ui-font-family,system-ui,sans-serif);font-size:var(--jp-ui-font-size1,13px);"
               "border-radius:2px")
_DIM_STYLE = "color:var(--jp-ui-font-color2,#757575);font-size:var(--jp-ui-font-size0,12px)"


@dataclass(frozen=True, slots=True)
class CellOutput:
    """One piece of cell output in both forms."""

    html: str
    text: str

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return self.text


def offline_notice(workspace: str) -> str:
    """What the offline model will do and where, said before it writes anything."""
    return ("No model provider is configured, so the agent runs SOBA's fixed offline demo script "
            "(deterministic, no network), not your prompt. It builds a small calculator package in the demo "
            f"folder calc_demo/ inside {workspace}, and it never writes over an existing file. To use a real "
            "model put a \"model\" block in .soba/config.json (for example {\"model\": {\"provider\": \"openai\", "
            "\"model\": \"gpt-4o-mini\", \"apiKeyEnv\": \"OPENAI_API_KEY\"}}) and set the API key in the "
            "environment.")


def note(text: str, *, title: str = "Note") -> CellOutput:
    """A styled note (info colours of the current theme), ``class="soba-note"``."""
    body = (f"<div class='soba-note' data-soba-note style='{_NOTE_STYLE}'><b>{html.escape(title)}:</b> "
            f"{html.escape(text)}</div>")
    return CellOutput(body, f"{title}: {text}")


def activity(text: str) -> CellOutput:
    """The running cell's live line (``class="soba-activity"``): dim, one line, no box."""
    body = f"<div class='soba-activity' data-soba-activity style='{_DIM_STYLE};margin:2px 0'>{html.escape(text)}</div>"
    return CellOutput(body, text)


def background_started(session_id: str) -> CellOutput:
    """What a ``%soba --background`` cell says as it returns (``class="soba-background"``): in the
    UI font, wrapping between words. Printed, it went to a stream output, which JupyterLab renders
    monospace with ``word-break: break-all`` and cut words in two at the cell's edge."""
    text = (f"running in the background on session {session_id}; `%soba status` to check, "
            "`%soba stop` to cancel")
    code = "<code style='white-space:nowrap'>{}</code>".format
    body = (f"<div class='soba-background' data-soba-background style='{_DIM_STYLE};margin:2px 0;"
            "font-family:var(--jp-ui-font-family,system-ui,sans-serif);word-break:normal;overflow-wrap:anywhere'>"
            f"running in the background on session {code(html.escape(session_id))}; {code('%soba status')} to "
            f"check, {code('%soba stop')} to cancel</div>")
    return CellOutput(body, text)


def tool_block(name: str, status: str, content: str) -> CellOutput:
    """A collapsed tool result: ``name · status · <last line>``, the body clipped head + tail."""
    shown = head_tail(content)
    last = last_line(content)
    summary = f"<code>{html.escape(name)}</code> · {html.escape(status)}"
    if last:
        summary += f" · <span class='soba-tool__last'>{html.escape(last[:160])}</span>"
    body = (f"<details class='soba-tool' data-soba-tool><summary>{summary}</summary>"
            f"<pre>{html.escape(shown)}</pre></details>")
    return CellOutput(body, f"[{status}] {name}: {last[:200]}")


_DIFF_COLOURS = {"+": "var(--jp-success-color1,#388e3c)", "-": "var(--jp-error-color1,#d32f2f)",
                 "@": "var(--jp-ui-font-color2,#757575)"}


def _diff_html(diff: str) -> str:
    lines = []
    for line in diff.splitlines():
        colour = _DIFF_COLOURS.get(line[:1])
        text = html.escape(line)
        lines.append(f"<span style='color:{colour}'>{text}</span>" if colour else text)
    return "\n".join(lines)


def notebook_edit_block(changes: Sequence[Mapping[str, Any]]) -> CellOutput:
    """A collapsed ``notebook_edit``: ``notebook_edit · replaced cell a1b2c3 (code) in x.ipynb``, and
    under it each cell's diff (``-`` before, ``+`` after), clipped head + tail."""
    heads, bodies, texts = [], [], []
    for change in changes:
        head = (f"{change.get('action', 'changed')} cell {change.get('cell_id', '?')} ({change.get('cell_type', '?')}) "
                f"in {change.get('path', 'the notebook')}")
        if change.get("outputs_cleared"):
            head += f"; {int(change['outputs_cleared']):,} output(s) cleared"
        diff = head_tail(str(change.get("diff", "")), head_lines=8, tail_lines=8)
        heads.append(head)
        bodies.append(f"<div><b>{html.escape(head)}</b></div><pre style='margin:2px 0'>{_diff_html(diff)}</pre>")
        texts.append(f"[ok] notebook_edit: {head}\n" + "\n".join(f"    {line}" for line in diff.splitlines()))
    summary = f"<code>notebook_edit</code> · {html.escape('; '.join(heads))}"
    body = (f"<details class='soba-tool soba-notebook-edit' data-soba-notebook-edit><summary>{summary}</summary>"
            f"{''.join(bodies)}</details>")
    return CellOutput(body, "\n".join(texts))


def stopped_turn(outcome: str | None, ends: Sequence[Mapping[str, Any]] = ()) -> CellOutput:
    """What the stop button did to a turn: ``outcome`` is the turn's (``None``: it was still queued
    and never started); ``ends`` the ``compaction_end`` payloads of the cell. A capsule appended by
    a compaction that completed before the stop is named; a cancelled one appended nothing."""
    if outcome is None:
        return note("it never started; nothing was sent and nothing was appended", title="Turn cancelled")
    kept = [str(e.get("checkpoint_id") or "a capsule") for e in ends if e.get("outcome") == "completed"]
    if outcome != "cancelled":
        return note(f"the stop came as the turn ended; it {outcome} and the transcript is consistent",
                    title="Turn not cancelled")
    if not kept:
        return note("the transcript is consistent and no capsule was appended", title="Turn cancelled")
    return note(f"the transcript is consistent; the capsule of the compaction that completed before the stop "
                f"stays ({', '.join(kept)}) and no capsule was appended after it", title="Turn cancelled")


def _budget_words(snapshot: Mapping[str, Any]) -> str:
    effective, hard = snapshot.get("effective"), snapshot.get("hard_limit")
    if effective is None:
        return "context not measured yet"
    words = f"context {format_tokens(effective)} / {format_tokens(hard)} tokens"
    if snapshot.get("usage_percent") is not None:
        words += f" ({snapshot['usage_percent']:.1f}%)"
    if snapshot.get("request_words"):
        words += f", {snapshot['request_words']}"
    return words


def cell_summary(snapshot: Mapping[str, Any], ends: Sequence[Mapping[str, Any]], *, what: str = "turn") -> CellOutput:
    """The static record of one cell: the budget at its end and each compaction that ran in it.

    ``ends`` are the ``compaction_end`` payloads seen during the cell. Completed compactions get a
    line each; skips are one dim plain-words line (the last one only: they repeat).
    """
    hard = snapshot.get("hard_limit")
    done = [CompactionSummary.from_event(e, hard_limit=hard) for e in ends]
    notable = [c for c in done if c.outcome != "skipped"]
    skips = [c for c in done if c.outcome == "skipped"]
    head = f"After this {what}: {_budget_words(snapshot)}"
    if notable:
        head += f" · {len(notable)} compaction{'s' if len(notable) != 1 else ''}"
    text_lines = [head, *(f"  {'✓' if c.status == 'completed' else '⚠'} {c.text}" for c in notable)]
    rows = "".join(f"<li data-status='{html.escape(c.status)}'>{html.escape(c.text)}</li>" for c in notable)
    skip_html = ""
    if skips:
        words = skip_text(skips[-1])
        text_lines.append(f"  · {words}")
        skip_html = f"<div class='soba-summary__skip' style='{_DIM_STYLE}'>{html.escape(words)}</div>"
    body = (f"<div class='soba-summary' data-soba-summary style='font-size:var(--jp-ui-font-size1,13px);"
            f"margin:4px 0'><span style='{_DIM_STYLE}'>{html.escape(head)}</span>"
            + (f"<ul style='margin:2px 0 0 0;padding-left:18px'>{rows}</ul>" if rows else "")
            + skip_html + "</div>")
    return CellOutput(body, "\n".join(text_lines))


_STATUS_LABELS = (
    ("session", "session"), ("file", "transcript"), ("provider", "provider"), ("offline", "offline model"),
    ("busy", "busy"), ("queued", "turns queued"), ("entries", "entries"), ("effective", "context"),
    ("measured", "measured"),
    ("auto_compact", "auto-compaction"), ("pending_intents", "pending intents"), ("active_skills", "active skills"),
    ("instructions", "instructions"),
    ("last_compaction", "last compaction"), ("skip_note", "skipped since"), ("last_turn", "last turn"),
    ("cost", "cost"), ("provider_notes", "model server"), ("approval", "approval"),
    ("project_config", "project config"),
)


def _status_value(key: str, status: Mapping[str, Any]) -> str:
    value = status.get(key)
    if key == "effective":
        words = f"{format_tokens(value)} / {format_tokens(status.get('hard_limit'))} tokens"
        if status.get("request_words"):
            words += f", {status['request_words']}"
        return words + f" (soft {format_tokens(status.get('soft_limit'))}, {status.get('source') or 'not measured'})"
    if key == "skip_note":
        return str(value) if value else "none"
    if key == "cost":
        return spend_text(value if isinstance(value, Mapping) else None)
    if key == "last_compaction":
        if not value:
            return "none yet"
        summary = CompactionSummary.from_event(value, hard_limit=status.get("hard_limit"))
        # the flight record's key: what a user greps .soba/flight.jsonl for
        return f"{summary.text} · {summary.outcome} · operation {summary.operation_id or '—'}"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or "none"
    if isinstance(value, int):
        return f"{value:,}"
    return "—" if value is None else str(value)


def status_lines(status: Mapping[str, Any]) -> list[str]:
    """``%soba status`` as aligned ``label  value`` lines, numbers with thousands separators."""
    width = max(len(label) for _, label in _STATUS_LABELS)
    return [f"{label:<{width}}  {_status_value(key, status)}" for key, label in _STATUS_LABELS]


def show(output: CellOutput, frontend: str) -> None:
    """Display ``output`` as HTML in a notebook, or print its text in a terminal."""
    if frontend == "terminal":
        print(output.text)
        return
    from IPython.display import display

    display({"text/html": output.html, "text/plain": output.text}, raw=True)
