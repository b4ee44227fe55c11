"""One notebook's SOBA: the agent handle, its runtime thread, its budget display, its output.

The magics are thin; this class does the work they share. Every job (a turn, ``%compact``, a
capsule summary) is submitted with an event queue of its own, and the runtime thread's events go
to the queue of the job that emitted them (:meth:`AgentRuntime.job_tag`), so a cell shows only its
own job, whatever runs before or after it. A foreground turn's *kernel* thread waits, pulling its
events and rendering them into the running cell (:mod:`.live` says what, including the live line
while the model is waited for), until the turn ends; ``%compact`` and the other queued jobs
render the same way. A background turn (``%%soba --background``) makes one display in its own
cell before the cell returns, and a thread of its own renders the turn into that display,
updated in place (:mod:`.board`), while the kernel runs other cells.

What the budget says comes from one place: the snapshot the engine publishes on the agent's
thread (``compaction/snapshot.py``). :meth:`NotebookSession.budget_snapshot` has the agent's
thread measure and publish it when no job runs, and otherwise reads the one the running job
published last; the kernel thread never measures while the agent's thread owns the engine.
Nor does it change the agent: a setting, config edits, a checkpoint or a rewind is made on the
agent's thread, between jobs or at the running turn's next step (:mod:`.agent_changes`).
A kernel interrupt while waiting cancels the turn through the agent's cancel signal and waits
for the transcript to be consistent again; the cell then says so, in a note and its static
summary, in HTML and in text/plain (see :func:`cellview.stopped_turn`).

Each kernel writes a session of its own: the first magic that needs one starts a new session,
never the project's newest (another kernel may be writing that one). ``%soba resume`` opens another
session only if no other live kernel writes it (the refusal names that kernel), or takes it over
when asked; switching sessions while a turn runs cancels that turn and waits for it to end first
(its tool stopped, a ``cancelled`` result recorded), and says so.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import os
import queue
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from ..agent import AgentHandle, AgentRuntime, TurnResult, open_agent
from ..agent.approval import runs_without_asking
from ..agent.kernel_state import tracker_for
from ..agent.runtime import QueuedTurn
from ..cancel import CancelToken
from ..compaction.kernel_section import KernelStateProvider
from ..compaction.snapshot import BudgetSnapshot
from ..config import ConfigEdit, SobaConfig, config_edit, load_config
from ..errors import ConfigError
from ..events import Event, EventBus
from ..trusted_import import trusted_import
from . import cellview
from .agent_changes import Change, change_agent
from .approvals import APPROVAL_EVENT, ApprovalSlot, NotebookApprover
from .board import CellBoard
from .busy import busy_while_waiting
from .cell_history import CellHistory, note_text
from .display import CompactionSummary, Frontend, budget_line, detect_frontend, skip_text
from .kernel_cells import KernelCells
from .live import CellRenderer
from .live_notebook import LiveNotebooks
from .user_outputs import DisplayRecorder, output_summaries
from .workspace_trust import WarningRegistry, config_saying_trust, trust_status

__all__ = ["OFFLINE_NOTICE", "NotebookSession"]

OFFLINE_NOTICE = ("No model provider is configured: using the offline scripted model (deterministic, no network). "
                  "To use a real model put a \"model\" block in .soba/config.json (for example "
                  '{"model": {"provider": "openai", "model": "gpt-4o-mini", "apiKeyEnv": "OPENAI_API_KEY"}}) '
                  "and set the API key in the environment.")


#: How long switching sessions waits for the cancelled turn to end (a tool is killed at once; a
#: model request is aborted at once): long only when something does not honour its cancel.
SWITCH_WAIT_SECONDS = 30.0

#: How long a budget reading waits for the idle agent's thread to measure (it takes milliseconds):
#: past that the last published snapshot is shown, so a stuck agent thread never hangs the kernel.
BUDGET_WAIT_SECONDS = 5.0

#: What ``%soba status`` shows of the engine's BudgetSnapshot, under the snapshot's own names.
_SNAPSHOT_FIGURES = ("effective", "hard_limit", "soft_limit", "context_window", "source", "request", "request_words")


def _clip(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def kernel_identity() -> dict[str, str | None]:
    """What names this kernel in a session's lease record: its kernel id and notebook, when known."""
    kernel = None
    try:
        get_connection_file = trusted_import("ipykernel.connect").get_connection_file

        kernel = Path(get_connection_file()).stem.removeprefix("kernel-")
    except Exception:  # not in a kernel (terminal IPython, a script): no id to give
        pass
    return {"kernel": kernel, "notebook": os.environ.get("JPY_SESSION_NAME") or None}


class NotebookSession:
    """The SOBA state of one kernel: lazily opened on the first magic that needs it."""

    def __init__(self, project_dir: str | os.PathLike[str] | None = None, *,
                 user_namespace: dict[str, Any] | None = None, frontend: Frontend | None = None,
                 overrides: Mapping[str, Any] | None = None, namespace_hidden: Mapping[str, Any] | None = None
                 ) -> None:
        self.project_dir = Path(project_dir or os.getcwd()).resolve()
        self.user_namespace = user_namespace
        #: the names the shell itself put in the namespace (IPython's ``user_ns_hidden``)
        self.namespace_hidden = namespace_hidden
        self.frontend = frontend or detect_frontend()
        self.overrides: dict[str, Any] = {k: dict(v) for k, v in (overrides or {}).items()}
        self.handle: AgentHandle | None = None
        self.runtime: AgentRuntime | None = None
        self.bus: EventBus | None = None
        self.display: Any = None
        self._unsubscribe: Callable[[], None] | None = None
        self.last_result: TurnResult | None = None
        self.notices: list[str] = []
        self._deferred_said: dict[str, Any] = {}
        self._trust_said: set[str] = set()  # the untrusted-settings lines already printed
        self._warned: WarningRegistry = {}  # Python's "once" record for the config's other warnings
        self._provider_notes_shown = 0
        self.cell_history = CellHistory()
        self._background_queues: set[int] = set()  # ids of the event queues of background turns
        self.live_notebooks = LiveNotebooks()  # the notebook open in JupyterLab, through SOBA's extension
        #: how notebook_run runs a cell in this kernel (set by the extension when there is a shell)
        self.kernel_cells: KernelCells | None = None
        #: the user's cells' display() calls, for the next turn's note (set by the extension with a shell)
        self.user_displays: DisplayRecorder | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def config(self) -> SobaConfig:
        """The config as the files and this kernel's overrides say now; a project config's untrusted
        settings are named in one line, once (notebook/workspace_trust.py)."""
        return config_saying_trust(lambda: load_config(project_dir=self.project_dir, overrides=self.overrides or None),
                                   self._trust_said, self._warned)

    def ensure(self, *, session: str | None = None, new: bool = False, take_over: bool = False) -> AgentHandle:
        """The kernel's agent: opened on first use on a new session of its own; with ``session``
        (an id or a path) or ``new``, switched to that session.

        The session to switch to is opened (its writer lease taken) before anything of the current
        one is touched, so a refusal (another live kernel writes it) changes nothing here. Then
        the running turn or job, if any, is cancelled and waited for, and the cell says so.
        """
        if self.handle is not None and session is None and not new:
            return self.handle
        if self.handle is not None and session is not None and self._is_current(session) \
                and self.handle.store.lease is not None and self.handle.store.lease.held:
            return self.handle  # already this kernel's (a lost one is taken back, or refused, below)
        bus = EventBus()
        handle = open_agent(self.project_dir, config=self.config(), session=session, new=new or session is None,
                            bus=bus, user_namespace=self.user_namespace, take_over=take_over,
                            holder=kernel_identity(), kernel_state=self._kernel_state())
        if self.runtime is not None:
            self._stop_before_switching(handle.store.id)
        self.close()
        self.bus = bus
        self.handle = handle
        self.runtime = AgentRuntime(self.handle.agent)
        self._unsubscribe = self.bus.subscribe(_router(self.runtime))
        # questions go to the cell of the job that asks (its event queue), answered there
        self.handle.agent.approvals.approver = NotebookApprover(
            self.frontend, self.runtime.job_tag, lambda events: id(events) in self._background_queues)
        self._connect_kernel(self.handle)
        self.budget_snapshot()  # the session's budget as it stands, before any display asks
        if len(self.handle.store) == 0:
            self._offer_memory()
        if self.handle.offline and OFFLINE_NOTICE not in self.notices:
            self.notices.append(OFFLINE_NOTICE)
            workspace = str(self.handle.agent.workspace)
            cellview.show(cellview.note(cellview.offline_notice(workspace), title="Offline demo"), self.frontend)
        return self.handle

    def _is_current(self, session: str) -> bool:
        assert self.handle is not None
        store = self.handle.store
        return session == store.id or Path(session).expanduser().resolve() == store.file.resolve()

    def _stop_before_switching(self, target: str) -> None:
        """Cancel what runs on the current session and wait for it to end, saying what was stopped."""
        assert self.runtime is not None and self.handle is not None
        current = self.handle.store.id
        stopped = self.runtime.stop(f"switching to session {target}", timeout=SWITCH_WAIT_SECONDS)
        if stopped.label is None:
            if stopped.dropped:
                print(f"dropped {stopped.dropped:,} queued turn(s) of session {current} before switching")
            return
        outcome = getattr(stopped.result, "outcome", None)
        what = f"the running turn “{_clip(stopped.label)}” on session {current}"
        if not stopped.ended:
            print(f"cancelled {what}, but it had not ended after {SWITCH_WAIT_SECONDS:g}s; switched anyway "
                  f"(it ends on its own, on session {current})")
        elif outcome in (None, "cancelled"):
            print(f"cancelled {what} before switching: a running tool was stopped and its call recorded as "
                  f"cancelled; the transcript is consistent")
        else:
            print(f"{what} ended ({outcome}) before switching")
        if stopped.dropped:
            print(f"dropped {stopped.dropped:,} queued turn(s) of session {current}")

    def _kernel_state(self) -> KernelStateProvider | None:
        """The kernel's variables for every capsule (none without a namespace)."""
        if self.user_namespace is None:
            return None
        return tracker_for(self.user_namespace, self.namespace_hidden).lines

    def _connect_kernel(self, handle: AgentHandle) -> None:
        """What only a kernel knows: its variables for every capsule, the user's cells for each turn."""
        handle.agent.turn_note = self._turn_note
        notebooks = handle.agent.tool_context.notebooks  # the notebook tools' "this notebook" and its runs
        notebooks.kernel_notebook = self.notebook_path
        notebooks.kernel_runs = self._kernel_runs
        notebooks.documents = self.live_notebooks
        if self.kernel_cells is not None:
            notebooks.cells = self.kernel_cells

    def notebook_path(self) -> str | None:
        """The kernel's notebook as Jupyter Server told it (``__session__``, ``JPY_SESSION_NAME``), or None."""
        named = self.user_namespace.get("__session__") if self.user_namespace is not None else None
        return named if isinstance(named, str) and named else os.environ.get("JPY_SESSION_NAME") or None

    def _kernel_runs(self) -> list[Any]:
        """The kernel's runs for ``notebook_read``, or none when cell history is not shared."""
        return self.cell_history.runs() if self.share_cell_history() else []

    def share_cell_history(self) -> bool:
        """``notebook.shareCellHistory``, or by default: on in a notebook, off in terminal IPython."""
        configured = self.handle.agent.config.notebook.share_cell_history if self.handle else None
        return configured if configured is not None else self.frontend != "terminal"

    def after_cell(self, result: Any = None) -> None:
        """IPython's ``post_run_cell``: note the user's cell; keep the kernel state's order current."""
        self.cell_history.record(result)
        if self.kernel_cells is not None:
            self.kernel_cells.after_cell(result)
        if self.user_displays is not None:
            self.user_displays.after_cell(result)
        if self.user_namespace is not None:
            tracker_for(self.user_namespace).observe()

    def _turn_note(self) -> str | None:
        """The note of the user's cells since the last turn (taken once), or None when not shared."""
        cells, dropped = self.cell_history.take()
        if not self.share_cell_history():
            return None
        shell = self.kernel_cells.shell if self.kernel_cells is not None else None  # IPython keeps the outputs
        shown = output_summaries(shell, self.user_displays, (c.number for c in cells))
        return note_text(cells, dropped, outputs=shown) or None

    def kernel_state(self) -> list[str] | None:
        """The kernel's user variables as capsule lines, or None outside a kernel."""
        return tracker_for(self.user_namespace).lines() if self.user_namespace is not None else None

    def _offer_memory(self) -> None:
        """A new session hears what Project Memory holds; nothing is loaded without being asked."""
        from ..memory.project import ProjectMemory

        assert self.handle is not None
        memory = ProjectMemory(self.handle.paths.root)
        offered = memory.offer()
        if offered:
            names = "; ".join(f"{pc.id} ({pc.title or 'untitled'})" for pc in offered[:5])
            print(f"Project Memory holds {len(offered)} capsule(s): {names}. Start from one with "
                  f"%capsule load {memory.path_for(offered[0].id)}")

    def close(self) -> None:
        """Stop the agent (a running turn is cancelled and waited for) and give its session up."""
        if self.runtime is not None:
            self.runtime.close()
        if self.handle is not None:
            self.handle.close()
        if self.display is not None and hasattr(self.display, "detach"):
            self.display.detach()
        if self._unsubscribe is not None:
            self._unsubscribe()
        self.handle, self.runtime, self.display, self._unsubscribe = None, None, None, None

    def show_budget(self, *, show: bool = True, side: bool = False) -> Any:
        """Attach (once) and show the session's one budget display (``side``: in a Lab side panel)."""
        handle = self.ensure()
        from .widget import attach_budget_display

        assert self.bus is not None
        fresh = self.display is None
        self.display = attach_budget_display(self.bus, handle.store.id, frontend=self.frontend, show=False)
        snapshot = self.budget_snapshot()  # idle: measured now on the agent's thread, and shown by the bus
        if fresh and snapshot is not None and self.runtime is not None and self.runtime.busy:
            self.bus.emit("budget", **snapshot.event())  # what the running job published last, read only
        if hasattr(self.display, "flush"):
            self.display.flush()  # the state a saved notebook keeps is never an older one
        if show and self.frontend != "terminal":
            from .sidepanel import open_side_panel

            if side and open_side_panel(self.display, handle.store.id):
                print(f"the live budget is in the side panel “SOBA budget · {handle.store.id}”")
                return self.display
            from IPython.display import display

            display(self.display)
        elif show:
            print(budget_line(self.display.state.snapshot()))
        return self.display

    # -- turns -------------------------------------------------------------------------------
    def run(self, prompt: str, *, background: bool = False, timeout: float | None = None) -> TurnResult | None:
        handle = self.ensure()
        assert self.runtime is not None
        # The live widget is displayed once per session (pinned: updated in place); each cell keeps a
        # static summary of its own turn instead (cellview.cell_summary).
        fresh = self.display is None
        self.show_budget(show=fresh and self.frontend != "terminal", side=handle.agent.config.ui.side_panel)
        if not self.runtime.busy:
            self.apply_config_edits()
            self.say_instructions()
        events: queue.Queue[Event] = queue.Queue()  # this turn's events only (see _router)
        queued = self.runtime.submit(prompt, tag=events)
        if queued.position:
            print(f"queued: {queued.position} turn(s) ahead of this one; it runs when they finish")
        if background:
            cellview.show(cellview.background_started(handle.store.id), self.frontend)
            # the result is the session's as soon as the turn ends (the future's callback runs before
            # the runtime reports idle), not when its cell has finished drawing it
            queued.future.add_done_callback(self._remember_result)
            self._background_queues.add(id(events))
            queued.future.add_done_callback(lambda _f: self._background_queues.discard(id(events)))
            self._render_in_background(queued, events)
            return None
        renderer = CellRenderer(self.frontend)
        deadline = time.monotonic() + timeout if timeout else None
        try:
            with busy_while_waiting():  # Lab says Busy until the cell ends (notebook/busy.py)
                while not queued.future.done() or not events.empty():
                    try:
                        event = events.get(timeout=0.05)
                    except queue.Empty:
                        if deadline and time.monotonic() > deadline:
                            raise TimeoutError(f"the turn did not finish within {timeout}s") from None
                        renderer.tick()
                        continue
                    _render(event, renderer)
        except KeyboardInterrupt:
            # this turn, not whatever job runs ahead of it (a queued turn is simply dropped)
            self.runtime.withdraw(queued, "interrupted from the kernel")
            if queued.future.cancelled():
                cellview.show(cellview.stopped_turn(None), self.frontend)
                return None
            result = queued.future.result()
            _drain(events, renderer)  # the turn's last events (its end, a cancelled compaction)
            renderer.finish(cellview.stopped_turn(result.outcome, renderer.compactions))
            self.last_result = result
            self.end_cell(renderer.compactions, what="cancelled turn" if result.outcome == "cancelled" else "turn")
            return result
        result = queued.future.result()
        self.last_result = result
        self.end_cell(renderer.compactions, renderer=renderer)
        self._show_provider_notes()
        return result

    def _remember_result(self, future: concurrent.futures.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is None:
            self.last_result = future.result()

    def _render_in_background(self, queued: QueuedTurn, events: queue.Queue[Event]) -> threading.Thread:
        """Render a background turn into the cell that started it, from a thread of its own.

        In a notebook the board's one display is made now, while this cell runs; the thread
        updates it in place (:mod:`.board`) and runs in this cell's context, so anything it
        prints is this cell's too. In a terminal the turn prints as it goes."""
        board = CellBoard() if self.frontend != "terminal" else None
        renderer = CellRenderer(self.frontend, display=board.display if board is not None else None)
        # where a question of this turn is shown later: a display made now, while the cell runs
        asks = self.handle is not None and self.handle.agent.config.tools.approval != "never"
        slot = ApprovalSlot(above=board) if board is not None and asks else None
        thread = threading.Thread(target=contextvars.copy_context().run,
                                  args=(self._follow, queued, events, renderer, board, slot),
                                  name="soba-background-cell", daemon=True)
        thread.start()
        return thread

    def _follow(self, queued: QueuedTurn, events: queue.Queue[Event], renderer: CellRenderer,
                board: CellBoard | None, slot: ApprovalSlot | None = None) -> None:
        """The background turn's events into ``renderer`` until it ends, then its summary."""
        while not queued.future.done() or not events.empty():
            try:
                _render(events.get(timeout=0.1), renderer, slot)
            except queue.Empty:
                renderer.tick()
            if board is not None:
                board.tick()
        try:
            result: TurnResult | None = queued.future.result()
        except BaseException:  # withdrawn before it started (or raised): nothing of it ran here
            result = None
        if result is not None:
            self.last_result = result
        if result is None or result.outcome == "cancelled":
            renderer.finish(cellview.stopped_turn(result.outcome if result else None, renderer.compactions))
        elif result.outcome == "failed":
            renderer.finish(cellview.note(f"the turn failed: {result.error}", title="Turn failed"))
        elif result.outcome == "stopped" and result.error:
            renderer.finish(cellview.note(result.error, title="Turn stopped"))
        self.end_cell(renderer.compactions, renderer=renderer,
                      what="cancelled turn" if result is not None and result.outcome == "cancelled" else "turn")
        if board is not None:
            board.flush()

    def _show_provider_notes(self) -> None:
        """What the provider learned about its server that the user should act on (a context
        smaller than ``model.contextWindow``, no usage in streams), each said once."""
        if self.handle is None:
            return
        notes = list(self.handle.agent.provider.warnings)
        fresh = notes[self._provider_notes_shown:]
        self._provider_notes_shown = len(notes)
        for text in fresh:
            cellview.show(cellview.note(text, title="Model server"), self.frontend)

    def end_cell(self, compactions: list[dict[str, Any]], *, what: str = "turn",
                 renderer: CellRenderer | None = None) -> None:
        """Deliver the widget's final state before the cell ends (so a saved notebook holds it) and
        leave the cell's static summary (notebook only: a terminal display already printed it), in
        the place of ``renderer``'s live line when one is still showing."""
        if self.display is not None and hasattr(self.display, "flush"):
            self.display.flush()
        summary = None
        if self.frontend != "terminal" and self.display is not None:
            budget = self.display.budget if hasattr(self.display, "budget") else self.display.state
            summary = cellview.cell_summary(budget.snapshot(), compactions, what=what)
        if renderer is not None:
            renderer.finish(summary)
        elif summary is not None:
            cellview.show(summary, self.frontend)

    def run_job(self, job: Callable[[CancelToken], Awaitable[Any]], label: str, *,
                timeout: float | None = None, summary: str | None = None) -> Any:
        """Run model work other than a turn (``%compact``, ``%capsule create``) and wait for it.

        It is queued behind the running turn and the jobs already queued (its position is
        printed the way ``%soba`` prints a queued turn), so no summary is generated while a
        turn's model request is in flight. The kernel's stop button, or ``%soba stop``, cancels
        it like a turn: its cancel token is set (the summary request is aborted and nothing is
        appended), or, if it has not started yet, it is dropped from the queue and ``None`` is
        returned. With ``summary`` the cell ends with the widget flushed and a static summary
        (see :meth:`end_cell`). The cell shows only this job's events, never those of a turn
        running ahead of it.
        """
        self.ensure()
        assert self.runtime is not None
        events: queue.Queue[Event] = queue.Queue()
        queued = self.runtime.submit_job(job, label, tag=events)
        if queued.position:
            print(f"queued: {queued.position} job(s) ahead of this {label}; it runs when they finish")
        deadline = time.monotonic() + timeout if timeout else None
        renderer = CellRenderer(self.frontend)  # the job's compaction progress, in this cell
        try:
            with busy_while_waiting():
                while True:
                    _drain(events, renderer)
                    try:
                        return queued.future.result(timeout=0.05)
                    except concurrent.futures.TimeoutError:
                        if deadline and time.monotonic() > deadline:
                            raise TimeoutError(f"{label} did not finish within {timeout}s") from None
                    except concurrent.futures.CancelledError:
                        print(f"{label} cancelled before it started; nothing was appended")
                        return None
        except KeyboardInterrupt:
            self.runtime.withdraw(queued, "interrupted from the kernel")
            if queued.future.cancelled():
                print(f"\n{label} cancelled before it started; nothing was appended")
                return None
            return queued.future.result()
        finally:
            _drain(events, renderer)
            if summary is not None:
                self.end_cell(renderer.compactions, what=summary, renderer=renderer)
            else:
                renderer.finish()

    def budget_snapshot(self) -> BudgetSnapshot | None:
        """The budget every display reads (module docstring); :meth:`budget_reading` says which."""
        return self.budget_reading()[0]

    def budget_reading(self) -> tuple[BudgetSnapshot | None, str]:
        """The budget and what it shows: with no job running, measured and published now on the agent's
        thread (so it is current, and the widget shows it too), waited for at most
        :data:`BUDGET_WAIT_SECONDS`; while a job runs, or if that wait ends, the snapshot published
        last, without waiting. ``None`` before a session is open."""
        if self.handle is None or self.runtime is None:
            return None, "no session open"
        engine = self.handle.agent.engine
        if not self.runtime.busy:  # through the one job queue, like every other use of the engine
            measured = change_agent(self.runtime, engine.publish, "budget", wait=BUDGET_WAIT_SECONDS)
            if measured.when == "now":
                return measured.result, "measured now"
        last = engine.snapshot()
        if last is None:
            return None, "not measured yet: the agent's thread is busy"
        return last, "as the running job last measured it (the agent's thread is busy)"

    def status(self) -> dict[str, Any]:
        handle = self.ensure()
        assert self.runtime is not None
        snapshot, measured = self.budget_reading()
        last = snapshot.last_compaction if snapshot is not None else None
        skipped = snapshot.skipped if snapshot is not None else None
        return {
            "session": handle.store.id, "file": str(handle.store.file), "provider": handle.agent.provider.label,
            "offline": handle.offline, "busy": self.runtime.busy, "queued": self.runtime.queued,
            "entries": len(handle.store), "measured": measured,
            # the published snapshot's figures, under its own names
            **{name: getattr(snapshot, name) if snapshot else None for name in _SNAPSHOT_FIGURES},
            "auto_compact": handle.agent.config.compaction.auto,
            "pending_intents": list(snapshot.pending_intents) if snapshot else [],
            "active_skills": list(handle.agent.skills.active()),
            "instructions": handle.agent.instructions.current.describe(),
            "last_compaction": dict(last) if last is not None else None,
            "skip_note": skip_text(CompactionSummary.from_event(skipped)) if skipped is not None else None,
            "last_turn": self.last_result.outcome if self.last_result else None,
            "provider_notes": list(handle.agent.provider.warnings),
            "approval": _approval_status(handle.agent),
            "project_config": trust_status(self.project_dir),
            # immutable values swapped on the agent's thread: reading them here never races a request
            "cost": handle.agent.spend.ledger.to_event(),
        }

    def apply_config_edits(self) -> ConfigEdit | None:
        """Take config file edits over before a turn: say what applies now and what after ``%soba --new``."""
        if self.handle is None or self.runtime is None:
            return None
        agent = self.handle.agent
        try:
            edit = config_edit(agent.config, self.config())
        except ConfigError as exc:
            print(f"config not applied: {exc}; the session keeps its current config")
            return None
        if edit.applied:
            change_agent(self.runtime, lambda: agent.set_config(edit.config), "config edits")  # idle: at once
            keys = ", ".join(f"{k} = {new!r}" for k, (_, new) in edit.applied.items())
            print(f"config: {keys} applied from this turn on")
        fresh = {k: v for k, v in edit.deferred.items() if self._deferred_said.get(k) != v[1]}
        if fresh:
            self._deferred_said.update({k: new for k, (_, new) in fresh.items()})
            keys = ", ".join(f"{k} = {new!r}" for k, (_, new) in fresh.items())
            print(f"config: {keys} changed; it applies after %soba --new (this session keeps its current value)")
        return edit

    def say_instructions(self) -> None:
        """Re-read the instruction files before a turn (on the agent's thread) and say in one line
        what is loaded: at the first turn, and whenever a file changed (also one a queued turn read)."""
        if self.handle is None or self.runtime is None:
            return
        note = change_agent(self.runtime, self.handle.agent.reload_instructions, "instructions").result
        if note:
            print(note)

    def set_override(self, section: str, key: str, value: Any, *, at_step: bool = False) -> Change:
        """A setting given by a magic (``--model``, ``%auto_compact``, ``%soba approval``): kept for the sessions
        this kernel opens later and applied to the open one on the agent's thread, between jobs or,
        with ``at_step``, at the running turn's next step (:mod:`.agent_changes`); says when."""
        layer = {section: {key: value}}
        agent = self.handle.agent if self.handle is not None else None
        (agent.config if agent is not None else self.config()).with_overrides(layer)  # a bad value stops here
        self.overrides.setdefault(section, {})[key] = value
        if agent is None or self.runtime is None:
            return Change("now")
        # the one key on the config the agent has when the change runs, not a config read now
        return change_agent(self.runtime, lambda: agent.set_config(agent.config.with_overrides(layer)),
                            f"{section}.{key}", at_step=at_step)


def _drain(events: queue.Queue[Event], renderer: CellRenderer) -> None:
    """Render the events ``events`` holds now, then advance the live line."""
    while True:
        try:
            event = events.get_nowait()
        except queue.Empty:
            break
        _render(event, renderer)
    renderer.tick()


def _render(event: Event, renderer: CellRenderer, slot: ApprovalSlot | None = None) -> None:
    """One event of a job into its cell: a question as a card (in ``slot`` for a background
    turn) or a terminal prompt, the live line saying it waits; anything else through ``renderer``."""
    if event.type == APPROVAL_EVENT:
        pending = event.data["pending"]
        wait = Event("approval_wait", {"name": pending.request.tool}, event.ts)
        if renderer.terminal or slot is not None:
            # The line first: a terminal's prompt blocks until answered, and a background cell's
            # line is on its board, above the cards, sent before the card is.
            renderer.handle(wait)
            pending.show(slot)
        else:
            # A foreground cell: the live line emptied before the card comes (nothing above a
            # shown card may change height), then the card, then the line that says it waits.
            renderer.make_room_for_card()
            pending.show(slot)
            renderer.handle(wait)
    else:
        renderer.handle(event)


def _approval_status(agent: Any) -> str:
    """``%soba status``'s approval line: the mode and the session's rules."""
    tools = agent.config.tools
    words = f"{tools.approval} ({runs_without_asking(tools.approval, tools.sandbox, tools.sandbox_skips_approval)})"
    rules = agent.approvals.rules
    return words + ("; session rules: " + ", ".join(rule.describe() for rule in rules) if rules else "")


def _router(runtime: AgentRuntime) -> Callable[[Event], None]:
    """The bus subscriber that sends each event to the queue of the job that emitted it (its
    ``tag``); an event emitted outside a job (a budget shown while idle) goes to no cell."""
    def route(event: Event) -> None:
        tag = runtime.job_tag()
        if isinstance(tag, queue.Queue):
            tag.put(event)

    return route
