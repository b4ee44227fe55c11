"""The ``%soba`` subcommands (``status``, ``sessions``, ``resume``, ``rewind``, ``stop``,
``checkpoint``, ``skill``, ``config``, ``approval``, ``trust``, ``mcp``): one table of declarations and
one small function each.

The table (:data:`COMMANDS`) is what ``%soba`` dispatches through and what its help lists
(:mod:`.magic_args`); each function is thin glue over :class:`~.controller.NotebookSession`.
"""

from __future__ import annotations

import json

from IPython.core.error import UsageError

from ..agent.approval import runs_without_asking
from ..errors import ToolError
from .agent_changes import change_agent
from .controller import NotebookSession
from .magic_args import Command, Flag, Handler, Parsed, Table

__all__ = ["COMMANDS", "PROMPT_NOTE", "SKILL"]

#: Added to every mistake in a ``%soba`` line's subcommand or options: the way out to a prompt.
PROMPT_NOTE = "(to send any text to the agent as a prompt, put -- first: %soba -- TEXT)"


def _status(s: NotebookSession, args: Parsed) -> None:
    from .cellview import status_lines

    print("\n".join(status_lines(s.status())))


def _sessions(s: NotebookSession, args: Parsed) -> None:
    from ..agent import project_paths
    from ..session.lease import current_holder
    from ..session.listing import list_sessions

    # listing does not open a session: a kernel's own session starts with its first turn
    mine = s.handle.store.id if s.handle is not None else None
    infos = list_sessions(project_paths(s.project_dir).sessions)
    if not infos:
        print("no sessions yet in this project; the first %soba turn starts one")
    for info in infos:
        mark = "*" if info.id == mine else " "
        holder = current_holder(info.path) if info.id != mine else None
        held = f"  written by {holder.describe()}" if holder is not None else ""
        print(f"{mark} {info.id}  created {info.created}  {info.size_bytes:,} bytes{held}")


def _resume(s: NotebookSession, args: Parsed) -> None:
    from ..agent import project_paths
    from ..session.listing import list_sessions

    target = args.words[0] if args.words else None
    if target is None:  # the newest session other than this kernel's own
        mine = s.handle.store.id if s.handle is not None else None
        others = [info for info in list_sessions(project_paths(s.project_dir).sessions) if info.id != mine]
        if not others:
            raise UsageError("no other session to resume in this project (see %soba sessions)")
        target = others[0].id
    handle = s.ensure(session=target, take_over=args.has("--take-over"))
    lease = handle.store.lease
    taken = f"; taken over from {lease.previous.describe()}, which can no longer write to it" \
        if lease is not None and lease.previous is not None else ""
    print(f"resumed session {handle.store.id} ({len(handle.store):,} entries){taken}")


def _rewind(s: NotebookSession, args: Parsed) -> None:
    (entry_id,) = args.words
    handle = s.ensure()
    if s.runtime is None or s.runtime.busy:
        raise UsageError("a turn is running; %soba stop it before rewinding")

    def rewind() -> None:
        handle.store.rewind(entry_id)
        handle.agent.engine.tracker.invalidate()

    change_agent(s.runtime, rewind, "%soba rewind")  # idle: on the agent's thread at once, waited for
    snapshot = s.budget_snapshot()  # no job runs: measured on the agent's thread, and the widget shows it
    held = f"{snapshot.effective:,} tokens" if snapshot is not None else "an unmeasured number of tokens"
    print(f"leaf moved to {entry_id}; the next request holds {held} (the transcript keeps every entry)")


def _stop(s: NotebookSession, args: Parsed) -> None:
    # Only the kernel thread, which runs this, submits jobs, so nothing starts between the check
    # and the cancel; no session is opened just to find nothing to stop.
    if s.runtime is None or not s.runtime.busy:
        print("nothing to stop: no turn, %compact or %capsule create is running or queued")
        return
    dropped = s.runtime.cancel_all()
    print("cancelling the running turn" + (f"; dropped {dropped:,} queued job(s)" if dropped else ""))


def _checkpoint(s: NotebookSession, args: Parsed) -> None:
    from ..session.entries import checkpoint

    kind, note = args.words[0], " ".join(args.words[1:])
    handle = s.ensure()
    assert s.runtime is not None

    def record() -> bool:  # on the agent's thread, as the model's checkpoint tool records one
        handle.store.append(checkpoint(kind, note))
        return handle.agent.engine.record_intent(kind, note)

    change = change_agent(s.runtime, record, f"%soba checkpoint {kind}", at_step=True)
    if change.when != "now":
        print(f"{kind} {change.words}: the checkpoint and its compaction intent (unless disabled by config) "
              "are recorded there")
        return
    print(f"{kind} recorded" + ("; compaction intent pending for the next preflight" if change.result
                                else "; no compaction intent (disabled by config)"))


def _approval(s: NotebookSession, args: Parsed) -> None:
    """``%soba approval [ask|edits|never]``: the mode for this kernel's session, recorded in its transcript."""
    handle = s.ensure()  # opened first, so the change is a config entry of the session
    change = s.set_override("tools", "approval", args.words[0], at_step=True) if args.words else None
    tools = handle.agent.config.tools
    mode = args.words[0] if args.words else tools.approval
    what = runs_without_asking(mode, tools.sandbox, tools.sandbox_skips_approval)
    print(f"approval: {mode} ({what})" + (" · recorded in the transcript" if args.words else "")
          + (f" · {change.words}" if change is not None and change.when != "now" else ""))


def _trust(s: NotebookSession, args: Parsed) -> None:
    from .workspace_trust import trust_command

    trust_command(s.project_dir, session_open=s.handle is not None, revoke=args.has("--revoke"))


def _mcp(s: NotebookSession, args: Parsed) -> None:
    """``%soba mcp``: each configured MCP server, its state (running / failed: why / exited: why) and tools."""
    if not s.config().mcp_servers:  # nothing to start: no session is opened just to say so
        print('no MCP servers: add them as "mcpServers" in ~/.soba/config.json (README, "MCP servers")')
        return
    hub = s.ensure().agent.mcp  # the servers start with the session's agent
    if hub is None:
        print("no MCP servers in this session (mcpServers changed since it opened: it applies after %soba --new)")
        return
    for status in hub.status():
        print(status.line())


def _config(s: NotebookSession, args: Parsed) -> None:
    print(json.dumps(s.config().to_json(), indent=2))


def _skill_list(s: NotebookSession, args: Parsed) -> None:
    skills = s.ensure().agent.skills
    if not skills.available():
        print("no skills: add one as .soba/skills/NAME/SKILL.md in " + " or ".join(
            str(root.parent.parent) for root in skills.roots))
    for skill in skills.available():
        mark = "*" if skill.name in skills.active() else " "
        print(f"{mark} {skill.name}: {skill.description}")


def _skill_switch(activate: bool) -> Handler:
    def run(s: NotebookSession, args: Parsed) -> None:
        from ..session.entries import config_change

        handle = s.ensure()
        skills, name = handle.agent.skills, args.words[0]
        assert s.runtime is not None

        def switch() -> tuple[str, ...]:  # on the agent's thread: the next request's system prompt changes
            active = skills.activate(name) if activate else skills.deactivate(name)
            handle.store.append(config_change({"activeSkills": list(active)}))
            return active

        try:
            if name not in skills.active():
                skills.get(name)  # an unknown name is refused here, before anything is queued
            change = change_agent(s.runtime, switch, f"%soba skill {name}", at_step=True)
        except ToolError as exc:
            raise UsageError(str(exc)) from None
        if change.when != "now":
            print(f"skill {name}: {'activation' if activate else 'deactivation'} {change.words}")
            return
        print(f"active skills: {', '.join(change.result) or '(none)'}")

    return run


_SKILL_USAGE = "usage: %soba skill activate|deactivate NAME  (or %soba skill list)"

#: ``%soba skill list|activate NAME|deactivate NAME``; no word lists the skills.
SKILL = Table("%soba skill", (
    Command("list", words=(0, 0), run=_skill_list),
    Command("activate", "NAME", words=(1, 1), run=_skill_switch(True)),
    Command("deactivate", "NAME", words=(1, 1), run=_skill_switch(False)),
), default="list", usage=_SKILL_USAGE)

#: The ``%soba`` subcommands, in the order ``%soba?`` lists them.
COMMANDS = Table("%soba", (
    Command("status", words=(0, 0), summary="session, budget, queue, last compaction", run=_status),
    Command("sessions", words=(0, 0), summary="sessions of this project", run=_sessions),
    Command("resume", "[SESSION_ID] [--take-over]",
            "continue another session (default: the newest other one); one that another live kernel writes "
            "is refused, naming it, unless --take-over", words=(0, 1),
            flags=(Flag("--take-over", "take the session from the live kernel writing it; that kernel can no "
                                       "longer write to it"),),
            usage_note=" (see %soba sessions)", run=_resume),
    Command("rewind", "ENTRY_ID", "move the leaf back (the transcript keeps everything)", words=(1, 1),
            run=_rewind),
    Command("stop", words=(0, 0), summary="cancel the running turn or %compact / %capsule create, drop queued ones",
            run=_stop),
    Command("checkpoint", 'milestone|plan_pivot "note"', "record a milestone or a change of plan",
            words=(1, None), choices=("milestone", "plan_pivot"), run=_checkpoint),
    Command("skill", "activate|deactivate NAME", "(or: %soba skill list)", words=(0, 2),
            usage_note="  (or %soba skill list)", run=lambda s, args: SKILL.dispatch(s, args.words)),
    Command("config", words=(0, 0), summary="the effective configuration (no secrets)", run=_config),
    Command("approval", "[ask|edits|never]", "who asks before the agent acts (tools.approval), for this session",
            words=(0, 1), choices=("ask", "edits", "never"), run=_approval),
    Command("trust", "[--revoke]", "honour the settings of this project's .soba/config.json that need trust "
            "(approval, sandbox, workspace, model server); a changed file asks again", words=(0, 0),
            flags=(Flag("--revoke", "stop honouring them"),), run=_trust),
    Command("mcp", words=(0, 0), summary="MCP servers (mcpServers): their state and tools", run=_mcp),
), note=PROMPT_NOTE)
