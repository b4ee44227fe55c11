"""The agent loop: one turn is a user message, then inferences and tool calls until the model stops.

The preflight barrier (:class:`~soba_notebook.compaction.CompactionEngine`) runs before **every**
inference, including between tool calls inside one turn, so no request known to be over the hard
limit is ever sent. Provider context overflow gets one recovery compaction and at most one retry
per turn; the same oversized request is never resent, nor one the recovery did not make smaller
than the rejected one (:mod:`~soba_notebook.compaction.overflow`).

Cancellation (the stop button) can land anywhere: while the model streams (the request is
aborted and any partial text is kept as a cancelled reply), while a tool runs (the tool is
stopped and its call gets a recorded ``cancelled`` result), or during a compaction (no capsule is
appended). The transcript is always consistent: no tool call without a result. A bug (an exception
that is not a :class:`~soba_notebook.errors.SobaError`) ends the turn too: ``failed``, its error
naming the exception and where it was raised, its open tool calls answered, ``turn_end`` emitted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cancel import CancelToken, abandon
from ..compaction import CompactionEngine, CompactionOutcome, EngineParts, ModelSummarizer, Trigger, TurnState
from ..compaction.kernel_section import KernelStateProvider
from ..compaction.overflow import overflow_figures, request_tokens, retry_budget, retry_refusal
from ..compaction.summarize import SummaryCall, capsule_schema
from ..compaction.summary_budget import summary_window
from ..config import ConfigWarning, SobaConfig
from ..errors import CompactionFailed, ContextOverflowError, ProviderError, SessionError, SobaError, TurnCancelled
from ..events import EventBus
from ..flight import FlightRecorder
from ..image_tokens import sent_image_rule
from ..pricing import server_address
from ..providers.base import (
    ModelRequest,
    ModelResponse,
    Provider,
    StreamEvent,
    SummarySource,
    ToolSpec,
    arguments_error,
)
from ..providers.capabilities import CapableProvider, capable
from ..relearn import relearn_calibration
from ..scrub import Scrubber
from ..session.entries import (
    Entry,
    ToolCall,
    assistant_message,
    checkpoint,
    config_change,
    tool_result,
    user_message,
)
from ..session.payloads import (
    ErrorPayload,
    MessageDeltaPayload,
    RequestStartPayload,
    ResponseKind,
    ResponseStartPayload,
    RetryPayload,
    ToolEndPayload,
    ToolStartPayload,
    TurnEndPayload,
    TurnOutcome,
    TurnStartPayload,
    config_data,
)
from ..session.store import SessionStore
from ..textclip import head_tail
from ..tokens import MESSAGE_OVERHEAD, TokenCounter
from .approval import Approver
from .approval_gate import ApprovalGate
from .confine import check_workspace_root
from .exact_count import ExactCounts
from .instructions import InstructionsWatcher
from .mcp_tools import McpHub, sync_mcp_tools
from .rendering import RenderingLearner, relearn_rendering
from .skills import SkillRegistry
from .spend import SpendMeter, provider_base_url
from .tools import ToolContext, ToolRegistry, default_tools
from .window_fit import fit_warnings

__all__ = ["READ_ONLY_TOOLS", "SYSTEM_PROMPT", "Agent", "TurnResult"]

log = logging.getLogger(__name__)

#: Tools that change nothing: the same call again, with nothing changed in between, is a loop.
READ_ONLY_TOOLS = frozenset({"read_file", "list_files", "glob", "grep", "recall", "notebook_read"})

SYSTEM_PROMPT = """You are SOBA, a coding agent running inside the user's Jupyter kernel.
Work in the workspace {workspace}. Use the tools to read, edit and run code; verify changes by running the
tests. Be concise. When you finish a meaningful milestone or change direction, call the checkpoint tool.
Older history may have been compacted into a <context_capsule>; use the recall tool with an entry id
to read any earlier entry exactly."""


@dataclass(frozen=True, slots=True)
class TurnResult:
    #: ``stopped``: a per-turn limit ended it (``error`` says which)
    outcome: TurnOutcome
    text: str = ""
    error: str | None = None
    inferences: int = 0
    entry_ids: tuple[str, ...] = field(default=())


@dataclass(slots=True)
class _TurnRun:
    """What one turn has done so far: the entries it wrote, the model's texts, how it ends, and
    (after an overflow) the ``(budget, rejected)`` tokens the retried request is held to."""

    turn: TurnState = field(default_factory=TurnState)
    written: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    repeats: Counter[str] = field(default_factory=Counter)
    outcome: TurnOutcome = "completed"
    error: str | None = None
    retry_limit: tuple[int, int] | None = None
    #: the result text of a tool call the turn ended before answering (None: "cancelled before it ran")
    unanswered: str | None = None

    def end(self, outcome: TurnOutcome, error: str | None = None) -> bool:
        """End the turn with ``outcome``; ``False`` so a step can ``return run.end(...)``."""
        self.outcome, self.error = outcome, error
        return False


class Agent:
    """An agent bound to one session store, one provider, one workspace."""

    def __init__(self, store: SessionStore, config: SobaConfig, provider: Provider, *,
                 workspace: str | os.PathLike[str] | None = None, bus: EventBus | None = None,
                 flight: FlightRecorder | None = None, user_namespace: dict[str, Any] | None = None,
                 summary_provider: Provider | None = None, counter: TokenCounter | None = None,
                 tools: ToolRegistry | None = None, approver: Approver | None = None,
                 kernel_state: KernelStateProvider | None = None,
                 project_root: str | os.PathLike[str] | None = None) -> None:
        self.store = store
        self.config = config
        self.provider = capable(provider)  # every capability answered (providers/capabilities.py)
        self.bus = bus or EventBus()
        self.workspace = Path(workspace or config.tools.workspace).expanduser().resolve()
        check_workspace_root(self.workspace, allow_broad=config.tools.allow_broad_workspace,
                             source=config.sources.get("tools.workspace", "tools.workspace"))
        self.counter = counter or TokenCounter(config.model.model)
        self._default_tools = tools is None
        self.tools = tools or default_tools(config.tools)
        #: the configured MCP servers, started with the agent; their tools join the registry (mcp_tools.py)
        self.mcp = McpHub(config.mcp_servers, self.workspace) if config.mcp_servers else None
        if self.mcp is not None:
            self.mcp.start()
            sync_mcp_tools(self.tools, self.mcp, self.config.tools)
            self._mcp_generation = self.mcp.generation
            for line in self.mcp.notes():  # a server that did not start: one line, its tools absent
                warnings.warn(line, ConfigWarning, stacklevel=2)
        self.skills = SkillRegistry(self.workspace)
        self._restore_skills()
        #: ~/.soba/AGENTS.md and the project's AGENTS.md (or CLAUDE.md): re-read between turns
        self.instructions = InstructionsWatcher(Path(project_root).resolve() if project_root else self.workspace,
                                                Path.home(), config.agent.instructions_max_tokens,
                                                self.counter.count_text)
        self.instructions.refresh()
        self._scrubber = self._fresh_scrubber()
        # one provider serving both is completed, and closed, once
        self.summary_provider = capable(summary_provider) if summary_provider not in (None, provider) else self.provider
        summarizer = ModelSummarizer(self._summary_complete, self.counter, context_window=config.model.context_window)
        summarizer.fit(config.model.context_window)
        #: what the session's requests cost in money (agent/spend.py)
        self.spend = SpendMeter(store, self.bus)
        self.engine = CompactionEngine(store, config, self.counter, EngineParts(
            self.bus, summarizer, flight=flight, kernel_state=kernel_state, summary_cost=self.spend.ledger.take_summary,
            count_text=self.provider.count_text_tokens,  # a capsule's text as the server counts it
            scrub=lambda v: self._scrubber.merged(self._fresh_scrubber()).json(v)))  # the turn's secrets and now's
        self._exact = ExactCounts(self.engine.tracker, self.counter, flight)
        self.tool_context = ToolContext(
            self.workspace, config.tools, store=store, user_namespace=user_namespace,
            record_intent=lambda kind, note: self.engine.record_intent(kind, note),
            append_checkpoint=lambda kind, note: self._append(checkpoint(kind, note)), skills=self.skills,
            hidden_env=self._scrubber.names, scrubber=self._scrubber,
            refresh_secrets=lambda: self.refresh_secrets(keep_known=True))
        #: asks before shell, python and writes as tools.approval says (approver: the notebook's card or prompt)
        self.approvals = ApprovalGate(self.workspace, lambda: self.config.tools, self._append, approver,
                                      self.tool_context)
        self.approvals.follow(store)
        #: a note that starts each turn (the notebook layer's: the user's own cells since the last turn)
        self.turn_note: Callable[[], str | None] | None = None
        self._provider_prepared = False
        self._refresh_base_tokens()
        #: what the config makes impossible in this window (agent/window_fit.py), warned once at open
        self.fit_notes = fit_warnings(config, self.engine.base_tokens)
        for line in self.fit_notes:
            warnings.warn(line, ConfigWarning, stacklevel=2)
        #: what the server renders, learned from its replies (agent/rendering.py)
        self._rendering = RenderingLearner(self.counter)
        if not self.counter.calibration.samples(self.counter.model):  # a reopened session: its usage
            if relearn_rendering(store, self._rendering):  # counted as the old agent counted, first
                self.engine.tracker.invalidate()
            relearned = relearn_calibration(store, self.counter, base_tokens=self.engine.base_tokens,
                                            capsule_tokens=self.engine.capsule_tokens)
            self.engine.tracker.anchor = relearned.anchor
        self._request_context: tuple[int, str] = (0, "root")
        self._request_span: tuple[list[Entry], int] | None = None

    # -- set-up ------------------------------------------------------------------------------
    def _fresh_scrubber(self) -> Scrubber:
        return Scrubber.from_environ(extra_names=tuple(filter(None, [self.config.model.api_key_env])))

    def refresh_secrets(self, *, keep_known: bool = False) -> None:
        """Re-read the environment's secrets (a variable set after start): at every turn start, and
        with ``keep_known`` after every ``python`` or ``shell`` run (before its result is written),
        keeping this turn's secrets even if the code unset a variable after printing it."""
        fresh = self._fresh_scrubber()
        self._scrubber = self._scrubber.merged(fresh) if keep_known else fresh
        self.tool_context.scrubber = self._scrubber
        self.tool_context.hidden_env = self._scrubber.names

    def _restore_skills(self) -> None:
        """The skills the latest config change on the path made active (only configs are read back)."""
        ids, type_of = self.store.path_ids(), self.store.type_of
        for i in range(len(ids) - 1, -1, -1):
            if type_of(ids[i]) != "config":
                continue
            changes = config_data(self.store.get(ids[i])).get("changes")
            if isinstance(changes, Mapping) and isinstance(changes.get("activeSkills"), list):
                self.skills.set_active(changes["activeSkills"])
                return

    def system_prompt(self) -> str:
        # what changes least first, so a server's prompt cache keeps the longest prefix: SOBA's own
        # text, the standing instructions (changed only by editing their files), the active skills
        sections = (SYSTEM_PROMPT.format(workspace=self.workspace), self.instructions.current.system_text(),
                    self.skills.system_text())
        return "\n\n".join(s for s in sections if s)

    def reload_instructions(self) -> str | None:
        """Re-read the instruction files if one changed (between turns, never within one); the one
        line that says what is now loaded, once, or None when there is nothing new to say."""
        self.instructions.refresh(self.config.agent.instructions_max_tokens)
        return self.instructions.take_note()

    def _refresh_base_tokens(self) -> None:
        # messages counted in the form the wire sends them (SOBA's JSON tool protocol: its text forms)
        if self.counter.set_message_form(self.provider.message_form):
            self.engine.tracker.invalidate()
        self.counter.set_images(sent_image_rule(self.config.model.vision, self.provider.accepts_images,
                                                self.provider.image_rule), self.config.model.keep_images)
        system = self._sent_system(self.system_prompt(), self.tools.specs())
        # the system prompt is a message like any other: its per-message overhead counts too
        self.engine.base_tokens = (self.counter.count_text(system) + (MESSAGE_OVERHEAD if system else 0)
                                   + self.counter.count_tools(self._rendered_tools()))

    def _sent_system(self, system: str, tools: tuple[ToolSpec, ...]) -> str:
        """The system prompt as the provider sends it: with SOBA's own JSON tool protocol
        (providers/tool_protocol.py) it carries the tool definitions as text, counted there."""
        return self.provider.sent_system(system, tools)

    def _rendered_tools(self, tools: tuple[ToolSpec, ...] | None = None) -> tuple[ToolSpec, ...]:
        """The tool definitions the model's prompt holds (of ``tools``, default: the registry's):
        all of them, unless the provider learned that its server's chat template drops them
        (llama-server with a template without tool syntax). Those are still sent but never
        counted: the budget measures what the model reads."""
        if not self.provider.renders_tools:
            return ()
        return self.tools.specs() if tools is None else tools

    async def _prepare_provider(self) -> None:
        """Once per agent, before the first request is sized: let the provider ask its server what
        it renders (a provider without ``prepare`` has nothing to learn), then, while the token
        calibration has no sample yet, ask the server's exact count of the request about to be
        checked (llama-server renders and tokenizes it without generating) and calibrate on it,
        so even the first budget check is the server's figure, not an estimate in another
        model's tokenizer."""
        if self._provider_prepared:
            return
        self._provider_prepared = True
        for provider in {id(p): p for p in (self.provider, self.summary_provider)}.values():
            await provider.prepare()
        self._fit_summaries()
        if not self.counter.calibration.samples(self.counter.model):
            self._refresh_base_tokens()
            await self._exact.count(self.provider.count_request_tokens,
                                    self._model_request(estimate=0), when="first_request")

    def _fit_summaries(self) -> None:
        """Summary requests fit the summary provider's server, not only the config."""
        if isinstance(summarizer := self.engine.parts.summarizer, ModelSummarizer):
            summarizer.fit(summary_window(self.config.model.context_window, known_window(self.summary_provider)))

    def set_config(self, config: SobaConfig) -> None:
        """Apply a changed config (``%auto_compact off``) and record the change in the transcript."""
        self.engine.set_config(config)  # first: off the agent's thread it raises before anything changed
        before, self.config = self.config.to_json(), config
        self._fit_summaries()
        self.tool_context.config = config.tools
        if self._default_tools:
            self.tools = default_tools(config.tools)  # a switched tool appears or goes at the next request
            sync_mcp_tools(self.tools, self.mcp, self.config.tools)
        changed = {f"{section}.{k}": v for section, block in config.to_json().items()
                   for k, v in block.items() if before[section].get(k) != v}
        if changed:
            self._append(config_change(changed))

    # -- one turn ----------------------------------------------------------------------------
    async def run_turn(self, prompt: str, cancel: CancelToken | None = None) -> TurnResult:
        cancel = cancel or CancelToken()
        self.tool_context.cancel = cancel
        self.refresh_secrets()
        self.instructions.refresh(self.config.agent.instructions_max_tokens)  # its note waits for take_note
        self.approvals.follow(self.store)  # the session rules of the path as it is now (rewind)
        self.spend.start_turn()
        self.bus.emit("turn_start", **TurnStartPayload(session_id=self.store.id, prompt=prompt[:200],
                                                       provider=self.provider.label))
        run = _TurnRun()
        try:
            await self._turn_steps(run, prompt, cancel)
        except (CompactionFailed, ProviderError) as exc:
            run.end("failed", str(exc))
        except asyncio.CancelledError:
            run.outcome = "cancelled"
            self._close_dangling(run.written)
            self.engine.publish()  # the next request, as the cancelled turn left it
            self.bus.emit("turn_end", **TurnEndPayload(session_id=self.store.id, outcome=run.outcome, error=None))
            raise
        except SobaError as exc:
            run.end("failed", str(exc))
        except Exception as exc:  # a bug, not a user's or provider's problem: the turn still ends
            log.debug("turn ended by an internal error", exc_info=exc)
            run.end("failed", internal_error(exc))
            run.unanswered = f"not run: the turn ended on an internal error ({type(exc).__name__}: {exc})"
        return self._finish_turn(run)

    async def _turn_steps(self, run: _TurnRun, prompt: str, cancel: CancelToken) -> None:
        """Append the turn's note and prompt, then infer and run tools until a step ends the turn."""
        note = self.turn_note() if self.turn_note is not None else None
        if note:
            run.written.append(self._append(user_message(note, source="cell_history")).id or "")
        run.written.append(self._append(user_message(prompt)).id or "")
        while await self._step(run, cancel):
            pass

    async def _step(self, run: _TurnRun, cancel: CancelToken) -> bool:
        """One inference (after its preflight) and its tool calls; ``False`` when the turn ends."""
        self.engine.owner.apply_posted()  # what the notebook asked for the next step (ownership.py)
        if self.mcp is not None and self.mcp.generation != self._mcp_generation:  # a server exited
            self._mcp_generation = self.mcp.generation
            if sync_mcp_tools(self.tools, self.mcp, self.config.tools):
                self._refresh_base_tokens()
        if cancel.cancelled:
            return run.end("cancelled")
        turn, max_steps = run.turn, self.config.agent.max_steps_per_turn
        if turn.inferences >= max_steps:
            return run.end("stopped", f"turn stopped after {turn.inferences:,} model steps (agent.maxStepsPerTurn "
                                      f"is {max_steps:,}); the transcript is complete, ask again to go on")
        await self._prepare_provider()
        self._refresh_base_tokens()
        try:
            await self.engine.preflight(turn, cancel)
        except TurnCancelled:
            return run.end("cancelled")
        if cancel.cancelled:
            return run.end("cancelled")
        if self._exact.after_compaction_due():  # the capsule no reply has counted: the server counts it
            await self._exact.count(self.provider.count_request_tokens,
                                    self._model_request(estimate=0), when="after_compaction")
        request = self._request()
        if run.retry_limit is not None:
            refusal = retry_refusal(self._request_tokens(request), *run.retry_limit)
            run.retry_limit = None
            if refusal:
                return run.end("failed", refusal)
        try:
            response = await self._infer(request, cancel, turn.inferences + 1)
        except ContextOverflowError as exc:
            return await self._recover_overflow(run, request, exc, cancel)
        if response is None:  # cancelled mid-stream
            return run.end("cancelled")
        turn.inferences += 1
        run.written.append(self._record_response(request, response).id or "")
        if response.text:
            run.texts.append(response.text)
        if not response.tool_calls:
            return False
        ran = await self._run_tools(response, cancel, run.written, run.repeats)
        if ran == "cancelled":
            return run.end("cancelled")
        if ran == "repeated":
            return run.end("stopped", (
                f"turn stopped: the model asked for the same tool call with the same arguments more than "
                f"{self.config.agent.max_repeated_tool_calls:,} times (agent.maxRepeatedToolCalls); "
                "the repeated call was not run"))
        return True

    async def _recover_overflow(self, run: _TurnRun, request: ModelRequest, exc: ContextOverflowError,
                                cancel: CancelToken) -> bool:
        """The provider refused the request as too long: one recovery compaction per turn, after
        which the next request may be sent only if it is smaller than the rejected one."""
        if run.turn.overflow_recovered:
            return run.end("failed", f"the provider still reports a context overflow after one recovery "
                                     f"compaction ({exc}); the request was not resent")
        run.turn.overflow_recovered = True
        rejected = self._request_tokens(request)
        budget = retry_budget(rejected, *overflow_figures(exc), window=known_window(self.provider),
                              reply=self.config.model.max_output_tokens,
                              next_turn=self.config.compaction.safety_reserve_tokens)
        run.retry_limit = (budget, rejected)
        # the recovery aims at the retry's budget, not the configured hard limit: the server's
        # context may be far smaller than model.contextWindow
        check = self.engine.measure()
        check = dataclasses.replace(check, hard_limit=min(check.hard_limit, budget))
        recovery = await self.engine.run(Trigger.CONTEXT_OVERFLOW, cancel=cancel, check=check)
        if recovery.outcome == "cancelled":
            return run.end("cancelled")
        if recovery.outcome != "completed":
            return run.end("failed", f"context overflow recovery compaction {recovery.outcome}: {recovery.reason}; "
                                     f"the oversized request was not resent")
        return True

    def _finish_turn(self, run: _TurnRun) -> TurnResult:
        """Close dangling tool calls, note a completed turn for compaction, report the turn's end."""
        try:
            self._close_dangling(run.written, run.unanswered)
        except SessionError as exc:  # the disk that failed the turn fails this too: report it once
            run.outcome, run.error = "failed", run.error or str(exc)
        if run.outcome == "completed" and self.config.compaction.compact_on_turn_complete:
            self.engine.record_turn_complete()
        if run.error and run.outcome == "failed":  # a stopped turn is a limit doing its job, not an error
            self.bus.emit("error", **ErrorPayload(source="agent", message=run.error))
        # the next request, with the reply and tool results the turn appended: what the cell's
        # end-of-turn line, the widget and ``%soba status`` show from now on (compaction/snapshot.py)
        self.engine.publish()
        self.bus.emit("turn_end", **TurnEndPayload(session_id=self.store.id, outcome=run.outcome, error=run.error))
        return TurnResult(run.outcome, "\n\n".join(run.texts), run.error, run.turn.inferences, tuple(run.written))

    async def compact(self, instructions: str | None = None, cancel: CancelToken | None = None) -> CompactionOutcome:
        """``%compact``: an explicit compaction, bypassing the soft ROI threshold."""
        await self._prepare_provider()
        self._refresh_base_tokens()
        return await self.engine.compact(Trigger.USER, instructions=instructions, cancel=cancel)

    # -- pieces ------------------------------------------------------------------------------
    def _append(self, entry: Entry) -> Entry:
        entry = Entry(entry.type, self._scrubber.json(dict(entry.data)), entry.id, entry.parent_id, entry.ts)
        return self.store.append(entry)

    def _request(self) -> ModelRequest:
        # What this request measures, fixed now: its reply's provider usage describes this
        # context, whatever is appended while it is in flight (another kernel on the session).
        self._request_context = (self.engine.tracker.estimate_raw(), self.engine.tracker.context_key)
        self._request_span = self.engine.tracker.usage_span()
        # what the budget check holds this request to be: the provider's count of the last
        # reply's prompt plus a calibrated estimate of what came after
        return self._model_request(estimate=self.engine.tracker.check().effective)

    def _model_request(self, *, estimate: int) -> ModelRequest:
        # orphaned tool calls and results are repaired once, by the wire (providers/base.repair_tool_pairing)
        messages = self.engine.model_messages()
        return ModelRequest(model=self.config.model.model, system=self.system_prompt(), messages=tuple(messages),
                            tools=self.tools.specs(), max_output_tokens=self.config.model.max_output_tokens,
                            temperature=self.config.model.temperature, estimated_input_tokens=estimate)

    def _request_tokens(self, request: ModelRequest) -> int:
        # in the units the recovery compaction measures in (its budget and the retry's size)
        return request_tokens(self.counter, self._sent_system(request.system, request.tools),
                              self._rendered_tools(request.tools), request.messages, sized=self.engine.tracker.sized)

    async def _infer(self, request: ModelRequest, cancel: CancelToken, inference: int = 1) -> ModelResponse | None:
        streamed: list[str] = []
        began: list[ResponseKind] = []

        def on_event(event: StreamEvent) -> None:
            kind = _RESPONSE_KINDS.get(event.kind)
            if kind is not None and (not began or kind == "tool_call"):
                # the request has succeeded: the reply began (each tool call is announced: writing
                # one's arguments can take a local model a minute)
                began.append(kind)
                name = event.data.get("name") if kind == "tool_call" else None
                self.bus.emit("response_start", **ResponseStartPayload(
                    kind=kind, name=name if isinstance(name, str) and name else None))
            if event.kind == "text":
                streamed.append(event.data.get("text", ""))
                self.bus.emit("message_delta", **MessageDeltaPayload(text=event.data.get("text", "")))
            elif event.kind == "retry":
                self.bus.emit("retry", **retry_payload(event.data))

        self.bus.emit("request_start", **RequestStartPayload(model=request.model, provider=self.provider.label,
                                                             inference=inference))
        task = asyncio.ensure_future(self.provider.complete(request, on_event=on_event))
        waiter = asyncio.ensure_future(cancel.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            self._record_partial(request, streamed, "cancelled")
            raise
        finally:
            waiter.cancel()
        if not task.done():
            await abandon(task)
            self._record_partial(request, streamed, "cancelled")
            return None
        try:
            return task.result()
        except ContextOverflowError:
            raise
        except ProviderError:  # reset, stall, deadline: what streamed before is kept
            self._record_partial(request, streamed, "error")
            raise

    def _record_partial(self, request: ModelRequest, streamed: list[str], reason: str) -> None:
        """Record the text a cut-off reply streamed, marked partial (the module docstring's promise)."""
        if "".join(streamed):
            self._append(assistant_message("".join(streamed), model=request.model, provider=self.provider.name,
                                           stop_reason=reason, partial=True))

    def _record_response(self, request: ModelRequest, response: ModelResponse) -> Entry:
        estimated, context_key = self._request_context
        if response.usage is not None and response.usage.reported \
                and context_key == self.engine.tracker.context_key:  # a count of our own teaches nothing
            self.engine.tracker.observe_usage(estimated, response.usage.prompt_tokens)
            self._rendering.after_reply(self.engine.tracker, self._request_span, response.usage.prompt_tokens,
                                        self.provider.rendering_hint)
        entry = self._append(assistant_message(
            response.text, response.tool_calls, usage=response.usage, model=response.model or request.model,
            provider=self.provider.name, stop_reason=response.stop_reason, thinking=response.thinking or None,
            context_key=context_key, estimated_input=request.estimated_input_tokens,
            server=server_address(provider_base_url(self.provider))))
        self.spend.reply(entry)
        return entry

    async def _run_tools(self, response: ModelResponse, cancel: CancelToken, written: list[str],
                         repeats: Counter[str]) -> str:
        """Run the reply's tool calls in order. ``"ok"``; ``"cancelled"`` when the turn was cancelled;
        ``"repeated"`` when a call repeats one already run ``maxRepeatedToolCalls`` times this turn
        with no other state-changing call in between (that call and the rest of the reply are
        answered with a recorded "not run" result)."""
        limit = self.config.agent.max_repeated_tool_calls
        stopped = False
        for call in response.tool_calls:
            if cancel.cancelled:
                return "cancelled"
            arguments = call.raw_arguments if call.raw_arguments is not None else canonical_arguments(call.arguments)
            key = f"{call.name}\0{arguments}"
            repeats[key] += 1
            if stopped or repeats[key] > limit:
                stopped = True
                self._answer_without_running(call, written, f"not run: {call.name} with these arguments already "
                                             f"ran {limit:,} times in this turn (agent.maxRepeatedToolCalls)")
                continue
            bad_arguments = arguments_error(call)
            if bad_arguments is not None:
                self._answer_without_running(call, written, bad_arguments)
                continue
            self.bus.emit("tool_start", **ToolStartPayload(call_id=call.id, name=call.name,
                                                           arguments=dict(call.arguments)))
            result = await self.approvals.check(call, cancel) if call.name in self.tools else None
            if result is None:  # it runs; what a sandboxed command left for import is reviewed after
                ran = await self.tools.run(call.name, call.arguments, self.tool_context)
                result = await self.approvals.review(call, ran, cancel)
            entry = self._append(tool_result(call.id, call.name, result.content, is_error=result.is_error,
                                             cancelled=result.cancelled, full_chars=result.full_chars,
                                             exit_code=result.data.get("exit_code"),
                                             files_changed=result.data.get("files_changed"), images=result.images,
                                             cell_runs=result.data.get("cell_runs")))
            written.append(entry.id or "")
            ended = ToolEndPayload(call_id=call.id, name=call.name, is_error=result.is_error,
                                   cancelled=result.cancelled, content=head_tail(self._scrubber.text(result.content)))
            changes = result.data.get("notebook")
            if isinstance(changes, list) and changes:  # a notebook edit: its diff for the cell's display
                ended["notebook"] = self._scrubber.json(changes)
            self.bus.emit("tool_end", **ended)
            if result.cancelled or cancel.cancelled:
                return "cancelled"
            if call.name in ("activate_skill", "deactivate_skill") and result.data.get("changed"):
                self._append(config_change({"activeSkills": list(result.data.get("activeSkills", []))}))
            if call.name not in READ_ONLY_TOOLS:
                # something may have changed: repeating an earlier call is no longer a loop
                count = repeats[key]
                repeats.clear()
                repeats[key] = count
        return "repeated" if stopped else "ok"

    def _answer_without_running(self, call: ToolCall, written: list[str], message: str) -> None:
        """Record an error result for a call that is not run, so the transcript stays paired."""
        self.bus.emit("tool_start", **ToolStartPayload(call_id=call.id, name=call.name, arguments=dict(call.arguments)))
        entry = self._append(tool_result(call.id, call.name, message, is_error=True))
        written.append(entry.id or "")
        self.bus.emit("tool_end", **ToolEndPayload(call_id=call.id, name=call.name, is_error=True, cancelled=False,
                                                   content=message))

    def close_open_calls(self, note: str) -> int:
        """Give the tool calls of the session's last turn that have no result a recorded cancelled
        result saying ``note`` (a session taken over from a kernel whose tool was still running:
        its result can never be appended now); returns how many were closed."""
        written: list[str] = []
        self._close_dangling(written, cancelled_note=note)
        return len(written)

    def _close_dangling(self, written: list[str], why: str | None = None, *,
                        cancelled_note: str = "cancelled before it ran") -> None:
        """Give every tool call of this turn that has no result a recorded result: cancelled (saying
        ``cancelled_note``), or ``why`` (an error result) when the turn ended for another reason."""
        ids, get, turn = self.store.path_ids(), self.store.get, list[Entry]()
        for i in range(len(ids) - 1, -1, -1):  # this turn only, newest first: never the whole history
            entry = get(ids[i])
            if entry.role == "user":
                break
            turn.append(entry)
        answered = {e.tool_call_id for e in turn if e.role == "tool"}  # a result follows its call
        for entry in turn:
            if entry.role == "assistant":
                for call in entry.tool_calls:
                    if call.id not in answered:
                        e = self._append(tool_result(call.id, call.name, why or cancelled_note,
                                                     is_error=True, cancelled=why is None))
                        written.append(e.id or "")
                break

    async def aclose(self) -> None:
        """Close the model provider and, when it is another one (``model.compactionModel``), the
        summary provider: their HTTP clients. Call it on the loop that ran the requests."""
        others = [self.summary_provider] if self.summary_provider is not self.provider else []
        for provider in (self.provider, *others):
            await provider.aclose()
        if self.mcp is not None:  # its servers' processes end with the session
            await asyncio.to_thread(self.mcp.close)

    async def _summary_complete(self, call: SummaryCall) -> str:
        model = self.config.model.compaction_model or self.config.model.model
        previous = call.previous.to_json() if call.previous is not None else None
        request = ModelRequest(model=model, system=call.system, messages=({"role": "user", "content": call.prompt},),
                               max_output_tokens=call.max_output_tokens, purpose="summarize",
                               response_schema=capsule_schema(call.max_output_tokens),
                               estimated_input_tokens=self.counter.calibrated(
                                   self.counter.count_text(call.system) + self.counter.count_text(call.prompt)),
                               summary_source=SummarySource(call.entries, previous))
        on_text = call.on_text
        response = await self.summary_provider.complete(request, on_event=None if on_text is None else (
            lambda event: on_text(str(event.data.get("text", ""))) if event.kind == "text" else None))
        self.spend.summary(self.summary_provider, response.model or model, response.usage)
        return response.text


#: The stream events that mean the reply began, and what ``response_start`` calls them.
_RESPONSE_KINDS: dict[str, ResponseKind] = {"text": "text", "thinking": "thinking", "tool_call_start": "tool_call"}


# -- what a turn says about itself (pure) --------------------------------------------------------
def retry_payload(data: Mapping[str, Any]) -> RetryPayload:
    """A provider's ``retry`` stream event as the bus's typed ``retry`` payload (plain reason first)."""
    detail = str(data.get("reason") or "")
    delay, attempt, most = data.get("delay"), data.get("attempt"), data.get("maxRetries")
    status = data.get("status")
    return RetryPayload(provider=str(data.get("provider") or ""),
                        attempt=attempt if isinstance(attempt, int) else 0,
                        max_retries=most if isinstance(most, int) else 0,
                        delay=float(delay) if isinstance(delay, int | float) else 0.0,
                        status=status if isinstance(status, int) else None,
                        reason=str(data.get("say") or detail or "the request failed"), detail=detail)


def known_window(provider: CapableProvider) -> int | None:
    """The context the provider knows its server has (the configured one if it learned none)."""
    window = provider.effective_context_window
    return window if isinstance(window, int) and window > 0 else None


def internal_error(exc: Exception) -> str:
    """The turn's error for a bug: what was raised and where, without a traceback on screen."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
    return (f"internal error: {type(exc).__name__}: {exc}{where}. This is a bug in soba_notebook or in a tool, not "
            "in your request; the turn was ended, its tool calls were answered and the transcript is intact")


def canonical_arguments(arguments: Mapping[str, Any]) -> str:
    """One text per argument value, whatever the key order the model used."""
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)
