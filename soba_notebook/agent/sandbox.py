"""The ``bwrap`` sandbox of the ``shell`` tool (``tools.sandbox = "bwrap"``): the bubblewrap command line that
wraps one command, and the file-system facts it needs.

The command line is built by a pure function, :func:`bwrap_argv`, so everything the sandbox allows is written
in one place and unit-tested; :func:`sandboxed` does the I/O at the edge (finding ``bwrap``, resolving and
creating the ``.soba/`` directories that are bound read-only) and :mod:`.shell` runs the result like any
command, with the same deadline, cancel and kill.

What one sandboxed command gets, in mount order (a later mount covers an earlier one):

* ``/`` bound read-only; a fresh minimal ``/dev``; a ``/proc`` of its own PID namespace, so no other process
  (the kernel, with the API key in its environment) can be seen, read or traced;
* private, empty, writable ``/tmp`` and ``/run`` (tmpfs): the host's ``/tmp`` files and the sockets under
  ``/run`` (Docker, D-Bus, the user's agents) are out of sight, and ``TMPDIR`` points at the private ``/tmp``;
* the workspace bound read-write, then every soba state directory inside it (``<workspace>/.soba``, the
  project's and ``~/.soba`` when they lie inside) bound read-only on top, so a command cannot change the
  config that decides its own rights;
* no network (a network namespace with only its own loopback), no capabilities (root inside is a root that
  cannot mount, remount or load anything), a new session (no terminal injection), killed with its parent;
* an environment built from an allow list (:func:`sandbox_env`): ``PATH``, ``HOME``, the locale, the
  terminal and the user's names, plus the names ``tools.sandboxEnv`` adds; never a secret-named one.
  Everything else the kernel has (``GH_PAT``, ``DATABASE_URL``, a cloud profile) is simply not there,
  whatever its name, so no deny list has to guess every secret's name.

What it does not stop is in docs/SECURITY.md.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

from ..errors import ToolError
from ..providers.base import ToolSpec
from ..scrub import names_a_secret
from .confine import STATE_DIR_NAME

__all__ = ["BWRAP_PACKAGE", "SANDBOX_ENV", "bwrap_argv", "hidden_in_sandbox", "sandbox_env", "sandboxed", "state_dirs",
           "with_sandbox_note"]

#: The Debian package that installs ``/usr/bin/bwrap``.
BWRAP_PACKAGE = "bubblewrap"



#: The variables a sandboxed command gets from the kernel's environment (``LC_*``: every locale
#: category), before ``tools.sandboxEnv`` adds more; ``TMPDIR`` is always the sandbox's own ``/tmp``.
SANDBOX_ENV = ("PATH", "HOME", "LANG", "LANGUAGE", "LC_*", "TERM", "TZ", "USER", "LOGNAME", "SHELL", "COLUMNS",
               "LINES")


def hidden_in_sandbox(name: str) -> bool:
    """Whether the variable ``name`` is unset in the sandbox: the scrubber's secret names, whatever the
    value's length, and any name containing a secret word (``AWS_SECRET_ACCESS_KEY``, ``DB_PASSWORD_FILE``)."""
    return names_a_secret(name)


class _Tool(Protocol):
    """What :func:`with_sandbox_note` needs of a tool: a dataclass with a ``spec``."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def spec(self) -> ToolSpec: ...


_T = TypeVar("_T", bound=_Tool)

#: What the model is told instead of "Not sandboxed.", so it does not retry a pip install or a write to ~.
SANDBOXED_NOTE = ("Sandboxed: only the workspace and /tmp (private, emptied after each command) are writable, "
                  "the rest of the file system is read-only, there is no network (no pip install, git fetch, "
                  "curl), the environment holds only PATH, HOME, the locale and a few more (no secrets), files "
                  "Python would import in the kernel (a new X.py in the workspace) are kept only if the user "
                  "allows, and background processes end with the command.")


def with_sandbox_note(tools: Iterable[_T], sandbox: str) -> list[_T]:
    """``tools`` (frozen dataclasses with ``name`` and ``spec``) with, under ``"bwrap"``, the ``shell``
    tool's description telling the model what the sandbox allows instead of "Not sandboxed."."""
    out = list(tools)
    if sandbox != "bwrap":
        return out
    for i, tool in enumerate(out):
        spec = tool.spec
        if spec.name == "shell":
            text = spec.description.replace("Not sandboxed.", SANDBOXED_NOTE)
            text = text if SANDBOXED_NOTE in text else f"{text} {SANDBOXED_NOTE}"
            out[i] = replace(tool, spec=ToolSpec(spec.name, text, spec.parameters))
    return out


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def sandbox_env(env: Mapping[str, str], extra: Iterable[str] = (), secret_names: Iterable[str] = ()) -> dict[str, str]:
    """The environment a sandboxed command starts with (pure): the variables of ``env`` that
    :data:`SANDBOX_ENV` or ``extra`` (``tools.sandboxEnv``) name, except any that
    :func:`hidden_in_sandbox` or ``secret_names`` calls secret, and ``TMPDIR=/tmp``.

    It is the environment bwrap itself is started with (bwrap hands it on), not ``--setenv``
    arguments: a process's command line is readable by every user of the machine, its environment
    is not."""
    allowed = {*SANDBOX_ENV, *extra}
    secret = set(secret_names)
    out = {name: value for name, value in env.items()
           if (name in allowed or (name.startswith("LC_") and "LC_*" in allowed))
           and name not in secret and not hidden_in_sandbox(name)}
    out["TMPDIR"] = "/tmp"  # the host's temporary directory is read-only (or hidden) in here
    return out


def bwrap_argv(command: Sequence[str], *, workspace: Path, soba_dirs: Iterable[Path],
               bwrap: str = "bwrap") -> list[str]:
    """The argv that runs ``command`` under bubblewrap in ``workspace`` (pure: no file is looked at).

    ``workspace`` and ``soba_dirs`` are resolved absolute paths; the ``soba_dirs`` inside the workspace
    are bound read-only over it (those outside are read-only already). The environment is not on
    the command line: bwrap is started with :func:`sandbox_env`'s.
    """
    # A workspace of "/" (allowBroadWorkspace) is the one whose bind would cover /dev, /proc and /tmp:
    # it becomes the root bind itself, read-write, before them.
    broad = workspace == Path("/")
    argv = [bwrap, "--bind" if broad else "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--tmpfs", "/tmp", "--tmpfs", "/run"]
    if not broad:  # after the tmpfs mounts, so a workspace under /tmp is the real one, not an empty dir
        argv += ["--bind", str(workspace), str(workspace)]
    for state in sorted({d for d in soba_dirs if _inside(d, workspace)}):
        argv += ["--ro-bind", str(state), str(state)]
    argv += ["--chdir", str(workspace), "--unshare-net", "--unshare-pid", "--unshare-ipc", "--cap-drop", "ALL",
             "--new-session", "--die-with-parent"]
    return [*argv, "--", *command]


def state_dirs(workspace: Path, transcript: Path | None = None, home: Path | None = None) -> list[Path]:
    """The soba state directories a sandboxed command must not change: the workspace's ``.soba``, the
    user's ``~/.soba`` and the ``.soba`` that holds the session's ``transcript``, resolved."""
    found = [workspace / STATE_DIR_NAME, (home or Path.home()) / STATE_DIR_NAME]
    if transcript is not None:
        found += [p for p in transcript.parents if p.name == STATE_DIR_NAME][:1]
    return [p.resolve() for p in found]


def sandboxed(command: Sequence[str], workspace: Path, env: Mapping[str, str], *,
              transcript: Path | None = None) -> list[str]:
    """``command`` wrapped in bubblewrap, after the I/O it needs: ``bwrap`` found on PATH, and every state
    directory inside the workspace created (an absent ``.soba`` could otherwise be created, config and all,
    by the command). Raises :class:`ToolError`, never falls back to an unsandboxed command."""
    bwrap = shutil.which("bwrap", path=env.get("PATH", os.defpath))
    if bwrap is None:
        raise ToolError(f'tools.sandbox is "bwrap" but bwrap is not installed (not on PATH): apt-get install '
                        f'{BWRAP_PACKAGE}; the command did not run')
    root = workspace.resolve()
    dirs = [d for d in state_dirs(root, transcript) if _inside(d, root)]
    for d in dirs:
        try:
            d.mkdir(exist_ok=True)
        except FileExistsError:
            pass  # a file of that name: bound read-only all the same
        except OSError as exc:
            raise ToolError(f"cannot create {d} to bind it read-only in the sandbox: {exc.strerror or exc}; "
                            f"the command did not run") from None
    return bwrap_argv(command, workspace=root, soba_dirs=dirs, bwrap=bwrap)
