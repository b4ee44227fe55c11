"""Skills: markdown instructions the agent can switch on, kept in the system prompt while active.

A skill is a file ``<name>/SKILL.md`` under ``<workspace>/.soba/skills/`` or ``~/.soba/skills/``
(the workspace wins when both define a name). It may start with front matter::

    ---
    name: release-notes
    description: How this project writes release notes
    ---
    (markdown body)

This module owns discovery, parsing and the *active set*. The bodies of active skills form
:meth:`SkillRegistry.system_text`, which the agent puts into the system prompt it rebuilds before
every inference, so active skills survive every compaction without being copied into the capsule
text. Changes to the active set are returned as the new tuple so the agent can record them
(``config_change({"activeSkills": [...]})``) and restore them with :meth:`SkillRegistry.set_active`
when a session is reopened.

Skill files are data. They are read as UTF-8 text and never imported, executed or evaluated,
whatever they contain and whatever else sits in their directory.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..errors import ToolError

__all__ = ["SKILL_FILE", "Skill", "SkillRegistry", "parse_skill"]

SKILL_FILE = "SKILL.md"
_MAX_DESCRIPTION = 200


@dataclass(frozen=True, slots=True)
class Skill:
    """One skill file: its name, a one-line description, where it lives, and its markdown body."""

    name: str
    description: str
    path: Path
    body: str


def _front_matter(text: str) -> tuple[dict[str, str], str]:
    """``(keys, body)``: simple ``key: value`` front matter between ``---`` lines, if present."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}, text
    for end in range(1, len(lines)):
        if lines[end].strip() == "---":
            break
    else:
        return {}, text  # an opening fence without a closing one is body text
    keys: dict[str, str] = {}
    for line in lines[1:end]:
        key, sep, value = line.partition(":")
        if not sep or not key.strip() or line[:1].isspace():
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        keys[key.strip().lower()] = value
    return keys, "\n".join(lines[end + 1:]).strip("\n")


def _first_sentence(body: str) -> str:
    for line in body.splitlines():
        line = line.strip().lstrip("#").strip()
        if line:
            return line[:_MAX_DESCRIPTION]
    return ""


def parse_skill(path: Path, text: str) -> Skill:
    """A :class:`Skill` from the text of ``path`` (``.../<dir-name>/SKILL.md``).

    The name is the front matter's ``name`` or else the directory's name; the description is the
    front matter's ``description`` or else the body's first non-empty line.
    """
    keys, body = _front_matter(text)
    name = keys.get("name", "").strip() or path.parent.name
    description = keys.get("description", "").strip() or _first_sentence(body)
    return Skill(name, description[:_MAX_DESCRIPTION], path, body)


class SkillRegistry:
    """The skills found on disk and which of them are active.

    The directories are scanned on every call, so skills written while the kernel runs are found
    without a restart. Activation order is kept: it is the order of the bodies in
    :meth:`system_text`.
    """

    def __init__(self, workspace: str | os.PathLike[str], home: str | os.PathLike[str] | None = None) -> None:
        self.workspace = Path(workspace)
        self.home = Path(home) if home is not None else Path.home()
        self._active: list[str] = []

    @property
    def roots(self) -> tuple[Path, ...]:
        """Where skills are looked for, highest precedence first."""
        return (self.workspace / ".soba" / "skills", self.home / ".soba" / "skills")

    def _scan(self) -> dict[str, Skill]:
        found: dict[str, Skill] = {}
        for root in self.roots:
            try:
                candidates = sorted(root.glob(f"*/{SKILL_FILE}"))
            except OSError:
                continue
            for file in candidates:
                try:
                    text = file.read_text(encoding="utf-8", errors="replace")
                except OSError:
                    continue
                skill = parse_skill(file, text)
                found.setdefault(skill.name, skill)
        return found

    def available(self) -> list[Skill]:
        """Every skill on disk, sorted by name (a workspace skill hides a home one of the same name)."""
        return sorted(self._scan().values(), key=lambda s: s.name)

    def get(self, name: str) -> Skill:
        """The skill called ``name``; :class:`ToolError` listing the available ones otherwise."""
        skills = self._scan()
        if name in skills:
            return skills[name]
        if skills:
            listing = ", ".join(sorted(skills))
            raise ToolError(f"unknown skill {name!r}; available skills: {listing}")
        raise ToolError(f"unknown skill {name!r}; no skills are installed (put them in "
                        f"{self.roots[0]}/<name>/{SKILL_FILE} or {self.roots[1]}/<name>/{SKILL_FILE})")

    def active(self) -> tuple[str, ...]:
        return tuple(self._active)

    def activate(self, name: str) -> tuple[str, ...]:
        """Make ``name`` active (a no-op when it already is); returns the new active tuple."""
        self.get(name)
        if name not in self._active:
            self._active.append(name)
        return self.active()

    def deactivate(self, name: str) -> tuple[str, ...]:
        """Make ``name`` inactive (a no-op when it is not active); returns the new active tuple.

        A name that is active but whose file has since disappeared can still be deactivated.
        """
        if name not in self._active:
            self.get(name)  # unknown names are an error; known-but-inactive is a no-op
            return self.active()
        self._active.remove(name)
        return self.active()

    def set_active(self, names: Iterable[str]) -> tuple[str, ...]:
        """Restore an active set recorded earlier (a ``config`` entry's ``activeSkills``).

        Names are kept even when their file is gone, so the record stays faithful;
        :meth:`system_text` says which ones are missing.
        """
        self._active = list(dict.fromkeys(str(n) for n in names))
        return self.active()

    def system_text(self) -> str:
        """The bodies of the active skills, for the system prompt (``""`` when none is active)."""
        if not self._active:
            return ""
        skills = self._scan()
        parts: list[str] = []
        for name in self._active:
            skill = skills.get(name)
            if skill is None:
                parts.append(f'<skill name="{name}" missing="true">\nThis skill is active but its '
                             f"{SKILL_FILE} can no longer be found.\n</skill>")
                continue
            parts.append(f'<skill name="{name}" path="{skill.path}">\n{skill.body.strip()}\n</skill>')
        return "# Active skills\n\n" + "\n\n".join(parts)
