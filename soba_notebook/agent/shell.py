"""Running one shell command for the ``shell`` tool: the subprocess, its deadline, and how it ended.

This module owns the operating-system side of the tool, kept apart from the tool contract in
:mod:`.tools` because it is a different idea (processes, process groups, signals):

* The command runs as ``bash -c COMMAND`` in the workspace, in a new session (its own process
  group), with no stdin, a pager-free environment and the ``hidden_env`` variables removed. Not
  a login shell: it inherits the kernel's environment as it is, and never runs profile scripts
  (a ``pyenv rehash`` in a profile, killed by a timeout, left a lock that stalled every later
  command for a minute).
* stdout and stderr go, interleaved, to an anonymous temporary file rather than a pipe, so a
  background process that keeps the descriptor open can never make us wait, and any amount of
  output costs no memory. At most :data:`_SHELL_READ_CAP` bytes are read back.
* On timeout, on cancel, or when the awaiting task itself is cancelled, every process the command
  started is killed (``SIGKILL``): its process group and session, and every descendant that left
  them (``setsid``, a double fork, ``nohup … &``). Descendants are found without cgroups: each
  command runs with a unique ``SOBA_SHELL_RUN`` variable in its environment, which every child
  inherits, and ``/proc`` is scanned for it. The result says which processes were killed.
* The result always ends with a status line, ``[exit code N]`` (``128+N`` when killed by signal
  ``N``, as a shell reports it), ``[timed out after Ns]`` or ``[cancelled: …]``; the compaction
  extractor and the scripted model rely on that line.

With ``tools.sandbox = "none"`` (the default) a command runs with the user's rights; with ``"bwrap"``
the same ``bash -c`` runs inside bubblewrap (:mod:`.sandbox`), and everything above holds unchanged
(the kill reaches into the sandbox: its processes carry the tag too, and they die with it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..errors import ToolError
from .process_reaper import die_with_parent, kill_tree, track, untrack
from .sandbox import sandbox_env, sandboxed

if TYPE_CHECKING:
    from ..cancel import CancelToken

__all__ = ["ShellResult", "run_shell"]

#: Bytes of command output read back into memory at most; the middle of anything longer is dropped.
_SHELL_READ_CAP = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ShellResult:
    """How one command ended, shaped for a tool result.

    ``text`` is the output (with a final newline when there was any); ``footer`` is the status
    line that must survive truncation; ``data`` holds ``command`` plus ``exit_code`` (and
    ``signal``), ``timed_out`` or ``cancelled``.
    """

    text: str
    is_error: bool
    data: Mapping[str, Any] = field(default_factory=dict)
    footer: str = ""


_RUN_VARIABLE = "SOBA_SHELL_RUN"


def _killed_note(killed: dict[int, str]) -> str:
    shown = ", ".join(f"{comm} ({pid})" for pid, comm in sorted(killed.items())[:12])
    more = f" and {len(killed) - 12:,} more" if len(killed) > 12 else ""
    return f"[killed {len(killed):,} process{'es' if len(killed) != 1 else ''}: {shown}{more}]\n"


def _read_capture(file: IO[bytes]) -> str:
    size = os.fstat(file.fileno()).st_size
    file.seek(0)
    if size <= _SHELL_READ_CAP:
        data = file.read()
    else:
        half = _SHELL_READ_CAP // 2
        head = file.read(half)
        file.seek(size - half)
        data = head + f"\n[{size - 2 * half:,} bytes of output were not kept]\n".encode() + file.read()
    return data.decode("utf-8", errors="replace")


async def run_shell(command: str, cwd: Path, timeout: float, *, hidden_env: frozenset[str] = frozenset(),
                    cancel: CancelToken | None = None, sandbox: str = "none",
                    transcript: Path | None = None, sandbox_extra_env: tuple[str, ...] = ()) -> ShellResult:
    """Run ``command`` with ``bash -c`` in ``cwd`` (inside bubblewrap when ``sandbox`` is ``"bwrap"``;
    ``transcript`` names the session's file, whose ``.soba`` is kept read-only), killing its process
    group after ``timeout`` seconds or when ``cancel`` fires; a sandboxed command's environment is the
    allow list of :func:`~.sandbox.sandbox_env` plus ``sandbox_extra_env`` (``tools.sandboxEnv``). Raises
    :class:`~soba_notebook.errors.ToolError` only when bash (or bwrap) cannot be started."""
    argv = ["bash", "-c", command]
    env = {k: v for k, v in os.environ.items() if k not in hidden_env}
    if sandbox == "bwrap":
        argv = sandboxed(argv, cwd, env, transcript=transcript)
        env = sandbox_env(env, sandbox_extra_env, hidden_env)
    elif sandbox != "none":  # a typo in code that builds ToolsConfig by hand: never run unsandboxed
        raise ToolError(f'tools.sandbox = {sandbox!r} is not allowed: expected "none" or "bwrap"')
    run_id = secrets.token_hex(8)
    env[_RUN_VARIABLE] = run_id
    tag = f"{_RUN_VARIABLE}={run_id}".encode() + b"\0"
    killed: dict[int, str] | None = None
    env.update({"PAGER": "cat", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0"})
    env.setdefault("TERM", "dumb")
    # Output goes to an anonymous file, not a pipe: a background process that keeps the
    # descriptor open can never make us wait, and any amount of output costs no memory.
    kernel = os.getpid()
    with tempfile.TemporaryFile() as capture:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=capture,
                stderr=subprocess.STDOUT, env=env, start_new_session=True,
                preexec_fn=lambda: die_with_parent(kernel))  # ends with the kernel: .process_reaper
        except OSError as exc:
            raise ToolError(f"cannot start {Path(argv[0]).name} in {cwd}: {exc.strerror or exc}") from None
        track(proc.pid, tag[:-1])
        waiter = asyncio.ensure_future(proc.wait())
        watchers: set[asyncio.Future[Any]] = {waiter}
        cancel_watch = asyncio.ensure_future(cancel.wait()) if cancel is not None else None
        if cancel_watch is not None:
            watchers.add(cancel_watch)
        try:
            await asyncio.wait(watchers, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if waiter.done():
                status = "exited"
            elif cancel is not None and cancel.cancelled:
                status = "cancelled"
            else:
                status = "timed_out"
        finally:
            if cancel_watch is not None:
                cancel_watch.cancel()
            if not waiter.done():
                # timeout, cancel, or the agent's own task was cancelled: kill everything it started
                killed = kill_tree(proc.pid, tag)
                with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                    await asyncio.wait_for(asyncio.shield(waiter), 10)
            untrack(tag[:-1])
        output = _read_capture(capture).rstrip("\n")
    data: dict[str, Any] = {"command": command}
    prefix = output + "\n" if output else ""
    if killed is not None:
        data["killed"] = [{"pid": pid, "name": name} for pid, name in sorted(killed.items())]
        prefix += _killed_note(killed)
    if status == "exited":
        code = proc.returncode if proc.returncode is not None else -1
        if code < 0:  # killed by a signal: report it the way a shell does
            data["signal"] = -code
            code = 128 - code
        data["exit_code"] = code
        return ShellResult(prefix, is_error=code != 0, data=data, footer=f"[exit code {code}]")
    if status == "cancelled":
        data["cancelled"] = True
        return ShellResult(prefix, is_error=True, data=data, footer="[cancelled: the command was stopped]")
    data["timed_out"] = True
    return ShellResult(prefix, is_error=True, data=data, footer=f"[timed out after {timeout:g}s]")
