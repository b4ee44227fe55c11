"""Every process a ``shell`` command starts ends with the kernel, however the kernel ends.

:mod:`.shell` kills a command's processes on timeout and cancel. This module owns the other end
of a command's life: the kernel itself going away while a command runs (a restart, a shutdown, a
``SIGKILL``); :mod:`.mcp_tools` registers each stdio MCP server's process tree the same way, by
its tag alone, so a server that outlives its closed stdin ends with the kernel too. Without it a
``sleep 300; touch marker`` started with ``sandbox: none`` kept running after the kernel was gone
(under bubblewrap ``--die-with-parent`` already ended it). Three layers:

* **The running-command registry.** :func:`track` records a command's process group and its
  environment tag (``SOBA_SHELL_RUN``, inherited by every descendant) until :func:`untrack`.
  :func:`kill_all` kills every tracked command with :func:`kill_tree`; it runs at interpreter exit
  (``atexit``: a kernel shutdown or restart that lets the process exit normally).
* **The reaper process** (this file run as a script, stdlib only): started with the first tracked
  command, in a session of its own, reading ``+ tag [pgid]`` / ``- tag`` lines from a pipe whose
  write end only the kernel holds (close-on-exec, so no command inherits it). When the kernel
  ends *in any way*, ``SIGKILL`` included, the pipe reaches end-of-file and the reaper kills
  every command still registered, then exits. A pipe's end is per process, not per thread, so
  this holds whichever thread started the command. (A child the ``python`` tool's user code
  ``fork``-s without exec holds the write end too: the reaper then acts once that child ends.)
* **``PR_SET_PDEATHSIG``** (:func:`die_with_parent`, run in the forked child before ``exec``):
  the command's ``bash`` gets ``SIGKILL`` the moment the thread that forked it ends. That thread
  is the agent runtime's event-loop thread, which lives as long as the runtime (a runtime is
  closed only after its turn's commands were killed), so it never fires early. It only reaches
  ``bash`` (the signal is not inherited by a fork, and is cleared by a set-user-id ``exec``); the
  reaper covers the descendants.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from typing import IO

__all__ = ["die_with_parent", "kill_all", "kill_tree", "members", "track", "untrack"]


def members(pgid: int | None, tag: bytes) -> dict[int, str]:
    """pid -> command name of every process in group/session ``pgid`` (None: none) or carrying
    ``tag`` in its environment."""
    found: dict[int, str] = {}
    me = os.getpid()
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return found
    for pid in pids:
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                stat = fh.read()
            comm = stat[stat.find(b"(") + 1:stat.rfind(b")")].decode(errors="replace")
            fields = stat[stat.rfind(b")") + 2:].split()
            state, pgrp, session = fields[0], int(fields[2]), int(fields[3])
            if state in (b"Z", b"X"):
                continue
            mine = pgid is not None and (pgrp == pgid or session == pgid)
            if not mine:
                with open(f"/proc/{pid}/environ", "rb") as fh:
                    mine = tag in fh.read()
        except (OSError, ValueError, IndexError):
            continue
        if mine:
            found[pid] = comm
    return found


def kill_tree(pgid: int | None, tag: bytes) -> dict[int, str]:
    """SIGKILL the command's group, session (``pgid``; None once its leader ended: the number may
    be another's by then) and tagged descendants until none is left; who was killed."""
    killed = members(pgid, tag)
    if pgid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    alive = dict(killed)
    for _ in range(50):  # a process may fork while we kill: look again until the scan comes back empty
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed.update(alive)
        alive = members(pgid, tag)
        if not alive:
            break
        time.sleep(0.005)  # let the killed ones die before looking again
    return killed


_PR_SET_PDEATHSIG = 1
_prctl = None
if sys.platform.startswith("linux"):
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        _prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up now: the forked child only calls it


def die_with_parent(parent: int) -> None:
    """In a forked child before ``exec``: ``SIGKILL`` when the forking thread ends, and at once
    when ``parent`` is already gone (it died between the fork and here). Linux only; a no-op elsewhere."""
    if _prctl is None:
        return
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)


_lock = threading.Lock()
_running: dict[bytes, int | None] = {}  # tag -> process group (None: only tagged processes are left)
_reaper: subprocess.Popen[bytes] | None = None


def _tell(line: str) -> None:
    """Send one registry line to the reaper process, starting it first if needed (best effort:
    without it the registry and the parent-death signal still hold)."""
    global _reaper
    if _reaper is None or _reaper.poll() is not None:
        try:
            _reaper = subprocess.Popen([sys.executable, "-I", os.path.abspath(__file__)], stdin=subprocess.PIPE,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                       start_new_session=True, close_fds=True)
        except OSError:
            _reaper = None
            return
        for tag, pgid in _running.items():
            _write(_reaper.stdin, f"+ {tag.decode()} {pgid or ''}\n")
    _write(_reaper.stdin, line)


def _write(pipe: IO[bytes] | None, line: str) -> None:
    if pipe is not None:
        with contextlib.suppress(OSError, ValueError):
            pipe.write(line.encode())
            pipe.flush()


def track(pgid: int | None, tag: bytes) -> None:
    """Register a running command (its process group, or None when only its tag is known, and its
    ``NAME=value`` environment tag, without the NUL) so it dies with the kernel."""
    with _lock:
        _running[tag] = pgid
        _tell(f"+ {tag.decode()} {pgid or ''}\n")


def untrack(tag: bytes) -> None:
    """The command's ``bash`` ended (or was killed). Forgotten, unless something it started still
    runs (``nohup server &``): that stays registered by its tag alone, to die with the kernel."""
    left = members(None, tag + b"\0")
    with _lock:
        if left:
            _running[tag] = None
            _tell(f"+ {tag.decode()}\n")
        elif tag in _running:
            del _running[tag]
            _tell(f"- {tag.decode()}\n")


def kill_all() -> dict[int, str]:
    """Kill every tracked command's processes now (interpreter exit); who was killed."""
    with _lock:
        running = dict(_running)
        _running.clear()
    killed: dict[int, str] = {}
    for tag, pgid in running.items():
        killed.update(kill_tree(pgid, tag + b"\0"))
    return killed


atexit.register(kill_all)


def _serve(stream: IO[bytes]) -> None:
    """The reaper process: follow the registry until the kernel's end of the pipe closes, then kill."""
    running: dict[bytes, int | None] = {}
    for raw in stream:
        parts = raw.decode(errors="replace").split()
        with contextlib.suppress(ValueError, IndexError):
            if parts[0] == "+":
                running[parts[1].encode()] = int(parts[2]) if len(parts) > 2 else None
            elif parts[0] == "-":
                running.pop(parts[1].encode(), None)
    for tag, pgid in running.items():
        kill_tree(pgid, tag + b"\0")


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the kernel is not for us
    _serve(sys.stdin.buffer)
