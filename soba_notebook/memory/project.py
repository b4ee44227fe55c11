"""Project Memory: the durable capsules of a project, and the rule for what may enter it.

A Context Capsule is working session state, "not a claim that every summarized fact belongs in
long-term Project Memory" (seed sections 1 and 2.2). This module owns that line:

* :func:`mirror_decision` — the pure rule. Automatic (``auto_threshold``), ``turn_complete``,
  ``milestone``, ``plan_pivot``, ``hard_limit`` and ``context_overflow`` capsules are never
  mirrored; an explicit user compact (``trigger == "user"``) is mirrored only if it validates,
  its quality is ``ok`` (neither ``partial`` nor ``degraded``), and either ``--remember`` was
  given or ``memory.mirrorExplicitCompacts`` is on. Every refusal says why.
* :class:`ProjectMemory` — the store: ``<project>/.soba/memory/<id>.capsule.md``, one Portable
  Capsule file per memory (the directory is the index: there is no second file to go stale).
  Everything written is redacted first (:mod:`.redact`) and written atomically
  (:func:`.portable.export`).
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..compaction.capsule import Capsule
from ..errors import CapsuleFormatError, SobaError
from ..session.capsule_schema import validate_capsule_json
from ..session.entries import Entry, now_iso
from ..statefiles import state_dir
from .portable import ID_PATTERN, SUFFIX, PortableCapsule, export, load

__all__ = [
    "SESSION_LOCAL_TRIGGERS",
    "MemoryNotFoundError",
    "MemoryRecord",
    "MirrorDecision",
    "ProjectMemory",
    "memory_dir",
    "mirror_decision",
]

#: Triggers whose capsules stay in the session that made them (seed 2.2).
SESSION_LOCAL_TRIGGERS = frozenset({"auto_threshold", "turn_complete", "milestone", "plan_pivot", "hard_limit",
                                    "context_overflow"})
#: The one trigger that may be mirrored: an explicit ``%compact``.
EXPLICIT_TRIGGER = "user"


class MemoryNotFoundError(SobaError, LookupError):
    """No Project Memory entry has that id."""


@dataclass(frozen=True, slots=True)
class MirrorDecision:
    """Whether a capsule entered Project Memory, why (or why not), and where it was written."""

    mirrored: bool
    reason: str
    path: Path | None = None


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """One file in the memory directory: its capsule, or the error that kept it from loading."""

    id: str
    path: Path
    capsule: PortableCapsule | None
    error: str | None = None


def mirror_decision(trigger: str, quality: str, problems: Sequence[str], explicit: bool, remember: bool,
                    config_switch: bool) -> tuple[bool, str]:
    """Whether a capsule may be mirrored into Project Memory, and the reason. Pure.

    ``problems`` is what :func:`~soba_notebook.session.capsule_schema.validate_capsule_json` (and
    the caller) found wrong with the capsule; ``explicit`` says the user asked for this compact;
    ``remember`` is ``%compact --remember``; ``config_switch`` is
    ``memory.mirrorExplicitCompacts``.
    """
    if trigger in SESSION_LOCAL_TRIGGERS:
        return False, f"refused: trigger {trigger} capsules stay session-local"
    if trigger != EXPLICIT_TRIGGER:
        return False, f"refused: trigger {trigger!r} is not an explicit user compact; only those may be mirrored"
    if not explicit:
        return False, "refused: only a compact the user explicitly asked for may be mirrored"
    if problems:
        return False, "refused: the capsule does not validate: " + "; ".join(problems)
    if quality == "degraded":
        return False, "refused: degraded capsules are never mirrored"
    if quality == "partial":
        return False, ("refused: partial capsules (the model's summary lacked a usable goal or next steps, or "
                       "held junk) are never mirrored")
    if quality != "ok":
        return False, f"refused: capsule quality {quality!r} is not ok"
    if not (remember or config_switch):
        return False, "refused: explicit compact without --remember and memory.mirrorExplicitCompacts is off"
    why = "--remember" if remember else "memory.mirrorExplicitCompacts is on"
    return True, f"mirrored: validated explicit compact ({why})"


def memory_dir(project_root: str | os.PathLike[str]) -> Path:
    """``<project>/.soba/memory``."""
    return Path(project_root) / ".soba" / "memory"


class ProjectMemory:
    """The Project Memory of one project.

    ``root`` is the project directory; the memory lives in ``<root>/.soba/memory``. A path that
    already is a ``.soba/memory`` directory is accepted as is. ``environ`` (default
    :data:`os.environ`) is where redaction looks for secrets.
    """

    def __init__(self, root: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None) -> None:
        path = Path(root)
        if path.name == "memory" and path.parent.name == ".soba":
            self.directory = path
            self.root = path.parent.parent
        else:
            self.root = path
            self.directory = memory_dir(path)
        self.environ = environ

    def path_for(self, memory_id: str) -> Path:
        """The file of ``memory_id``; an id that could leave the directory is refused."""
        if not isinstance(memory_id, str) or not ID_PATTERN.fullmatch(memory_id):
            raise MemoryNotFoundError(f"{memory_id!r} is not a Project Memory id (letters, digits, '_', '.', '-')")
        return self.directory / f"{memory_id}{SUFFIX}"

    # -- writing -------------------------------------------------------------------------------
    def add(self, pc: PortableCapsule, *, force: bool = False) -> Path:
        """Write ``pc`` (redacted) as ``<id>.capsule.md``; refuses to replace one unless ``force``."""
        return export(pc, self.path_for(pc.id), force=force, environ=self.environ)

    def mirror(self, capsule_entry: Entry, *, explicit: bool, validated: bool, remember: bool,
               config_switch: bool, session_id: str | None = None, title: str | None = None) -> MirrorDecision:
        """Mirror a transcript ``capsule`` entry if :func:`mirror_decision` allows it.

        ``validated`` is the caller's word that the compaction validated the capsule; the state
        is validated here as well. Mirroring the same checkpoint twice writes it once.
        """
        if capsule_entry.type != "capsule":
            return MirrorDecision(False, f"refused: entry {capsule_entry.id} is a {capsule_entry.type!r} entry, "
                                         f"not a capsule")
        data = capsule_entry.data
        trigger = str(data.get("trigger", ""))
        quality = str(data.get("quality", "ok"))
        state = data.get("state")
        problems = validate_capsule_json(state)
        if not validated:
            problems = [*problems, "the compaction did not validate it"]
        ok, reason = mirror_decision(trigger, quality, problems, explicit, remember, config_switch)
        if not ok:
            return MirrorDecision(False, reason)
        checkpoint = data.get("checkpointId")
        checkpoint = checkpoint if isinstance(checkpoint, str) and checkpoint else None
        memory_id = f"mem_{checkpoint or capsule_entry.id}"
        path = self.path_for(memory_id)
        if path.exists():
            return MirrorDecision(True, "mirrored: already in Project Memory", path)
        tokens = data.get("tokensAfter")
        pc = PortableCapsule(
            id=memory_id, capsule=Capsule.from_json(state, where=f"capsule entry {capsule_entry.id}"),
            title=title or f"explicit compact {checkpoint or capsule_entry.id}",
            created=capsule_entry.ts or now_iso(), source_session=session_id, source_checkpoint=checkpoint,
            trigger=trigger, quality=quality,
            token_count=tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0 else 0)
        return MirrorDecision(True, reason, self.add(pc))

    def remove(self, memory_id: str) -> Path:
        """Delete one memory; returns the removed file."""
        path = self.path_for(memory_id)
        try:
            with state_dir(path.parent) as dir_fd:  # never a file behind a linked directory
                os.unlink(path.name, dir_fd=dir_fd)
        except FileNotFoundError:
            raise MemoryNotFoundError(f"{path}: no Project Memory entry {memory_id!r}") from None
        return path

    # -- reading -------------------------------------------------------------------------------
    def read(self, memory_id: str, *, strict: bool = False) -> PortableCapsule:
        path = self.path_for(memory_id)
        if not path.exists():
            raise MemoryNotFoundError(f"{path}: no Project Memory entry {memory_id!r}")
        return load(path, strict=strict)

    def records(self) -> builtins.list[MemoryRecord]:
        """Every memory file, oldest first; a file that does not load is listed with its error."""
        out: builtins.list[MemoryRecord] = []
        if not self.directory.is_dir():
            return out
        for path in sorted(self.directory.glob(f"*{SUFFIX}")):
            memory_id = path.name[: -len(SUFFIX)]
            try:
                out.append(MemoryRecord(memory_id, path, load(path)))
            except CapsuleFormatError as exc:
                out.append(MemoryRecord(memory_id, path, None, str(exc)))
        out.sort(key=lambda r: (r.capsule.created if r.capsule else "", r.id))
        return out

    def offer(self) -> builtins.list[PortableCapsule]:
        """The capsules a new session can start from: loadable, quality ``ok``, newest first."""
        good = [r.capsule for r in self.records() if r.capsule is not None and r.capsule.quality == "ok"]
        return good[::-1]

    def list(self) -> builtins.list[MemoryRecord]:
        """Alias of :meth:`records` (every memory, oldest first, broken ones with their error)."""
        return self.records()
