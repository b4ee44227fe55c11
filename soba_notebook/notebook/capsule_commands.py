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

__all__ = ["COMMANDS", "capsule_table"]


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


#: ``%capsule list``'s columns: (header, row key, right-aligned). The first, unnamed, marks the capsule in force.
_LIST_COLUMNS = (("", "current", False), ("kind", "kind", False), ("ref", "ref", False), ("trigger", "trigger", False),
                 ("quality", "quality", False), ("tokens", "tokens", True), ("date (UTC)", "date", False))


def _cell(key: str, value: Any) -> str:
    if key == "current":
        return "*" if value else ""
    if value is None:
        return ""
    if key == "tokens" and isinstance(value, int):
        return f"{value:,}"
    if key == "date":  # 2026-12-01T22:13:59.471Z -> 2026-12-01 22:13:59: short enough not to wrap
        return str(value).replace("T", " ")[:19]
    return str(value)


def capsule_table(rows: list[dict[str, Any]]) -> list[str]:
    """``%capsule list``'s lines: a header, one aligned row per capsule (a file that does not load
    keeps its row and says why at its end), and what the ``*`` means when one is marked."""
    cells = [[_cell(key, row.get(key)) for _, key, _ in _LIST_COLUMNS] for row in rows]
    widths = [max(len(head), *(len(c[i]) for c in cells)) for i, (head, _, _) in enumerate(_LIST_COLUMNS)]

    def line(values: list[str]) -> str:
        padded = [v.rjust(w) if right else v.ljust(w)
                  for v, w, (_, _, right) in zip(values, widths, _LIST_COLUMNS, strict=True)]
        return (padded[0] + " " + "  ".join(padded[1:])).rstrip()  # the mark sits close to its row

    lines = [line([head for head, _, _ in _LIST_COLUMNS])]
    for row, values in zip(rows, cells, strict=True):
        lines.append(line(values) + (f"  ERROR: {row['error']}" if row.get("error") else ""))
    if any(row.get("current") for row in rows):
        lines.append("* the capsule in force: the session's model input starts with it")
    return lines


def _list(session: NotebookSession, args: Parsed) -> None:
    handle = session.ensure()
    rows = handoff.list_capsules(handle.store, handle.paths.root)
    if not rows:
        print("no capsules yet: %compact or %capsule create make one")
        return
    print("\n".join(capsule_table(rows)))


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
