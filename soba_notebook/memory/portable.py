"""Portable Capsules: the ``.capsule.md`` file that moves a capsule between sessions, projects, agents.

A Context Capsule lives inside a session's JSONL. A *Portable* Capsule (seed section 9) is the
same state as a file a person can read, edit and hand over. This module owns that file format,
and only the format: :func:`export_text` / :func:`load_text` convert (the parse itself is
:mod:`.portable_reader`), :func:`export` / :func:`load` add the disk (atomic writes, redaction,
clear errors). ``load(export(pc)) == pc``
exactly, for every capsule.

In short: a ``---`` header (``soba-capsule: 1``, ``id``, ``title``, ``created``, the source
session and checkpoint, ``trigger``, ``quality``, ``tokens`` and the ``hash`` of the capsule
state), then one ``## `` section per capsule field (:data:`SECTIONS`). A string that is not
*plain* (:func:`is_plain`: one non-empty printable line, no outer whitespace, no leading quote, no
code fence) is written as one JSON string literal, so every value round-trips exactly. Reading is
forgiving where a person edits and exact where the file is broken (:class:`CapsuleFileError`
names the file, the line and the problem); content that no longer matches the header's hash was
edited by hand (``edited=True``, refused with ``strict=True``). Loading never executes anything:
only :mod:`json` string decoding, no eval, YAML, pickle or templates.

The complete format, with an example file and the encoding rule per field, is
``docs/CAPSULE_FORMAT.md`` in the repository; keep it in step with this module.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
import re
import secrets
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import get_args

from ..compaction.capsule import Capsule, Decision, Verification
from ..errors import CapsuleFormatError, SobaError
from ..session.capsule_schema import CAPSULE_FIELDS, validate_capsule_json
from ..session.payloads import Quality
from ..statefiles import state_dir
from .redact import redact_portable

__all__ = [
    "FORMAT_KEY",
    "FORMAT_VERSION",
    "ID_PATTERN",
    "INT_RE",
    "KERNEL_STATE_TITLE",
    "QUALITIES",
    "SECTIONS",
    "SECTION_BY_TITLE",
    "SUFFIX",
    "CapsuleExistsError",
    "CapsuleFileError",
    "PortableCapsule",
    "content_hash",
    "export",
    "export_text",
    "is_plain",
    "load",
    "load_text",
    "new_capsule_id",
    "sweep_temp_files",
]

FORMAT_KEY = "soba-capsule"
FORMAT_VERSION = 1
SUFFIX = ".capsule.md"
#: Capsule ids name files: letters, digits, ``_ . -`` only, no leading dot.
ID_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}")
QUALITIES: tuple[str, ...] = get_args(Quality)
SEP = " — "
#: A Markdown code fence. Kept out of bullets (a rendered "- ```" swallows the rest of the file).
_FENCE = "```"

#: The heading of the section that holds the source kernel's variables (not a capsule field).
KERNEL_STATE_TITLE = "Kernel state (informative only)"
#: Section titles in file order, with the Capsule attribute each holds: every capsule field under
#: its title (:data:`~soba_notebook.session.capsule_schema.CAPSULE_FIELDS`), then the kernel state.
SECTIONS: tuple[tuple[str, str], ...] = (*((f.title, f.attr) for f in CAPSULE_FIELDS),
                                         (KERNEL_STATE_TITLE, "kernel_state"))
#: Section title, lower-cased (and ``kernel state`` alone) -> (title, attribute): what a reader accepts.
SECTION_BY_TITLE = {title.lower(): (title, attr) for title, attr in SECTIONS}
SECTION_BY_TITLE["kernel state"] = (KERNEL_STATE_TITLE, "kernel_state")
#: Written under the kernel-state heading: the names were live in the source kernel, not in the reader's.
KERNEL_STATE_NOTE = ("<!-- The variables that existed in the source kernel when this capsule was made: type and "
                     "shape only. Informative only: loading this capsule cannot recreate them. -->")
INT_RE = re.compile(r"[+-]?[0-9]+")
_PREAMBLE = ("# Portable Context Capsule\n\n"
             "<!-- Edit freely: one \"- \" item per line. A value in double quotes is a JSON string (used for\n"
             "     text with newlines, outer spaces or a leading quote). Text before the first \"## \" section\n"
             "     is ignored. After an edit the hash no longer matches: the capsule loads as edited. -->\n")


class CapsuleFileError(CapsuleFormatError):
    """A ``.capsule.md`` file does not parse: ``source`` (file), ``line`` (1-based) and ``problem``."""

    def __init__(self, source: str, line: int | None, problem: str) -> None:
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {problem}")
        self.source = source
        self.line = line
        self.problem = problem


class CapsuleExistsError(SobaError, FileExistsError):
    """:func:`export` was asked to write over an existing file without ``force``."""


@dataclass(frozen=True, slots=True)
class PortableCapsule:
    """A capsule plus the metadata that travels with it in a ``.capsule.md`` file.

    ``token_count`` is the size of the model input the capsule stood for when it was made;
    ``edited`` records that the content was changed by hand after the hash was computed.
    The content hash is derived from ``capsule`` and ``kernel_state`` (:attr:`content_hash`), never
    stored apart. ``as_of`` is the transcript entry the state is true as of (the session's leaf
    when it was made or brought up to date; ``None`` in files written before it was recorded).
    ``kernel_state`` lists the source kernel's user variables (name, type, shape): informative only.
    """

    id: str
    capsule: Capsule = field(default_factory=Capsule)
    title: str = ""
    created: str = ""
    source_session: str | None = None
    source_checkpoint: str | None = None
    trigger: str = "user"
    quality: str = "ok"
    token_count: int = 0
    edited: bool = False
    as_of: str | None = None
    kernel_state: tuple[str, ...] = ()

    @property
    def content_hash(self) -> str:
        return content_hash(self.capsule, self.kernel_state)


def new_capsule_id() -> str:
    """A fresh capsule id: ``cap_`` and 64 random bits in hex."""
    return "cap_" + secrets.token_hex(8)


def content_hash(capsule: Capsule, kernel_state: tuple[str, ...] = ()) -> str:
    """``sha256:<hex>`` of the capsule state's canonical JSON (sorted keys, compact, ASCII).

    A kernel state, when there is one, is hashed with it (as ``kernelState``); without one the
    hash is exactly that of files written before kernel states existed.
    """
    state = capsule.to_json()
    if kernel_state:
        state["kernelState"] = list(kernel_state)
    canonical = json.dumps(state, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(canonical.encode("ascii")).hexdigest()


# -- the text encoding rule --------------------------------------------------------------------
def is_plain(text: str) -> bool:
    """Whether ``text`` can be written as is on one line (the rule: ``docs/CAPSULE_FORMAT.md``)."""
    return (bool(text) and text == text.strip() and text.isprintable() and not text.startswith('"')
            and _FENCE not in text)


def _json_string(text: str) -> str:
    """A JSON string literal for ``text`` that is one line of printable characters."""
    out: list[str] = []
    for ch in json.dumps(text, ensure_ascii=False):
        if ch.isprintable():
            out.append(ch)
            continue
        code = ord(ch)
        if code > 0xFFFF:
            code -= 0x10000
            out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
        else:
            out.append(f"\\u{code:04x}")
    return "".join(out)


def _text(text: str) -> str:
    return text if is_plain(text) else _json_string(text)


def _scalar(value: str | int | bool | None) -> str:
    """A header / range value: bare when unambiguous, else JSON."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if is_plain(value) and value not in ("null", "true", "false") and not INT_RE.fullmatch(value):
        return value
    return _json_string(value)


def _plain_goal(goal: str) -> bool:
    if not goal or goal != goal.strip() or goal.startswith('"'):
        return False
    fences = 0
    for line in goal.split("\n"):
        if line != line.rstrip() or not line.isprintable() or line.lstrip().startswith("#"):
            return False
        if _FENCE in line:
            if not line.lstrip().startswith(_FENCE):
                return False
            fences += 1
    return fences % 2 == 0  # an unbalanced fence would swallow the rest of the rendered file


# -- writing -----------------------------------------------------------------------------------
def _decision_line(d: Decision) -> str:
    what = d.what if is_plain(d.what) and "—" not in d.what else _json_string(d.what)
    return f"- {what}{SEP}{_text(d.why)}" if d.why else f"- {what}"


def _verification_line(v: Verification) -> str:
    command = f"`{v.command}`" if is_plain(v.command) and "`" not in v.command else _json_string(v.command)
    line = f"- {command}{SEP}{v.status}"
    return line + SEP + _text(v.detail) if v.detail else line


def _section_body(capsule: Capsule, attr: str) -> list[str]:
    if attr == "kernel_state":
        return []  # not a capsule field: export_text writes it from the PortableCapsule
    kind, value = _KINDS[attr], getattr(capsule, attr)
    if kind == "text":
        return [value if _plain_goal(value) else _json_string(value)]
    if kind == "decisions":
        return [_decision_line(d) for d in value]
    if kind == "verification":
        return [_verification_line(v) for v in value]
    if kind == "range":
        return [f"- first entry: {_scalar(value.first_id)}", f"- last entry: {_scalar(value.last_id)}",
                f"- entries: {value.count}"]
    return [f"- {_text(item)}" for item in value]


_KINDS = {f.attr: f.kind for f in CAPSULE_FIELDS}


def _check_exportable(pc: PortableCapsule) -> None:
    """Refuse to write a file that could not be loaded back."""
    problems: list[str] = []
    if not isinstance(pc.id, str) or not ID_PATTERN.fullmatch(pc.id):
        problems.append(f"id {pc.id!r} must be letters, digits, '_', '.' or '-' (it names files)")
    if pc.quality not in QUALITIES:
        problems.append(f"quality {pc.quality!r} is not one of {', '.join(QUALITIES)}")
    if isinstance(pc.token_count, bool) or not isinstance(pc.token_count, int) or pc.token_count < 0:
        problems.append(f"token count {pc.token_count!r} must be a non-negative integer")
    problems.extend(validate_capsule_json(pc.capsule.to_json()))
    if problems:
        raise CapsuleFormatError(f"cannot export capsule {pc.id!r}: " + "; ".join(problems))


def export_text(pc: PortableCapsule) -> str:
    """The ``.capsule.md`` text of ``pc``, exactly as given (no redaction: :func:`export` does that).

    Raises :class:`~soba_notebook.errors.CapsuleFormatError` for a capsule that could not be
    loaded back (an id that cannot name a file, an unknown quality or verification status).
    """
    _check_exportable(pc)
    header: dict[str, str | int | bool | None] = {
        FORMAT_KEY: FORMAT_VERSION, "id": pc.id, "title": pc.title, "created": pc.created,
        "source-session": pc.source_session, "source-checkpoint": pc.source_checkpoint,
        "as-of": pc.as_of, "trigger": pc.trigger, "quality": pc.quality, "tokens": pc.token_count,
        "hash": pc.content_hash}
    if pc.edited:
        header["edited"] = True
    parts = ["---", *(f"{k}: {_scalar(v)}" for k, v in header.items()), "---", "", _PREAMBLE]
    for title, attr in SECTIONS:
        if attr == "kernel_state":
            parts.append(f"## {title}\n")
            if pc.kernel_state:
                parts.append("\n".join([KERNEL_STATE_NOTE, *(f"- {_text(i)}" for i in pc.kernel_state)]) + "\n")
            continue
        parts.append(f"## {title}\n")
        body = _section_body(pc.capsule, attr)
        if body:
            parts.append("\n".join(body) + "\n")
    return "\n".join(parts)


def export(pc: PortableCapsule, path: str | os.PathLike[str], *, force: bool = False,
           environ: Mapping[str, str] | None = None) -> Path:
    """Write ``pc`` (redacted: :func:`~.redact.redact_portable`) to ``path`` atomically; returns the path.

    Refuses to replace an existing file unless ``force``. The text goes to a temporary file in
    the same directory, is fsynced, then ``os.replace``-d onto ``path``: a crash leaves either
    the old file or the complete new one, never half a capsule; on any error the temporary
    file is removed. ``environ`` (default :data:`os.environ`) is where secrets are looked up.
    """
    target = Path(path)
    if target.is_dir():
        raise CapsuleExistsError(f"{target}: is a directory; give a file name ending in {SUFFIX}")
    if not force and (target.exists() or target.is_symlink()):
        raise CapsuleExistsError(f"{target}: file already exists; not overwriting it (use force=True / --force)")
    _check_exportable(pc)
    data = export_text(redact_portable(pc, environ)).encode("utf-8")
    # every step by the directory's descriptor, no link followed under .soba (:mod:`...statefiles`)
    with state_dir(target.parent, create=True) as dir_fd:
        tmp = f".{target.name}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fchmod(fh.fileno(), 0o644)
                os.fsync(fh.fileno())
            os.replace(tmp, target.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)  # a link there is replaced, not followed
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        with contextlib.suppress(OSError):
            os.fsync(dir_fd)
    return target


def sweep_temp_files(directory: str | os.PathLike[str], *, older_than: float = 3600.0) -> list[Path]:
    """Remove temporary files a killed :func:`export` left in ``directory``; returns them.

    Only names :func:`export` creates (``.<name>.capsule.md.<random>.tmp``) whose last change is
    at least ``older_than`` seconds old are removed, so a live writer's file is left alone.
    """
    removed: list[Path] = []
    folder = Path(directory)
    if not folder.is_dir():
        return removed
    now = time.time()
    with state_dir(folder) as dir_fd:
        for entry in os.scandir(dir_fd):
            if not fnmatch.fnmatchcase(entry.name, f".*{SUFFIX}.*.tmp"):
                continue
            with contextlib.suppress(OSError):
                if now - entry.stat(follow_symlinks=False).st_mtime >= older_than:
                    os.unlink(entry.name, dir_fd=dir_fd)
                    removed.append(folder / entry.name)
    return removed


def load_text(text: str, *, source: str = "<string>", strict: bool = False) -> PortableCapsule:
    """Parse ``.capsule.md`` text. ``source`` names it in errors.

    Non-strict (default): a capsule whose content no longer matches the header's hash (a person
    edited it) loads with ``edited=True``. Strict: a mismatch, or a missing hash, is an error.
    """
    from .portable_reader import Reader  # it reads the format this module defines

    reader = Reader(text, source)
    raw, body_start = reader.header()
    meta = reader.meta(raw, body_start)
    capsule, kernel_state = reader.capsule(body_start)
    stored = meta.pop("hash")
    edited = bool(meta.pop("edited"))
    actual = content_hash(capsule, kernel_state)
    if stored != actual:
        if strict:
            line = raw["hash"][0] if "hash" in raw else body_start
            problem = ("no content hash in the front matter" if stored is None else
                       f"content hash mismatch: the header says {stored[:19]}…, the content hashes to "
                       f"{actual[:19]}… (the file was edited after export)")
            raise CapsuleFileError(source, line, problem + "; load without strict to accept the edit")
        edited = True
    return PortableCapsule(capsule=capsule, edited=edited, kernel_state=kernel_state, **meta)


#: A capsule file is a page of notes; anything bigger than this is refused before it is parsed.
_MAX_CAPSULE_FILE_BYTES = 8 * 1024 * 1024


def load(path: str | os.PathLike[str], *, strict: bool = False) -> PortableCapsule:
    """Read a ``.capsule.md`` file (see :func:`load_text`); errors name the file and line."""
    file = Path(path)
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not hang the kernel
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise CapsuleFileError(str(file), None, "not a regular file (a FIFO, socket or device); a capsule "
                                                        "is a .capsule.md text file")
            data = fh.read(_MAX_CAPSULE_FILE_BYTES + 1)
    except FileNotFoundError:
        raise CapsuleFileError(str(file), None, "no such capsule file") from None
    except OSError as exc:
        raise CapsuleFileError(str(file), None, f"cannot read capsule file ({exc.strerror})") from None
    if len(data) > _MAX_CAPSULE_FILE_BYTES:
        raise CapsuleFileError(str(file), None, f"larger than {_MAX_CAPSULE_FILE_BYTES:,} bytes; not a capsule")
    if b"\0" in data:
        raise CapsuleFileError(str(file), data.count(b"\n", 0, data.index(b"\0")) + 1,
                               "contains a NUL byte; a capsule is plain text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise CapsuleFileError(str(file), line, "not UTF-8 text") from None
    return load_text(text, source=str(file), strict=strict)
