"""Handoff operations behind ``%capsule create|export|load|list|show``, headless.

The magics parse arguments and print; everything they do to files and sessions is here, so it is
testable without IPython and usable from scripts:

* :func:`create_portable` + :func:`write_created` — an intentional handoff: a Portable Capsule
  of the current state, written to ``.soba/capsules/<ck>.capsule.md``. It does not touch the
  session's model input (nothing is appended to the transcript).
* :func:`find_checkpoint` / :func:`export_checkpoint` — any checkpoint, as a Portable Capsule:
  a ``capsule`` entry of the transcript (by ``checkpointId``) or a created capsule file.
* :func:`load_into_new_session` — start a session (or continue one) whose model input begins
  with a capsule from a file: a ``capsule`` entry with trigger ``capsule_load``, no kept tail,
  and ``loadedFrom`` saying where it came from.
* :func:`list_capsules`, :func:`resolve`, :func:`show_text` — what there is, and one of it.

Every file written goes through redaction and the atomic writer of :mod:`.portable`.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..compaction.capsule import Capsule
from ..errors import CapsuleFormatError, SobaError
from ..session.entries import Entry, now_iso
from ..session.payloads import capsule_data
from ..session.store import SessionStore
from .leaf import bring_up_to_leaf
from .portable import ID_PATTERN, QUALITIES, SUFFIX, PortableCapsule, export, export_text, load, new_capsule_id
from .project import MemoryNotFoundError, ProjectMemory
from .redact import redact_portable

__all__ = [
    "LOAD_TRIGGER",
    "CheckpointNotFoundError",
    "capsules_dir",
    "create_portable",
    "export_checkpoint",
    "find_checkpoint",
    "list_capsules",
    "load_into_new_session",
    "new_checkpoint_id",
    "project_root_of",
    "resolve",
    "show_text",
    "write_created",
]

#: The trigger of a ``capsule`` entry made by loading a Portable Capsule.
LOAD_TRIGGER = "capsule_load"


class CheckpointNotFoundError(SobaError, LookupError):
    """No checkpoint (transcript capsule or created capsule file) has that id."""


def new_checkpoint_id() -> str:
    """``ck_`` and 40 random bits in hex, the form the compaction engine uses."""
    return "ck_" + secrets.token_hex(5)


def capsules_dir(project_root: str | os.PathLike[str]) -> Path:
    """``<project>/.soba/capsules``: where created Portable Capsules live."""
    return Path(project_root) / ".soba" / "capsules"


def project_root_of(store: SessionStore) -> Path:
    """The project a session belongs to: ``<root>/.soba/sessions/<id>.jsonl``, else its header's cwd."""
    parent = store.file.resolve().parent
    if parent.name == "sessions" and parent.parent.name == ".soba":
        return parent.parent.parent
    return Path(str(store.header.get("cwd") or os.getcwd()))


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


# -- create --------------------------------------------------------------------------------------
def create_portable(store: SessionStore, capsule: Capsule, title: str, *, checkpoint_id: str | None = None,
                    quality: str = "ok", trigger: str = "user", token_count: int = 0,
                    kernel_state: Sequence[str] = ()) -> PortableCapsule:
    """A Portable Capsule of ``capsule`` made in ``store``'s session (nothing is written), true as
    of the session's leaf; ``kernel_state`` lists the live kernel's variables (informative only)."""
    if quality not in QUALITIES:
        raise CapsuleFormatError(f"quality {quality!r} is not one of {', '.join(QUALITIES)}")
    checkpoint_id = checkpoint_id or new_checkpoint_id()
    if not ID_PATTERN.fullmatch(checkpoint_id):
        raise CapsuleFormatError(f"checkpoint id {checkpoint_id!r} must be letters, digits, '_', '.' or '-'")
    return PortableCapsule(id=new_capsule_id(), capsule=capsule, title=title or "", created=now_iso(),
                           source_session=store.id, source_checkpoint=checkpoint_id, trigger=trigger,
                           quality=quality, token_count=_int(token_count), as_of=store.leaf_id,
                           kernel_state=tuple(kernel_state))


def write_created(project_root: str | os.PathLike[str], pc: PortableCapsule, *, force: bool = False,
                  environ: Mapping[str, str] | None = None) -> Path:
    """Write a created capsule (redacted) to ``.soba/capsules/<ck>.capsule.md``; returns the path."""
    name = pc.source_checkpoint or pc.id
    return export(pc, capsules_dir(project_root) / f"{name}{SUFFIX}", force=force, environ=environ)


# -- find and export -----------------------------------------------------------------------------
def _portable_id(session_id: str, checkpoint_id: str) -> str:
    """A stable capsule id for a transcript checkpoint: exporting it twice gives the same id."""
    return "cap_" + hashlib.sha256(f"{session_id}\0{checkpoint_id}".encode()).hexdigest()[:16]


def _from_entry(store: SessionStore, entry: Entry) -> PortableCapsule:
    data = entry.data
    ck = str(data.get("checkpointId") or entry.id)
    capsule = Capsule.from_json(data.get("state"), where=f"{store.file}:{entry.line}: capsule entry {entry.id}")
    quality = str(data.get("quality", "ok"))
    trigger = str(data.get("trigger") or "unknown")
    return PortableCapsule(id=_portable_id(store.id, ck), capsule=capsule, title=f"{trigger} checkpoint {ck}",
                           created=entry.ts or "", source_session=store.id, source_checkpoint=ck, trigger=trigger,
                           quality=quality if quality in QUALITIES else "degraded",
                           token_count=_int(data.get("tokensAfter")), kernel_state=kernel_state_of(entry))


def _capsule_entries(store: SessionStore) -> list[Entry]:
    return store.entries_of_type("capsule")  # read back from the file: only the capsules


def find_checkpoint(store: SessionStore, ck: str, *, project_root: str | os.PathLike[str] | None = None
                    ) -> PortableCapsule:
    """Checkpoint ``ck`` as a Portable Capsule: a transcript ``capsule`` entry, else a created file.

    ``project_root`` defaults to the session's project (:func:`project_root_of`).
    """
    for entry in reversed(_capsule_entries(store)):
        if capsule_data(entry).get("checkpointId") == ck:
            return _from_entry(store, entry)
    root = Path(project_root) if project_root is not None else project_root_of(store)
    if ID_PATTERN.fullmatch(ck):
        file = capsules_dir(root) / f"{ck}{SUFFIX}"
        if file.is_file():
            return load(file)
    known = [str(capsule_data(e).get("checkpointId")) for e in _capsule_entries(store)]
    created = sorted(p.name[: -len(SUFFIX)] for p in capsules_dir(root).glob(f"*{SUFFIX}")) \
        if capsules_dir(root).is_dir() else []
    raise CheckpointNotFoundError(
        f"no checkpoint {ck!r} in session {store.id} or in {capsules_dir(root)} (checkpoints: "
        f"{', '.join(known) or 'none'}; created capsules: {', '.join(created) or 'none'})")


def export_checkpoint(store: SessionStore, project_root: str | os.PathLike[str], ck: str,
                      path: str | os.PathLike[str], *, force: bool = False,
                      environ: Mapping[str, str] | None = None, kernel_state: Sequence[str] | None = None) -> Path:
    """Write checkpoint ``ck`` (redacted, atomically) to ``path``; refuses to overwrite unless ``force``.

    The capsule is first brought up to the session's leaf (:func:`.leaf.bring_up_to_leaf`), so
    the file is true as of the leaf and says so in its ``as-of`` header; a checkpoint that cannot
    be (another branch) raises :class:`.leaf.StaleCapsuleError`, pointing to ``%capsule create``.
    ``kernel_state`` is the live kernel's (default: the one the checkpoint recorded).
    """
    pc = bring_up_to_leaf(store, find_checkpoint(store, ck, project_root=project_root), kernel_state=kernel_state)
    return export(pc, path, force=force, environ=environ)


def kernel_state_of(entry: Entry) -> tuple[str, ...]:
    """The kernel state a ``capsule`` entry recorded (``kernelState``), or none."""
    raw = capsule_data(entry).get("kernelState")
    return tuple(s for s in raw if isinstance(s, str)) if isinstance(raw, list) else ()


# -- load --------------------------------------------------------------------------------------
def load_into_new_session(path: str | os.PathLike[str], sessions_dir: str | os.PathLike[str], *,
                          continue_store: SessionStore | None = None, strict: bool = False,
                          cwd: str | None = None) -> SessionStore:
    """A session whose model input begins with the capsule in ``path``.

    A new session in ``sessions_dir`` (or ``continue_store``, continued: what came before stays
    in its transcript but leaves the model input) gets a ``capsule`` entry: a new checkpoint id,
    ``firstKeptEntryId: None``, trigger ``capsule_load``, the file's quality and state, and
    ``loadedFrom`` (path, capsule id, source session and checkpoint, content hash, edited).
    The file is parsed first: a broken file raises and no session is created.
    """
    source = Path(path)
    pc = load(source, strict=strict)
    store = continue_store if continue_store is not None else SessionStore.create(sessions_dir, cwd=cwd)
    # the source kernel's variables travel as information only: this kernel does not have them
    kernel = {"kernelState": list(pc.kernel_state), "kernelStateLoaded": True} if pc.kernel_state else {}
    store.append(Entry("capsule", {
        "checkpointId": new_checkpoint_id(), "firstKeptEntryId": None, "trigger": LOAD_TRIGGER,
        "quality": pc.quality, "state": pc.capsule.to_json(), "tokensBefore": None, "tokensAfter": pc.token_count,
        "source": "estimated", "operationId": None, **kernel,
        "loadedFrom": {"path": str(source.resolve()), "capsuleId": pc.id, "title": pc.title,
                       "sourceSession": pc.source_session, "sourceCheckpoint": pc.source_checkpoint,
                       "hash": pc.content_hash, "edited": pc.edited}}))
    return store


# -- list and show -----------------------------------------------------------------------------
def _row(kind: str, ref: str, pc: PortableCapsule | None, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"kind": kind, "ref": ref, "checkpointId": None, "capsuleId": None, "title": None,
                           "trigger": None, "quality": None, "tokens": None, "date": None, "path": None,
                           "current": False, "error": None}
    if pc is not None:
        row.update(checkpointId=pc.source_checkpoint, capsuleId=pc.id, title=pc.title, trigger=pc.trigger,
                   quality=pc.quality, tokens=pc.token_count, date=pc.created)
    row.update(extra)
    return row


def list_capsules(store: SessionStore, project_root: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Every checkpoint of the session, created capsule and Project Memory entry, one dict each.

    Keys: ``kind`` (``checkpoint`` | ``created`` | ``memory``), ``ref`` (what :func:`resolve`
    accepts), ``checkpointId``, ``capsuleId``, ``title``, ``trigger``, ``quality``, ``tokens``,
    ``date``, ``path``, ``current`` (the capsule in force on the session's leaf) and ``error``
    (a file that does not load). Transcript checkpoints come first, in transcript order.
    """
    root = Path(project_root) if project_root is not None else project_root_of(store)
    rows: list[dict[str, Any]] = []
    on_path = {e.id for e in store.path()}
    in_force = next((e.id for e in reversed(store.path()) if e.type == "capsule"), None)
    for entry in _capsule_entries(store):
        data = entry.data
        ck = str(data.get("checkpointId") or entry.id)
        loaded = data.get("loadedFrom")
        row = _row("checkpoint", ck, None, checkpointId=ck, trigger=data.get("trigger"), quality=data.get("quality"),
                   tokens=data.get("tokensAfter"), tokensBefore=data.get("tokensBefore"), date=entry.ts,
                   entryId=entry.id, onPath=entry.id in on_path, current=entry.id == in_force,
                   loadedFrom=loaded.get("path") if isinstance(loaded, Mapping) else None)
        rows.append(row)
    created = capsules_dir(root)
    created_rows: list[dict[str, Any]] = []
    for file in sorted(created.glob(f"*{SUFFIX}")) if created.is_dir() else []:
        ref = file.name[: -len(SUFFIX)]
        try:
            created_rows.append(_row("created", ref, load(file), path=str(file)))
        except CapsuleFormatError as exc:
            created_rows.append(_row("created", ref, None, path=str(file), error=str(exc)))
    created_rows.sort(key=lambda r: (r["date"] or "", r["ref"]))
    memory_rows = [_row("memory", r.id, r.capsule, path=str(r.path), error=r.error)
                   for r in ProjectMemory(root).records()]
    return rows + created_rows + memory_rows


def resolve(store: SessionStore, ref: str, *, project_root: str | os.PathLike[str] | None = None
            ) -> PortableCapsule:
    """The capsule ``ref`` names: a ``.capsule.md`` path, a checkpoint id, or a Project Memory id."""
    root = Path(project_root) if project_root is not None else project_root_of(store)
    if ref.endswith(SUFFIX) or os.sep in ref or "/" in ref:
        return load(ref)
    try:
        return find_checkpoint(store, ref, project_root=root)
    except CheckpointNotFoundError as exc:
        try:
            return ProjectMemory(root).read(ref)
        except MemoryNotFoundError:
            raise CheckpointNotFoundError(f"{exc} nor in Project Memory") from None


def show_text(pc: PortableCapsule, environ: Mapping[str, str] | None = None) -> str:
    """What ``%capsule show`` prints: the ``.capsule.md`` text, redacted."""
    return export_text(redact_portable(pc, environ))
