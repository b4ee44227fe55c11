"""``%capsule create|export|load|list|show``: Portable Capsules from the notebook.

Thin glue over :mod:`soba_notebook.memory` (the format, Project Memory, handoff) and the
compaction engine (summarizing the current state without touching the model input).
"""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError

from ..compaction.capsule import Capsule, render
from ..errors import TurnCancelled
from ..memory import handoff
from ..memory.project import EXPLICIT_TRIGGER, ProjectMemory, mirror_decision
from ..session.capsule_schema import validate_capsule_json
from .controller import NotebookSession

__all__ = ["run"]

USAGE = ('usage: %capsule create "title" [--remember] | export CK PATH [--force] | load PATH [--continue] '
         "| list | show CK")


def _remember(root: Any, pc: Any, capsule: Capsule, quality: str) -> None:
    """``--remember``: the same rule as ``%compact --remember``: only a capsule that validates and
    is not degraded is mirrored into Project Memory; a refusal says why."""
    ok, reason = mirror_decision(EXPLICIT_TRIGGER, quality, validate_capsule_json(capsule.to_json()),
                                 explicit=True, remember=True, config_switch=False)
    if not ok:
        print(f"not added to Project Memory: {reason}")
        return
    print(f"added to Project Memory: {ProjectMemory(root).add(pc)}")


def run(session: NotebookSession, args: list[str]) -> Any:
    command, rest = args[0], args[1:]
    flags = {a for a in rest if a.startswith("--")}
    words = [a for a in rest if not a.startswith("--")]
    handle = session.ensure()
    store, root = handle.store, handle.paths.root
    if command == "create":
        if len(words) != 1 or flags - {"--remember"}:
            raise UsageError('usage: %capsule create "title" [--remember]')
        try:
            made = session.run_job(lambda cancel: handle.agent.engine.summarize_current(cancel=cancel),
                                   "%capsule create")
        except TurnCancelled as exc:
            print(f"%capsule create cancelled: {exc}")
            return None
        if made is None:  # withdrawn from the queue before it started
            return None
        capsule, quality, note = made
        tokens = handle.agent.counter.count_text(render(capsule))
        pc = handoff.create_portable(store, capsule, words[0], quality=quality, token_count=tokens,
                                     kernel_state=session.kernel_state() or ())
        path = handoff.write_created(root, pc)
        print(f"created {pc.source_checkpoint} ({quality}, {tokens:,} tokens) → {path}"
              + (f" [{note}]" if note else ""))
        if "--remember" in flags:
            _remember(root, pc, capsule, quality)
        return None
    if command == "export":
        if len(words) != 2 or flags - {"--force"}:
            raise UsageError("usage: %capsule export CK PATH [--force]")
        path = handoff.export_checkpoint(store, root, words[0], words[1], force="--force" in flags,
                                         kernel_state=session.kernel_state())
        print(f"exported {words[0]} → {path} (true as of entry {store.leaf_id})")
        return None
    if command == "load":
        if len(words) != 1 or flags - {"--continue"}:
            raise UsageError("usage: %capsule load PATH [--continue]")
        if session.runtime is not None and session.runtime.busy:
            raise UsageError("a turn is running; %soba stop it before loading a capsule")
        cont = "--continue" in flags
        new_store = handoff.load_into_new_session(words[0], handle.paths.sessions,
                                                  continue_store=store if cont else None, cwd=str(root))
        if cont:
            handle.agent.engine.tracker.invalidate()
        else:
            session.ensure(session=str(new_store.file))
        print(("continued session " if cont else "new session ") + f"{new_store.id}: its model input now starts "
              f"with the capsule from {words[0]}")
        return None
    if command == "list":
        rows = handoff.list_capsules(store, root)
        if not rows:
            print("no capsules yet: %compact or %capsule create make one")
        for row in rows:
            mark = "*" if row.get("current") else " "
            tokens = row.get("tokens")
            print(f"{mark} {row['kind']:<10} {row['ref']:<24} {row.get('trigger') or '':<16} "
                  f"{row.get('quality') or '':<9} {tokens if tokens is not None else '':>8}  {row.get('date') or ''}"
                  + (f"  ERROR: {row['error']}" if row.get("error") else ""))
        return None
    if command == "show":
        if len(words) != 1:
            raise UsageError("usage: %capsule show CK")
        print(handoff.show_text(handoff.resolve(store, words[0], project_root=root)))
        return None
    raise UsageError(f"unknown %capsule command {command!r}; {USAGE}")
