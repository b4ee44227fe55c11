"""The IPython magics: ``%soba`` / ``%%soba``, ``%compact``, ``%budget``, ``%auto_compact``, ``%capsule``.

User mistakes raise :class:`~IPython.core.error.UsageError` (one line, no traceback); prompts are
not variable-expanded (``@no_var_expand``), so braces and ``$`` in a prompt reach the agent as typed.
Every magic's arguments are declared here or in the subcommand tables (:mod:`.soba_commands`,
:mod:`.capsule_commands`) and read by one parser (:mod:`.magic_args`), which also writes the help.
A one-word ``%soba`` prompt that is close to a subcommand's name is refused with "did you mean"
(``%soba -- WORD`` sends it); a line ending in ``?`` reaches these magics verbatim thanks to the
input transform of :mod:`.verbatim`. Everything is delegated to :class:`~.controller.NotebookSession`.
"""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class, no_var_expand

from ..errors import SobaError
from . import capsule_commands, soba_commands
from .controller import NotebookSession
from .display import QUALITY_NOTES, reclaimed_phrase
from .magic_args import (
    Command,
    Flag,
    Option,
    flag_lines,
    help_lines,
    leading_options,
    options_synopsis,
    parse_line,
    split_words,
)
from .soba_commands import PROMPT_NOTE

__all__ = ["SobaMagics"]

#: The options that may lead a ``%soba`` prompt.
RUN_OPTIONS = (
    Option("background", "--background"),
    Option("model", "--model", value="NAME", missing="--model needs a model name, e.g. --model gpt-4o-mini"),
    Option("new", "--new"),
)

SOBA_HELP = "\n".join([
    "Run one agent turn, or manage the session.",
    "",
    f"  %soba {options_synopsis(RUN_OPTIONS)} PROMPT",
    f"  %%soba {options_synopsis(RUN_OPTIONS)}      (the cell body is the prompt)",
    "  %soba [options] -- TEXT     TEXT is the prompt as typed, even if it starts with a subcommand",
    "                              or a '-' (a prompt may end in ? or ??)",
    "",
    "Subcommands:",
    *help_lines("%soba", soba_commands.COMMANDS.commands),
    "",
])


def _refuse_a_mistyped_subcommand(line: str, prompt: str) -> None:
    """A one-word prompt that is (close to) a subcommand's name was most likely meant as that
    subcommand (``%soba stauts``): ask, and send nothing; ``%soba -- stauts`` sends it."""
    if len(prompt.split()) != 1:
        return
    command = soba_commands.COMMANDS.suggest(prompt)
    if command is None:
        return
    given = line.strip()[:len(line.strip()) - len(prompt)].strip()
    raise UsageError(f"did you mean `%soba {command}`? (to send {prompt!r} to the agent as a prompt: "
                     f"%soba {given + ' ' if given else ''}-- {prompt})")


COMPACT = Command("", "[--remember] [instructions]", free_text=True, flags=(
    Flag("--remember", "mirror the capsule into Project Memory if it validates and is not degraded"),))
BUDGET = Command("", "[--side]", words=(0, 0), flags=(
    Flag("--side", "the live widget in a JupyterLab side panel that stays in view while you scroll "
                   "(config switch ui.sidePanel opens it with the first turn)"),))
AUTO_COMPACT = Command("", "[on|off]", words=(0, 1), choices=("on", "off"))


def _help(magic: str, command: Command, text: str) -> str:
    """A magic's help: its usage line, what it does, its flags."""
    flags = flag_lines(command)
    return "\n".join([command.usage(magic), "", text, *(["", "options:", *flags] if flags else []), ""])


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
        words = line.split(None, 1)
        if cell is None and words and soba_commands.COMMANDS.get(words[0]) is not None:
            try:
                return soba_commands.COMMANDS.dispatch(self.session, split_words(line))
            except SobaError as exc:
                raise UsageError(str(exc)) from None
        read = leading_options("%soba", RUN_OPTIONS, line, note=PROMPT_NOTE)
        options, prompt = read.options, read.prompt
        if cell is None and not read.verbatim:
            _refuse_a_mistyped_subcommand(line, prompt)
        if cell is not None:
            prompt = (prompt + "\n" + cell).strip() if prompt else cell.strip()
        if not prompt:
            raise UsageError("%soba needs a prompt, e.g. %soba fix the failing parser test\n\n" + SOBA_HELP)
        try:
            if options["new"]:
                self.session.ensure(new=True)
            model = options["model"]  # between jobs: this turn's first request has it, a running turn keeps its own
            change = self.session.set_override("model", "model", model) if model else None
            if change is not None and change.when != "now":
                print(f"model {model}: from this turn on (the running turn keeps its model)")
            result = self.session.run(prompt, background=options["background"])
        except SobaError as exc:
            raise UsageError(str(exc)) from None
        if result is not None and result.outcome == "failed":
            raise UsageError(f"the turn failed: {result.error}")
        if result is not None and result.outcome == "stopped":
            print(result.error)  # a limit did its job: a note, not an error
        return None

    soba.__doc__ = SOBA_HELP

    # -- %compact ----------------------------------------------------------------------------
    @no_var_expand
    @line_magic
    def compact(self, line: str) -> Any:
        args = parse_line("%compact", COMPACT, line)
        remember = args.has("--remember")
        text = " ".join(args.words).strip()
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
            note = QUALITY_NOTES.get(outcome.quality or "")
            print(f"compacted ({outcome.trigger}): {outcome.tokens_before:,} → {outcome.tokens_after:,} tokens, "
                  f"{reclaimed_phrase(outcome.reclaimed_percent)} · {outcome.checkpoint_id}"
                  + (f" · {note}" if note else ""))
        if outcome.entry is not None:
            self._mirror(outcome.entry, remember)
        return None

    compact.__doc__ = _help("%compact", COMPACT, """\
Compact now. An explicit compact bypasses the soft ROI threshold, but does nothing when
there is no safe history before the retained window. --remember (or the config switch
memory.mirrorExplicitCompacts) mirrors a validated, non-degraded capsule into Project Memory.
The instructions (free text, quotes kept as typed) say what the summary should focus on.

While a turn runs (``%%soba --background``) the compaction is queued behind it, and the
queue position is printed; it never runs concurrently with a turn's model request. The
stop button or ``%soba stop`` cancels it like a turn: outcome ``cancelled``, no capsule.""")

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
        args = parse_line("%budget", BUDGET, line)
        self.session.show_budget(show=True, side=args.has("--side"))
        return None

    budget.__doc__ = _help("%budget", BUDGET, """\
Show the token budget: effective tokens against the hard and soft limits, the source,
and the last compaction (the widget in a notebook, one text line in a terminal).""")

    # -- %auto_compact ----------------------------------------------------------------------
    @line_magic
    def auto_compact(self, line: str) -> Any:
        words = parse_line("%auto_compact", AUTO_COMPACT, line.lower()).words  # ON and On are on
        if not words:
            on = self.session.config().compaction.auto
            print(f"auto-compaction is {'on' if on else 'off'} (%auto_compact {'off' if on else 'on'} turns it "
                  f"{'off' if on else 'on'}; the hard limit and context-overflow recovery always compact)")
            return None
        value = words[0]
        change = self.session.set_override("compaction", "auto", value == "on", at_step=True)
        when = f" ({change.words})" if change.when != "now" else ""
        if value == "off":
            print("auto-compaction off: soft triggers (auto threshold, turn complete, milestone, plan pivot) are "
                  f"disabled; the hard limit and context-overflow recovery still compact when needed{when}")
        else:
            print(f"auto-compaction on{when}")
        return None

    auto_compact.__doc__ = _help("%auto_compact", AUTO_COMPACT, """\
Turn the soft compaction triggers on or off; with no word, show whether they are on.

Off disables only the soft triggers (auto threshold, turn complete, milestone, plan pivot);
the hard limit and provider overflow recovery stay mandatory.""")

    # -- %capsule ----------------------------------------------------------------------------
    @line_magic
    def capsule(self, line: str) -> Any:
        try:
            return capsule_commands.COMMANDS.dispatch(self.session, split_words(line))
        except SobaError as exc:
            raise UsageError(str(exc)) from None

    capsule.__doc__ = "\n".join([
        "Portable Capsules (.capsule.md handoffs):", "",
        *help_lines("%capsule", capsule_commands.COMMANDS.commands, column=41), "",
        "Python variables expand as usual ($ck, {path}), so an id held in a variable can be used.", ""])
