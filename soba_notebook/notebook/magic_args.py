"""One way to read a magic's arguments: declared commands, one parser, help made from the declarations.

Every magic of the package (``%soba`` and its subcommands, ``%compact``, ``%budget``,
``%auto_compact``, ``%capsule``) declares what it accepts as data — a :class:`Command` (its
positional words, the first word's choices, its ``--`` flags, its usage line and one help line), a
:class:`Table` of subcommands, or the :class:`Option` list that may lead a ``%soba`` prompt — and
this module alone turns a line into those values. Usage errors and help text are generated from the
same declarations, so the help cannot drift from what the parser accepts.

The rules, one set for all magics:

* words are split like a shell line (quotes group, ``"unterminated`` is a usage error), except a
  command's *free text* (``%compact``'s instructions), which is split on whitespace and keeps its
  quotes and apostrophes as typed;
* a word that starts with ``--`` is a flag; a flag the command does not declare is a usage error
  that names it (and the declared flag it is close to, if any);
* a ``%soba`` prompt is never split: only its leading options are read, the rest is the prompt
  exactly as typed. ``--`` ends the options; before it, a word like ``-x`` or ``--name`` that is
  no declared option is a usage error naming it and the valid ones (``-1 is negative`` is text);
* "close to" is :func:`close_match`'s: difflib's similarity ratio of at least
  :data:`CLOSE_CUTOFF`, so a typo matches and an unrelated word does not.

Mistakes raise :class:`~IPython.core.error.UsageError` (no traceback) naming the usage.
"""

from __future__ import annotations

import difflib
import re
import shlex
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from IPython.core.error import UsageError

__all__ = ["CLOSE_CUTOFF", "Command", "Flag", "Handler", "Leading", "Option", "Parsed", "Table", "close_match",
           "flag_lines", "help_lines", "leading_options", "options_synopsis", "parse", "parse_line", "split_words"]

#: Where the one-line summaries of a help listing start (the left part is ``  %magic name args``).
HELP_COLUMN = 36
#: Where help lines wrap.
HELP_WIDTH = 110
#: How similar (difflib ratio) a word must be to a name to be taken for a typo of it: ``stauts``
#: (0.83), ``stpo`` (0.75) and ``skills`` (0.91) are; ``start`` (0.73 to ``status``), ``restart``
#: and ``hello`` are not, so ordinary one-word prompts still go to the agent.
CLOSE_CUTOFF = 0.75


def close_match(word: str, names: Sequence[str], cutoff: float = CLOSE_CUTOFF) -> str | None:
    """The name ``word`` is most likely a typo (or another case) of, if any is close enough."""
    found = difflib.get_close_matches(word.lower(), list(names), n=1, cutoff=cutoff)
    return found[0] if found else None


def _did_you_mean(word: str, names: Sequence[str]) -> str:
    match = close_match(word, names)
    return f" (did you mean {match}?)" if match else ""


@dataclass(frozen=True, slots=True)
class Parsed:
    """A command's arguments: its positional words in order and the flags given."""

    words: tuple[str, ...]
    flags: frozenset[str]

    def has(self, flag: str) -> bool:
        return flag in self.flags


Handler = Callable[[Any, Parsed], Any]


@dataclass(frozen=True, slots=True)
class Flag:
    """A ``--name`` switch of a command."""

    name: str
    help: str = ""


@dataclass(frozen=True, slots=True)
class Command:
    """What one magic or subcommand accepts, how its usage reads, and who runs it.

    ``words`` bounds the number of positional words (``None``: no upper bound); ``choices`` lists
    the allowed first words; ``synopsis`` is the argument part of the usage line and
    ``usage_note`` is appended to it; ``summary`` is the command's line in a help listing.
    """

    name: str
    synopsis: str = ""
    summary: str = ""
    words: tuple[int, int | None] = (0, None)
    choices: tuple[str, ...] = ()
    flags: tuple[Flag, ...] = ()
    free_text: bool = False
    usage_note: str = ""
    run: Handler | None = field(default=None, compare=False)

    def usage(self, magic: str) -> str:
        return "usage: " + " ".join(part for part in (magic, self.name, self.synopsis) if part) + self.usage_note


def split_words(line: str) -> list[str]:
    """Split a line like a shell does; an unbalanced quote is a usage error."""
    try:
        return shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"could not parse arguments ({exc}); check the quotes") from None


def parse(magic: str, command: Command, words: Sequence[str], usage: str | None = None) -> Parsed:
    """Check ``words`` against ``command``; a mismatch raises a UsageError with its usage line
    (or ``usage``, when the caller's table has one line for all its mistakes)."""
    flags = frozenset(word for word in words if word.startswith("--"))
    positional = tuple(word for word in words if not word.startswith("--"))
    low, high = command.words
    declared = [flag.name for flag in command.flags]
    unknown = sorted(flags - set(declared))
    if unknown:
        where = " ".join(part for part in (magic, command.name) if part)
        valid = f"; options: {', '.join(declared)}" if declared else f"; {where} takes no options"
        raise UsageError(f"unknown option {unknown[0]!r} for {where}{_did_you_mean(unknown[0], declared)}{valid}\n"
                         + (usage or command.usage(magic)))
    if (len(positional) < low
            or (high is not None and len(positional) > high)
            or (command.choices and positional[:1] and positional[0] not in command.choices)):
        raise UsageError(usage or command.usage(magic))
    return Parsed(positional, flags)


def parse_line(magic: str, command: Command, line: str) -> Parsed:
    """Split ``line`` the way ``command`` reads it (free text on whitespace, else like a shell)."""
    return parse(magic, command, line.split() if command.free_text else split_words(line))


@dataclass(frozen=True, slots=True)
class Table:
    """The subcommands of a magic, dispatched by their first word.

    ``default`` runs when no word is given (else that is a usage error); ``usage``, when set, is
    the one usage line of every mistake (else each command's own, or the table's synopsis);
    ``note`` is added on a line of its own to every mistake in a subcommand's arguments."""

    magic: str
    commands: tuple[Command, ...]
    default: str | None = None
    usage: str | None = None
    note: str = ""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(command.name for command in self.commands)

    def get(self, name: str) -> Command | None:
        return next((command for command in self.commands if command.name == name), None)

    def suggest(self, word: str) -> str | None:
        """The subcommand ``word`` is most likely a typo of (:func:`close_match`)."""
        return close_match(word, self.names)

    def synopsis(self) -> str:
        return f"usage: {self.magic} " + " | ".join(" ".join(p for p in (c.name, c.synopsis) if p)
                                                    for c in self.commands)

    def dispatch(self, context: Any, words: Sequence[str]) -> Any:
        """Parse ``words`` (the first names the subcommand) and run that subcommand on ``context``."""
        if not words and self.default is None:
            raise UsageError(self.usage or f"usage: {self.magic} {'|'.join(self.names)} …  (see {self.magic}?)")
        name, rest = (words[0], words[1:]) if words else (self.default or "", ())
        command = self.get(name)
        if command is None or command.run is None:
            raise UsageError(self.usage or f"unknown {self.magic} command {name!r}; {self.synopsis()}")
        try:
            parsed = parse(self.magic, command, rest, self.usage)
        except UsageError as exc:
            if not self.note:
                raise
            raise UsageError(f"{exc}\n{self.note}") from None
        return command.run(context, parsed)


def _row(left: str, text: str, column: int) -> list[str]:
    """``left`` then ``text`` from ``column`` (or after three spaces when ``left`` is longer),
    wrapped at :data:`HELP_WIDTH` with later lines indented to ``column``."""
    if not text:
        return [left]
    head = left.ljust(column) if len(left) + 2 <= column else left + "   "
    return textwrap.wrap(text, HELP_WIDTH, initial_indent=head, subsequent_indent=" " * column)


def help_lines(magic: str, commands: Sequence[Command], column: int = HELP_COLUMN) -> list[str]:
    """The help listing of ``commands``: ``  %magic name synopsis   summary``, summaries from ``column``."""
    return [line for command in commands for line in
            _row("  " + " ".join(part for part in (magic, command.name, command.synopsis) if part),
                 command.summary, column)]


def flag_lines(command: Command) -> list[str]:
    """The help lines of a command's flags."""
    column = max((len(flag.name) for flag in command.flags), default=0) + 4
    return [line for flag in command.flags for line in _row(f"  {flag.name}", flag.help, column)]


@dataclass(frozen=True, slots=True)
class Option:
    """An option that may lead a prompt: a switch, or (with ``value``) an option taking one word."""

    key: str
    name: str
    value: str = ""
    missing: str = ""

    @property
    def synopsis(self) -> str:
        return f"{self.name} {self.value}".strip()


def options_synopsis(options: Sequence[Option]) -> str:
    return " ".join(f"[{option.synopsis}]" for option in options)


#: A word that reads as an option: ``-x``, ``--name`` (not ``-``, ``-1`` or ``--``).
_OPTION_WORD = re.compile(r"--?[A-Za-z]")


@dataclass(frozen=True, slots=True)
class Leading:
    """A prompt line read: its leading options (switches ``False`` and valued options ``None``
    unless given), the prompt exactly as typed, and whether ``--`` marked it as a prompt."""

    options: dict[str, Any]
    prompt: str
    verbatim: bool = False


def leading_options(magic: str, options: Sequence[Option], line: str, note: str = "") -> Leading:
    """Read the options that lead ``line``; the rest is the prompt exactly as typed (``--`` ends the
    options). An unknown option is a usage error naming it and the valid ones, then ``note``."""
    by_name = {option.name: option for option in options}
    found: dict[str, Any] = {option.key: (None if option.value else False) for option in options}
    rest = line.strip()
    while _OPTION_WORD.match(rest) or rest == "--" or rest.startswith("-- "):
        head, _, tail = rest.partition(" ")
        if head == "--":
            return Leading(found, tail, verbatim=True)
        option = by_name.get(head)
        if option is None:
            raise UsageError(f"unknown option {head!r} for {magic}{_did_you_mean(head, list(by_name))}; options: "
                             + ", ".join(option.synopsis for option in options) + (f"\n{note}" if note else ""))
        if option.value:
            value, _, tail = tail.strip().partition(" ")
            if not value:
                raise UsageError(option.missing or f"{option.name} needs a value ({option.value})")
            found[option.key] = value
        else:
            found[option.key] = True
        rest = tail.strip()
    return Leading(found, rest)
