"""Workspace trust: which settings a project's own ``.soba/config.json`` may set only after the user
trusts that file, and the user's record of the files they trust.

A cloned repository is data, not permission: its config must not be able to turn approvals off,
widen what the tools may touch, run a program, or send the user's API key to a server it names.
So the keys that lower safety or redirect credentials (:func:`needs_trust`) are honoured from a
project's config only when the user has trusted *that file's content*: the record maps the file's
resolved path to the SHA-256 of its bytes, so an edited file (by a ``git pull``, or by the agent's
own shell) is untrusted again until the user looks at it and trusts it again.

The record lives in the user's home, ``~/.soba/trusted-projects.json``, never in the project (a
project could otherwise ship its own trust). It holds paths and digests only, never a setting's
value or a secret; it is written atomically (temp file, fsync, rename) under a lock, so two
kernels trusting at once lose neither record. An unreadable record is a problem named in the one
line the user sees, and counts as "nothing trusted", never a crash. ``~/.soba/config.json`` is the
user's own file and is always trusted; so are explicit arguments.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .locking import lock_exclusive

__all__ = ["STORE_NAME", "TRUST_EXACT", "TRUST_PREFIXES", "ProjectTrust", "check_trust", "digest",
           "needs_trust", "record_trust", "revoke_trust", "store_path"]

#: Dotted keys (camelCase, as the file spells them) that start with one of these need trust: who asks
#: before a tool acts, the sandbox and what it lets through, where the file tools work, what they may do.
TRUST_PREFIXES = ("tools.approval", "tools.sandbox", "tools.workspace", "tools.allow")
#: Exact keys that need trust: which server receives the prompts and the key, and which key it gets.
#: A top-level ``mcpServers`` block (programs soba would start) would need it too.
TRUST_EXACT = frozenset({"model.baseUrl", "model.provider", "model.apiKeyEnv", "mcpServers"})

#: The trust record's file name in ``~/.soba/``.
STORE_NAME = "trusted-projects.json"

TrustState = Literal["trusted", "untrusted", "changed"]


def needs_trust(dotted: str) -> bool:
    """Whether a project's config may set ``dotted`` (``tools.approval``, ``model.baseUrl``, a
    top-level ``mcpServers``) only after the user trusts the file. A pure rule on the key's name."""
    return dotted in TRUST_EXACT or dotted.split(".")[0] in TRUST_EXACT or dotted.startswith(TRUST_PREFIXES)


def digest(data: bytes) -> str:
    """The SHA-256 of a config file's bytes, as the record keeps it."""
    return hashlib.sha256(data).hexdigest()


def store_path(home: str | os.PathLike[str]) -> Path:
    return Path(home) / ".soba" / STORE_NAME


@dataclass(frozen=True, slots=True)
class ProjectTrust:
    """Whether the user trusts one project config's content: ``trusted``, ``untrusted`` (never
    trusted, or trust revoked) or ``changed`` (trusted once, but its bytes differ now).
    ``problem`` names an unreadable trust record (then nothing counts as trusted)."""

    file: Path
    sha256: str
    state: TrustState
    problem: str | None = None

    @property
    def trusted(self) -> bool:
        return self.state == "trusted"


def _read(home: str | os.PathLike[str]) -> tuple[dict[str, str], str | None]:
    """The record: resolved path -> sha256; a missing file is empty, an unreadable one is empty
    and its problem is returned."""
    path = store_path(home)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}, None
    except (OSError, UnicodeDecodeError) as exc:
        return {}, f"{path}: cannot read the trust record ({exc}); no project config counts as trusted"
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        data = None
    projects = data.get("projects") if isinstance(data, dict) else None
    if not isinstance(projects, dict) or not all(
            isinstance(k, str) and isinstance(v, dict) and isinstance(v.get("sha256"), str)
            for k, v in projects.items()):
        return {}, (f"{path}: the trust record is not valid (expected "
                    f'{{"projects": {{PATH: {{"sha256": HEX}}}}}}); no project config counts as trusted '
                    f"until %soba trust rewrites it")
    return {k: v["sha256"] for k, v in projects.items()}, None


def check_trust(file: str | os.PathLike[str], data: bytes, home: str | os.PathLike[str]) -> ProjectTrust:
    """Whether the user trusts the project config ``file`` whose bytes are ``data`` (read once by
    the caller, so the content judged is the content used)."""
    resolved = Path(file).resolve()
    sha = digest(data)
    record, problem = _read(home)
    known = record.get(str(resolved))
    state: TrustState = "untrusted" if known is None else ("trusted" if known == sha else "changed")
    return ProjectTrust(resolved, sha, state, problem)


def _write(home: str | os.PathLike[str], record: Mapping[str, str]) -> None:
    """Replace the record atomically: a temp file in the same directory, fsynced, renamed over it."""
    path = store_path(home)
    body = json.dumps({"version": 1, "projects": {k: {"sha256": v} for k, v in sorted(record.items())}},
                      indent=2) + "\n"
    tmp = path.with_name(f".{STORE_NAME}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, body.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _update(home: str | os.PathLike[str], key: str, sha: str | None) -> bool:
    """Set (or with ``sha`` None, remove) one path's record under the record's lock; whether it
    changed. An unreadable record is kept beside it (``.corrupt``) before a fresh one is written."""
    path = store_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(path.with_name(STORE_NAME + ".lock"), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        lock_exclusive(lock)
        record, problem = _read(home)
        if problem is not None and path.exists():
            os.replace(path, path.with_name(STORE_NAME + ".corrupt"))
        before = record.get(key)
        if sha is None:
            record.pop(key, None)
        else:
            record[key] = sha
        if before != sha:
            _write(home, record)
        return before != sha
    finally:
        os.close(lock)  # releases the lock


def record_trust(trust: ProjectTrust, home: str | os.PathLike[str]) -> ProjectTrust:
    """Trust the project config ``trust.file`` with exactly the content ``trust.sha256`` was taken
    of (the content the user was shown, not whatever the file holds by now)."""
    _update(home, str(trust.file), trust.sha256)
    return ProjectTrust(trust.file, trust.sha256, "trusted")


def revoke_trust(file: str | os.PathLike[str], home: str | os.PathLike[str]) -> bool:
    """Forget the trust of the project config ``file``; whether there was one."""
    return _update(home, str(Path(file).resolve()), None)
