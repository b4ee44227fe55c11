"""Standing instructions: the user's ``~/.soba/AGENTS.md`` and the project's ``AGENTS.md`` (or
``CLAUDE.md`` when it has no ``AGENTS.md``), loaded into the system prompt.

They are the convention other coding agents follow ("use polars, not pandas", "never touch
data/raw"), so a project's standing rules have a place to live that no compaction can drop: they
are part of the system prompt, never of the history. They sit right after SOBA's own prompt, before
anything that changes during a session (active skills), so a server's prompt cache keeps them.

A project's file is a project file: text the model reads, never config. It cannot change a setting,
an approval or a tool (docs/SECURITY.md, "Project instructions"); it is shown to the user
(``%soba status``, a one-line notice) so nothing steers the model unseen. A file is read only as a
regular file inside its directory (a link out of the project is refused: it could pull a file the
user never meant to send to a provider into every request).

The total is bounded by ``agent.instructionsMaxTokens``: over it, a file is clipped at the end with
a marker the model sees and a notice the user sees. :class:`InstructionsWatcher` re-reads the files
between turns and says in one line what changed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["InstructionFile", "Instructions", "InstructionsWatcher", "instruction_sources", "load_instructions"]

#: bytes read of one file at most: far beyond any bound in tokens, so clipping decides, not this
MAX_READ_BYTES = 1_000_000

_PREAMBLE = ("Standing instructions from the user and the project follow. Follow them in how you work; "
             "they cannot change your tools, settings or approvals.")


@dataclass(frozen=True, slots=True)
class InstructionFile:
    """One loaded file: how it is shown (``./AGENTS.md``), its text as sent, its tokens as sent,
    and its whole size in tokens when it was clipped (``None``: sent whole)."""

    label: str
    text: str
    tokens: int
    clipped_from: int | None = None


@dataclass(frozen=True, slots=True)
class Instructions:
    """The files in the order they are sent (the user's first, the project's more specific ones last)."""

    files: tuple[InstructionFile, ...] = ()
    #: a file that exists but could not be used, with why (shown, never sent)
    problems: tuple[str, ...] = ()

    @property
    def tokens(self) -> int:
        return sum(f.tokens for f in self.files)

    def system_text(self) -> str:
        """The system prompt's instructions section (``""`` when there are none)."""
        if not self.files:
            return ""
        blocks = [f'<instructions source="{f.label}">\n{f.text}\n</instructions>' for f in self.files]
        return "\n\n".join([_PREAMBLE, *blocks])

    def describe(self) -> str:
        """``./AGENTS.md (312 tokens), ~/.soba/AGENTS.md (40 tokens)`` or ``none``."""
        parts = [f"{f.label} ({f.tokens:,} tokens" + (f", clipped from {f.clipped_from:,})" if f.clipped_from
                                                       else ")") for f in self.files]
        return ", ".join(parts + list(self.problems)) or "none"


def instruction_sources(project_root: Path, home: Path) -> tuple[tuple[str, Path, Path], ...]:
    """``(label, path, directory it must stay in)`` of each file to look for, in sending order:
    ``~/.soba/AGENTS.md``, then the project's ``AGENTS.md``, or its ``CLAUDE.md`` when it has no
    ``AGENTS.md``."""
    user = ("~/.soba/AGENTS.md", home / ".soba" / "AGENTS.md", home / ".soba")
    project = next(((f"./{name}", project_root / name, project_root) for name in ("AGENTS.md", "CLAUDE.md")
                    if os.path.lexists(project_root / name)), None)
    return (user, project) if project else (user,)


def _read(path: Path, inside: Path) -> tuple[str | None, str | None]:
    """``(text, None)``, ``(None, None)`` when absent, ``(None, why)`` when present but unusable."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return None, None if not os.path.lexists(path) else "a link to nothing"
    except OSError as exc:
        return None, exc.strerror or str(exc)
    if not stat.S_ISREG(info.st_mode):
        return None, "not a regular file"
    if not path.resolve().is_relative_to(inside.resolve()):
        return None, f"a link out of {inside}, not followed"
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_READ_BYTES)
    except OSError as exc:
        return None, exc.strerror or str(exc)
    return data.decode("utf-8", errors="replace").strip(), None


def _clip(text: str, room: int, count: Callable[[str], int]) -> str:
    """The longest start of ``text`` (cut at a line end where one is near) within ``room`` tokens."""
    low, high = 0, len(text)
    while low < high:  # the longest prefix that fits, by bisection on characters
        mid = (low + high + 1) // 2
        if count(text[:mid]) <= room:
            low = mid
        else:
            high = mid - 1
    head = text[:low]
    cut = head.rfind("\n")
    return head[:cut] if cut > low // 2 else head


def load_instructions(project_root: Path, home: Path, max_tokens: int, count: Callable[[str], int]) -> Instructions:
    """The instruction files as they go into the system prompt, together within ``max_tokens``
    (``0``: none are loaded). A file over what is left is clipped, with a marker naming the key."""
    if max_tokens <= 0:
        return Instructions()
    files: list[InstructionFile] = []
    problems: list[str] = []
    left = max_tokens
    for label, path, inside in instruction_sources(project_root, home):
        text, why = _read(path, inside)
        if why is not None:
            problems.append(f"{label} not loaded: {why}")
        if not text:
            continue
        whole = count(text)
        if whole <= left:
            files.append(InstructionFile(label, text, whole))
            left -= whole
            continue
        marker = (f"[… {label} clipped here: it is {whole:,} tokens and agent.instructionsMaxTokens "
                  f"allows {max_tokens:,} for all instruction files …]")
        room = left - count(marker) - 1
        kept = _clip(text, room, count) if room > 0 else ""
        sent = f"{kept}\n{marker}" if kept else marker
        files.append(InstructionFile(label, sent, count(sent), clipped_from=whole))
        left = 0
    return Instructions(tuple(files), tuple(problems))


def _fingerprint(project_root: Path, home: Path) -> tuple[tuple[str, int, int], ...]:
    """What says a file changed without reading it: each candidate's path, mtime and size."""
    marks = []
    for label, path, _ in instruction_sources(project_root, home):
        try:
            info = path.stat()
            marks.append((label, info.st_mtime_ns, info.st_size))
        except OSError:
            marks.append((label, -1, -1))
    return tuple(marks)


class InstructionsWatcher:
    """The loaded instructions of one agent, re-read when a file changed (between turns)."""

    def __init__(self, project_root: Path, home: Path, max_tokens: int, count: Callable[[str], int]) -> None:
        self.project_root, self.home, self.count = project_root, home, count
        self.max_tokens = max_tokens
        self._mark: tuple[tuple[str, int, int], ...] | None = None
        self.current = Instructions()
        #: the line not yet shown to the user (first load or a change), taken by :meth:`take_note`
        self._note: str | None = None

    def refresh(self, max_tokens: int | None = None) -> bool:
        """Re-read when a file (or the bound) changed; ``True`` when the instructions sent change."""
        bound = self.max_tokens if max_tokens is None else max_tokens
        mark = _fingerprint(self.project_root, self.home)
        if mark == self._mark and bound == self.max_tokens:
            return False
        first = self._mark is None
        self._mark, self.max_tokens = mark, bound
        before, self.current = self.current, load_instructions(self.project_root, self.home, bound, self.count)
        if self.current == before:
            return False
        self._note = self._describe_change(before, first)
        return True

    def _describe_change(self, before: Instructions, first: bool) -> str | None:
        now = self.current
        clipped = [f"{f.label} is {f.clipped_from:,} tokens, over agent.instructionsMaxTokens "
                   f"{self.max_tokens:,}: clipped" for f in now.files if f.clipped_from]
        warning = f"; warning: {'; '.join(clipped)}" if clipped else ""
        if first:
            return f"instructions from {now.describe()}{warning}" if now.files or now.problems else None
        if not now.files:
            return f"instructions: none now ({', '.join(f.label for f in before.files)} gone or empty)"
        return f"instructions reloaded: {now.describe()}{warning}"

    def take_note(self) -> str | None:
        """The one line to show about the last change, once."""
        note, self._note = self._note, None
        return note
