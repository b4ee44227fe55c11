"""``%capsule create|export|load|list|show``: Portable Capsules from the notebook.

One table of declarations (:data:`COMMANDS`, dispatched and listed in help by :mod:`.magic_args`)
and one small function per subcommand.

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
from .magic_args import Command, Flag, Parsed, Table

__all__ = ["COMMANDS"]


def _remember(root: Any, pc: Any, capsule: Capsule, quality: str) -> None:
    """``--remember``: the same rule as ``%compact --remember``: only a capsule that validates and
    whose quality is ``ok`` (neither partial nor degraded) is mirrored into Project Memory; a refusal says why."""
    ok, reason = mirror_decision(EXPLICIT_TRIGGER, quality, validate_capsule_json(capsule.to_json()),
                                 explicit=True, remember=True, config_switch=False)
    if not ok:
        print(f"not added to Project Memory: {reason}")
        return
    print(f"added to Project Memory: {ProjectMemory(root).add(pc)}")


def _create(session: NotebookSession, args: Parsed) -> None:
    handle = session.ensure()
    try:
        made = session.run_job(lambda cancel: handle.agent.engine.summarize_current(cancel=cancel),
                               "%capsule create")
    except TurnCancelled as exc:
        print(f"%capsule create cancelled: {exc}")
        return
    if made is None:  # withdrawn from the queue before it started
        return
    capsule, quality, note = made
    store, root = handle.store, handle.paths.root
    tokens = handle.agent.counter.count_text(render(capsule))
    pc = handoff.create_portable(store, capsule, args.words[0], quality=quality, token_count=tokens,
                                 kernel_state=session.kernel_state() or ())
    path = handoff.write_created(root, pc)
    print(f"created {pc.source_checkpoint} ({quality}, {tokens:,} tokens) → {path}"
          + (f" [{note}]" if note else ""))
    if args.has("--remember"):
        _remember(root, pc, capsule, quality)


def _export(session: NotebookSession, args: Parsed) -> None:
    handle = session.ensure()
    ck, target = args.words
    path = handoff.export_checkpoint(handle.store, handle.paths.root, ck, target, force=args.has("--force"),
                                     kernel_state=session.kernel_state())
    print(f"exported {ck} → {path} (true as of entry {handle.store.leaf_id})")


def _load(session: NotebookSession, args: Parsed) -> None:
    handle = session.ensure()
    if session.runtime is not None and session.runtime.busy:
        raise UsageError("a turn is running; %soba stop it before loading a capsule")
    cont = args.has("--continue")
    new_store = handoff.load_into_new_session(args.words[0], handle.paths.sessions,
                                              continue_store=handle.store if cont else None,
                                              cwd=str(handle.paths.root))
    if cont:
        handle.agent.engine.tracker.invalidate()
    else:
        session.ensure(session=str(new_store.file))
    print(("continued session " if cont else "new session ") + f"{new_store.id}: its model input now starts "
          f"with the capsule from {args.words[0]}")


def _list(session: NotebookSession, args: Parsed) -> None:
    handle = session.ensure()
    rows = handoff.list_capsules(handle.store, handle.paths.root)
    if not rows:
        print("no capsules yet: %compact or %capsule create make one")
    for row in rows:
        mark = "*" if row.get("current") else " "
        tokens = row.get("tokens")
        print(f"{mark} {row['kind']:<10} {row['ref']:<24} {row.get('trigger') or '':<16} "
              f"{row.get('quality') or '':<9} {tokens if tokens is not None else '':>8}  {row.get('date') or ''}"
              + (f"  ERROR: {row['error']}" if row.get("error") else ""))


def _show(session: NotebookSession, args: Parsed) -> None:
    handle = session.ensure()
    print(handoff.show_text(handoff.resolve(handle.store, args.words[0], project_root=handle.paths.root)))


#: ``%capsule``'s subcommands, in the order its help lists them.
COMMANDS = Table("%capsule", (
    Command("create", '"title" [--remember]', "summarize now into .soba/capsules/<ck>.capsule.md "
            "(queued behind a running turn; the stop button cancels it)", words=(1, 1),
            flags=(Flag("--remember"),), run=_create),
    Command("export", "CK PATH [--force]", "write a checkpoint's capsule to PATH", words=(2, 2),
            flags=(Flag("--force"),), run=_export),
    Command("load", "PATH [--continue]", "start a new session from it (or continue this one)", words=(1, 1),
            flags=(Flag("--continue"),), run=_load),
    Command("list", summary="checkpoints of this session, created capsules, memory", run=_list),
    Command("show", "CK", "print a capsule", words=(1, 1), run=_show),
))
