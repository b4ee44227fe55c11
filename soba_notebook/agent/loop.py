"""The agent loop: one turn is a user message, then inferences and tool calls until the model stops.

The preflight barrier (:class:`~soba_notebook.compaction.CompactionEngine`) runs before **every**
inference, including between tool calls inside one turn, so no request known to be over the hard
limit is ever sent. Provider context overflow gets one recovery compaction and at most one retry
per turn; the same oversized request is never resent.

Cancellation (the stop button) can land anywhere: while the model streams (the request is
aborted and any partial text is kept as a cancelled reply), while a tool runs (the tool is
stopped and its call gets a recorded ``cancelled`` result), or during a compaction (no capsule is
appended). The transcript is always consistent: no tool call without a result.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cancel import CancelToken
from ..compaction import CompactionEngine, CompactionOutcome, ModelSummarizer, Trigger, TurnState
from ..config import SobaConfig
from ..errors import CompactionFailed, ContextOverflowError, ProviderError, SobaError, TurnCancelled
from ..events import EventBus
from ..flight import FlightRecorder
from ..providers.base import ModelRequest, ModelResponse, Provider, StreamEvent, repair_tool_pairing
from ..session.entries import Entry, assistant_message, checkpoint, config_change, tool_result, user_message
from ..session.store import SessionStore
from ..textclip import head_tail
from ..tokens import TokenCounter
from .secrets import scrub, scrub_value, secret_values
from .skills import SkillRegistry
from .tools import ToolContext, ToolRegistry, default_tools

__all__ = ["SYSTEM_PROMPT", "Agent", "TurnResult"]

SYSTEM_PROMPT = """You are SOBA, a coding agent running inside the user's Jupyter kernel.
Work in the workspace {workspace}. Use the tools to read, edit and run code; verify changes by running the
tests. Be concise. When you finish a meaningful milestone or change direction, call the checkpoint tool.
Older history may have been compacted into a <context_capsule>; use the recall tool with an entry id
to read any earlier entry exactly."""


@dataclass(frozen=True, slots=True)
class TurnResult:
    outcome: str  # completed | cancelled | failed
    text: str = ""
    error: str | None = None
    inferences: int = 0
    entry_ids: tuple[str, ...] = field(default=())


class Agent:
    """An agent bound to one session store, one provider, one workspace."""

    def __init__(self, store: SessionStore, config: SobaConfig, provider: Provider, *,
                 workspace: str | os.PathLike[str] | None = None, bus: EventBus | None = None,
                 flight: FlightRecorder | None = None, user_namespace: dict[str, Any] | None = None,
                 summary_provider: Provider | None = None, counter: TokenCounter | None = None,
                 tools: ToolRegistry | None = None) -> None:
        self.store = store
        self.config = config
        self.provider = provider
        self.bus = bus or EventBus()
        self.workspace = Path(workspace or config.tools.workspace).expanduser().resolve()
        self.counter = counter or TokenCounter(config.model.model)
        self.tools = tools or default_tools(config.tools)
        self.skills = SkillRegistry(self.workspace)
        self._restore_skills()
        self._secrets = secret_values(extra_names=tuple(filter(None, [config.model.api_key_env])))
        self.summary_provider = summary_provider or provider
        summarizer = ModelSummarizer(self._summary_complete, self.counter,
                                     context_window=config.model.context_window,
                                     max_output_tokens=min(4_000, config.model.max_output_tokens))
        self.engine = CompactionEngine(store, config, self.counter, bus=self.bus, summarizer=summarizer,
                                       flight=flight)
        self.tool_context = ToolContext(
            self.workspace, config.tools, store=store, user_namespace=user_namespace,
            record_intent=lambda kind, note: self.engine.record_intent(kind, note),
            append_checkpoint=lambda kind, note: self._append(checkpoint(kind, note)), skills=self.skills,
            hidden_env=frozenset(n for n in self._secrets.values()))
        self._refresh_base_tokens()

    # -- set-up ------------------------------------------------------------------------------
    def _restore_skills(self) -> None:
        for entry in reversed(self.store.path()):
            changes = entry.data.get("changes") if entry.type == "config" else None
            if isinstance(changes, Mapping) and isinstance(changes.get("activeSkills"), list):
                self.skills.set_active(changes["activeSkills"])
                return

    def system_prompt(self) -> str:
        text = SYSTEM_PROMPT.format(workspace=self.workspace)
        skills = self.skills.system_text()
        return f"{text}\n\n{skills}" if skills else text

    def _refresh_base_tokens(self) -> None:
        self.engine.base_tokens = self.counter.count_text(self.system_prompt()) + self.counter.count_tools(
            self.tools.specs())

    def set_config(self, config: SobaConfig) -> None:
        """Apply a changed config (``%auto_compact off``) and record the change in the transcript."""
        before, self.config = self.config.to_json(), config
        self.engine.set_config(config)
        changed = {f"{section}.{k}": v for section, block in config.to_json().items()
                   for k, v in block.items() if before[section].get(k) != v}
        if changed:
            self._append(config_change(changed))

    # -- one turn ----------------------------------------------------------------------------
    async def run_turn(self, prompt: str, cancel: CancelToken | None = None) -> TurnResult:
        cancel = cancel or CancelToken()
        self.tool_context.cancel = cancel
        self.bus.emit("turn_start", session_id=self.store.id, prompt=prompt[:200], provider=self.provider.label)
        written: list[str] = []
        turn = TurnState()
        texts: list[str] = []
        outcome, error = "completed", None
        try:
            written.append(self._append(user_message(prompt)).id or "")
            while True:
                if cancel.cancelled:
                    outcome = "cancelled"
                    break
                self._refresh_base_tokens()
                try:
                    await self.engine.preflight(turn, cancel)
                except TurnCancelled:
                    outcome = "cancelled"
                    break
                if cancel.cancelled:
                    outcome = "cancelled"
                    break
                request = self._request()
                try:
                    response = await self._infer(request, cancel)
                except ContextOverflowError as exc:
                    if turn.overflow_recovered:
                        outcome, error = "failed", (f"the provider still reports a context overflow after one "
                                                    f"recovery compaction ({exc}); the request was not resent")
                        break
                    turn.overflow_recovered = True
                    recovery = await self.engine.compact(Trigger.CONTEXT_OVERFLOW, cancel=cancel)
                    if recovery.outcome != "completed":
                        outcome = "cancelled" if recovery.outcome == "cancelled" else "failed"
                        error = None if outcome == "cancelled" else (
                            f"context overflow recovery compaction {recovery.outcome}: {recovery.reason}; "
                            f"the oversized request was not resent")
                        break
                    continue
                if response is None:  # cancelled mid-stream
                    outcome = "cancelled"
                    break
                turn.inferences += 1
                written.append(self._record_response(request, response).id or "")
                if response.text:
                    texts.append(response.text)
                if not response.tool_calls:
                    break
                if not await self._run_tools(response, cancel, written):
                    outcome = "cancelled"
                    break
        except CompactionFailed as exc:
            outcome, error = "failed", str(exc)
        except ProviderError as exc:
            outcome, error = "failed", str(exc)
        except asyncio.CancelledError:
            outcome = "cancelled"
            self._close_dangling(written)
            self.bus.emit("turn_end", session_id=self.store.id, outcome=outcome, error=None)
            raise
        except SobaError as exc:
            outcome, error = "failed", str(exc)
        self._close_dangling(written)
        if outcome == "completed" and self.config.compaction.compact_on_turn_complete:
            self.engine.record_intent(Trigger.TURN_COMPLETE)
        if error:
            self.bus.emit("error", source="agent", message=error)
        self.bus.emit("turn_end", session_id=self.store.id, outcome=outcome, error=error)
        return TurnResult(outcome, "\n\n".join(texts), error, turn.inferences, tuple(written))

    async def compact(self, instructions: str | None = None, cancel: CancelToken | None = None) -> CompactionOutcome:
        """``%compact``: an explicit compaction, bypassing the soft ROI threshold."""
        self._refresh_base_tokens()
        return await self.engine.compact(Trigger.USER, instructions=instructions, cancel=cancel)

    # -- pieces ------------------------------------------------------------------------------
    def _append(self, entry: Entry) -> Entry:
        if self._secrets:
            entry = Entry(entry.type, scrub_value(dict(entry.data), self._secrets), entry.id, entry.parent_id,
                          entry.ts)
        return self.store.append(entry)

    def _request(self) -> ModelRequest:
        messages = repair_tool_pairing(self.engine.model_messages())
        return ModelRequest(model=self.config.model.model, system=self.system_prompt(), messages=tuple(messages),
                            tools=self.tools.specs(), max_output_tokens=self.config.model.max_output_tokens,
                            temperature=self.config.model.temperature)

    async def _infer(self, request: ModelRequest, cancel: CancelToken) -> ModelResponse | None:
        def on_event(event: StreamEvent) -> None:
            if event.kind == "text":
                self.bus.emit("message_delta", text=event.data.get("text", ""))
            elif event.kind == "retry":
                self.bus.emit("error", source="provider", message=f"retrying: {dict(event.data)}", retry=True)

        task = asyncio.ensure_future(self.provider.complete(request, on_event=on_event))
        waiter = asyncio.ensure_future(cancel.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            waiter.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            return None
        return task.result()

    def _record_response(self, request: ModelRequest, response: ModelResponse) -> Entry:
        if response.usage is not None and response.usage.prompt_tokens > 0:
            estimated = self.engine.tracker.estimate_raw()
            self.engine.tracker.observe_usage(estimated, response.usage.prompt_tokens)
        return self._append(assistant_message(
            response.text, response.tool_calls, usage=response.usage, model=response.model or request.model,
            provider=self.provider.name, stop_reason=response.stop_reason, thinking=response.thinking or None,
            context_key=self.engine.tracker.context_key))

    async def _run_tools(self, response: ModelResponse, cancel: CancelToken, written: list[str]) -> bool:
        """Run the reply's tool calls in order; False when the turn was cancelled."""
        for call in response.tool_calls:
            if cancel.cancelled:
                return False
            self.bus.emit("tool_start", call_id=call.id, name=call.name, arguments=dict(call.arguments))
            result = await self.tools.run(call.name, call.arguments, self.tool_context)
            entry = self._append(tool_result(call.id, call.name, result.content, is_error=result.is_error,
                                             cancelled=result.cancelled, full_chars=result.full_chars))
            written.append(entry.id or "")
            self.bus.emit("tool_end", call_id=call.id, name=call.name, is_error=result.is_error,
                          cancelled=result.cancelled,
                          content=head_tail(scrub(result.content, self._secrets)))
            if result.cancelled or cancel.cancelled:
                return False
            if call.name in ("activate_skill", "deactivate_skill") and result.data.get("changed"):
                self._append(config_change({"activeSkills": list(result.data.get("activeSkills", []))}))
        return True

    def _close_dangling(self, written: list[str]) -> None:
        """Give every tool call of this turn that has no result a recorded cancelled result."""
        path = self.store.path()
        answered = {e.tool_call_id for e in path if e.role == "tool"}
        for entry in reversed(path):
            if entry.role == "user":
                break
            if entry.role == "assistant":
                for call in entry.tool_calls:
                    if call.id not in answered:
                        e = self._append(tool_result(call.id, call.name, "cancelled before it ran", is_error=True,
                                                     cancelled=True))
                        written.append(e.id or "")
                break

    async def _summary_complete(self, system: str, prompt: str, max_tokens: int) -> str:
        model = self.config.model.compaction_model or self.config.model.model
        request = ModelRequest(model=model, system=system, messages=({"role": "user", "content": prompt},),
                               max_output_tokens=max_tokens, purpose="summarize")
        response = await self.summary_provider.complete(request)
        return response.text
