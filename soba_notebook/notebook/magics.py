"""The IPython magics: ``%soba`` / ``%%soba``, ``%compact``, ``%budget``, ``%auto_compact``, ``%capsule``.

User mistakes raise :class:`~IPython.core.error.UsageError` (one line, no traceback); prompts are
not variable-expanded (``@no_var_expand``), so braces and ``$`` in a prompt reach the agent as typed.
Everything is delegated to :class:`~.controller.NotebookSession`.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from ..errors import SobaError
from .controller import NotebookSession

__all__ = ["SobaMagics"]

SUBCOMMANDS = ("status", "sessions", "resume", "rewind", "stop", "checkpoint", "skill", "config")

SOBA_HELP = """Run one agent turn, or manage the session.

  %soba [--background] [--model NAME] [--new] PROMPT
  %%soba [--background] [--model NAME] [--new]      (the cell body is the prompt)

Subcommands:
  %soba status                      session, budget, queue, last compaction
  %soba sessions                    sessions of this project
  %soba resume ID                   continue another session
  %soba rewind ENTRY_ID             move the leaf back (the transcript keeps everything)
  %soba stop                        cancel the running turn or %compact / %capsule create, drop queued ones
  %soba checkpoint milestone|plan_pivot "note"
  %soba skill activate|deactivate NAME   (or: %soba skill list)
  %soba config                      the effective configuration (no secrets)
"""


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"could not parse arguments ({exc}); check the quotes") from None


@magics_class
class SobaMagics(Magics):
    def __init__(self, shell: Any, session: NotebookSession | None = None) -> None:
        super().__init__(shell)
        self.session = session or NotebookSession(user_namespace=shell.user_ns if shell is not None else None,
                                                  namespace_hidden=getattr(shell, "user_ns_hidden", None))

    # -- %soba -------------------------------------------------------------------------------
    @no_var_expand
    @line_cell_magic
    def soba(self, line: str, cell: str | None = None) -> Any:
        words = line.strip().split(None, 1)
        if cell is None and words and words[0] in SUBCOMMANDS:
            return self._subcommand(words[0], words[1] if len(words) > 1 else "")
        options, prompt = self._parse_run_options(line)
        if cell is not None:
            prompt = (prompt + "\n" + cell).strip() if prompt else cell.strip()
        if not prompt:
            raise UsageError("%soba needs a prompt, e.g. %soba fix the failing parser test\n\n" + SOBA_HELP)
        try:
            if options["new"]:
                self.session.ensure(new=True)
            if options["model"]:
                self.session.set_override("model", "model", options["model"])
            result = self.session.run(prompt, background=options["background"])
        except SobaError as exc:
            raise UsageError(str(exc)) from None
        if result is not None and result.outcome == "failed":
            raise UsageError(f"the turn failed: {result.error}")
        if result is not None and result.outcome == "stopped":
            print(result.error)  # a limit did its job: a note, not an error
        return None

    soba.__doc__ = SOBA_HELP

    def _parse_run_options(self, line: str) -> tuple[dict[str, Any], str]:
        options: dict[str, Any] = {"background": False, "new": False, "model": None}
        rest = line.strip()
        while rest.startswith("--"):
            head, _, tail = rest.partition(" ")
            if head in ("--background", "-b"):
                options["background"] = True
            elif head == "--new":
                options["new"] = True
            elif head == "--model":
                value, _, tail = tail.strip().partition(" ")
                if not value:
                    raise UsageError("--model needs a model name, e.g. --model gpt-4o-mini")
                options["model"] = value
            elif head == "--":
                rest = tail
                break
            else:
                raise UsageError(f"unknown option {head!r} for %soba; options: --background, --model NAME, --new")
            rest = tail.strip()
        return options, rest

    def _subcommand(self, name: str, rest: str) -> Any:
        args = _split(rest)
        s = self.session
        try:
            if name == "status":
                from .cellview import status_lines

                print("\n".join(status_lines(s.status())))
                return None
            if name == "sessions":
                from ..session.store import list_sessions

                handle = s.ensure()
                for info in list_sessions(handle.paths.sessions):
                    mark = "*" if info.id == handle.store.id else " "
                    print(f"{mark} {info.id}  created {info.created}  {info.size_bytes:,} bytes")
                return None
            if name == "resume":
                if len(args) != 1:
                    raise UsageError("usage: %soba resume SESSION_ID (see %soba sessions)")
                handle = s.ensure(session=args[0])
                print(f"resumed session {handle.store.id} ({len(handle.store)} entries)")
                return None
            if name == "rewind":
                if len(args) != 1:
                    raise UsageError("usage: %soba rewind ENTRY_ID")
                handle = s.ensure()
                if s.runtime is not None and s.runtime.busy:
                    raise UsageError("a turn is running; %soba stop it before rewinding")
                handle.store.rewind(args[0])
                handle.agent.engine.tracker.invalidate()
                check = handle.agent.engine.measure()
                print(f"leaf moved to {args[0]}; the next request holds {check.effective:,} tokens "
                      f"(the transcript keeps every entry)")
                return None
            if name == "stop":
                s.ensure()
                assert s.runtime is not None
                dropped = s.runtime.cancel_all()
                print("cancelling the running turn" + (f"; dropped {dropped} queued turn(s)" if dropped else ""))
                return None
            if name == "checkpoint":
                if len(args) < 1 or args[0] not in ("milestone", "plan_pivot"):
                    raise UsageError('usage: %soba checkpoint milestone|plan_pivot "note"')
                handle = s.ensure()
                note = " ".join(args[1:])
                from ..session.entries import checkpoint

                handle.store.append(checkpoint(args[0], note))
                recorded = handle.agent.engine.record_intent(args[0], note)
                print(f"{args[0]} recorded" + ("; compaction intent pending for the next preflight" if recorded
                                               else "; no compaction intent (disabled by config)"))
                return None
            if name == "skill":
                return self._skill(args)
            if name == "config":
                print(json.dumps(s.config().to_json(), indent=2))
                return None
        except SobaError as exc:
            raise UsageError(str(exc)) from None
        raise UsageError(f"unknown subcommand {name!r}")  # pragma: no cover - guarded by SUBCOMMANDS

    def _skill(self, args: list[str]) -> None:
        handle = self.session.ensure()
        skills = handle.agent.skills
        if args == ["list"] or not args:
            for skill in skills.available():
                mark = "*" if skill.name in skills.active() else " "
                print(f"{mark} {skill.name}: {skill.description}")
            return
        if len(args) != 2 or args[0] not in ("activate", "deactivate"):
            raise UsageError("usage: %soba skill activate|deactivate NAME  (or %soba skill list)")
        from ..errors import ToolError
        from ..session.entries import config_change

        try:
            active = skills.activate(args[1]) if args[0] == "activate" else skills.deactivate(args[1])
        except ToolError as exc:
            raise UsageError(str(exc)) from None
        handle.store.append(config_change({"activeSkills": list(active)}))
        print(f"active skills: {', '.join(active) or '(none)'}")

    # -- %compact ----------------------------------------------------------------------------
    @no_var_expand
    @magic_arguments()
    @argument("--remember", action="store_true",
              help="mirror the capsule into Project Memory if it validates and is not degraded")
    @argument("instructions", nargs="*", help="what the summary should focus on")
    @line_magic
    def compact(self, line: str) -> Any:
        """Compact now. An explicit compact bypasses the soft ROI threshold, but does nothing when
        there is no safe history before the retained window. --remember (or the config switch
        memory.mirrorExplicitCompacts) mirrors a validated, non-degraded capsule into Project Memory.

        While a turn runs (``%%soba --background``) the compaction is queued behind it, and the
        queue position is printed; it never runs concurrently with a turn's model request. The
        stop button or ``%soba stop`` cancels it like a turn: outcome ``cancelled``, no capsule."""
        try:
            parsed = parse_argstring(self.compact, line)
        except UsageError:
            raise
        except SystemExit:  # argparse on a bad option
            raise UsageError("usage: %compact [--remember] [instructions]") from None
        remember = bool(parsed.remember)
        text = " ".join(parsed.instructions).strip()
        s = self.session
        handle = s.ensure()
        s.show_budget(show=s.display is None and s.frontend != "terminal")
        try:
            outcome = s.run_job(lambda cancel: handle.agent.compact(text or None, cancel), "%compact",
                                summary="%compact")
        except SobaError as exc:
            raise UsageError(str(exc)) from None
        if outcome is None:  # withdrawn from the queue before it started
            return None
        # A notebook cell got its summary from the job; a terminal display printed each outcome,
        # so only a completed compact adds its numbers here (a skip stays one quiet line).
        if s.frontend == "terminal" and outcome.outcome == "completed":
            print(f"compacted ({outcome.trigger}): {outcome.tokens_before:,} → {outcome.tokens_after:,} tokens, "
                  f"reclaimed {outcome.reclaimed_percent}% · {outcome.checkpoint_id}"
                  + (" · degraded (local fallback capsule)" if outcome.quality == "degraded" else ""))
        if outcome.entry is not None:
            self._mirror(outcome.entry, remember)
        return None

    def _mirror(self, entry: Any, remember: bool) -> None:
        from ..memory.project import ProjectMemory

        handle = self.session.ensure()
        config_switch = handle.agent.config.memory.mirror_explicit_compacts
        if not (remember or config_switch):
            return
        decision = ProjectMemory(handle.paths.memory).mirror(entry, explicit=True, validated=True,
                                                             remember=remember, config_switch=config_switch)
        print(("mirrored into Project Memory: " + str(decision.path)) if decision.mirrored else decision.reason)

    # -- %budget -----------------------------------------------------------------------------
    @line_magic
    def budget(self, line: str) -> Any:
        """Show the token budget: effective tokens against the hard and soft limits, the source,
        and the last compaction (the widget in a notebook, one text line in a terminal).

        %budget --side   the live widget in a JupyterLab side panel that stays in view while you
                         scroll (config switch ui.sidePanel opens it with the first turn)."""
        if line.strip() not in ("", "--side"):
            raise UsageError("usage: %budget [--side]")
        self.session.show_budget(show=True, side=line.strip() == "--side")
        return None

    # -- %auto_compact ----------------------------------------------------------------------
    @magic_arguments()
    @argument("state", nargs="?", help="on or off")
    @line_magic
    def auto_compact(self, line: str) -> Any:
        """Turn the soft compaction triggers on or off.

        Off disables only the soft triggers (auto threshold, turn complete, milestone, plan pivot);
        the hard limit and provider overflow recovery stay mandatory.
        """
        value = (parse_argstring(self.auto_compact, line).state or "").lower()
        if value not in ("on", "off"):
            raise UsageError("usage: %auto_compact on|off")
        self.session.set_override("compaction", "auto", value == "on")
        if value == "off":
            print("auto-compaction off: soft triggers (auto threshold, turn complete, milestone, plan pivot) are "
                  "disabled; the hard limit and context-overflow recovery still compact when needed")
        else:
            print("auto-compaction on")
        return None

    # -- %capsule ----------------------------------------------------------------------------
    @line_magic
    def capsule(self, line: str) -> Any:
        """Portable Capsules (.capsule.md handoffs):

          %capsule create "title" [--remember]   summarize now into .soba/capsules/<ck>.capsule.md
                                           (queued behind a running turn; the stop button cancels it)
          %capsule export CK PATH [--force]
          %capsule load PATH [--continue]  start a new session from it (or continue this one)
          %capsule list                    checkpoints of this session, created capsules, memory
          %capsule show CK

        Python variables expand as usual ($ck, {path}), so an id held in a variable can be used.
        """
        args = _split(line)
        if not args:
            raise UsageError("usage: %capsule create|export|load|list|show …  (see %capsule?)")
        from . import capsule_commands

        try:
            return capsule_commands.run(self.session, args)
        except SobaError as exc:
            raise UsageError(str(exc)) from None
