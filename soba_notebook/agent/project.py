"""Open an agent for a project directory: the files DESIGN.md puts under ``.soba/``.

``open_agent`` is the one place that decides where things live: sessions in
``.soba/sessions/``, flight records in ``.soba/flight.jsonl``, config from ``~/.soba`` and
``.soba/config.json``. With no provider configured the offline scripted model is used, and the
returned :class:`AgentHandle` says so.

An agent is its session's one writer: it holds the session's writer lease
(:mod:`..session.lease`) until :meth:`AgentHandle.close` (or the process ends). A session another
live process writes is refused with :class:`~soba_notebook.errors.SessionHeldError` naming that
process, unless ``take_over``; then the tool calls the displaced writer left without a result get a
recorded ``cancelled`` one, since its results can no longer be appended.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..compaction.kernel_section import KernelStateProvider
from ..config import SobaConfig, load_config
from ..errors import SessionError
from ..events import EventBus
from ..flight import FlightRecorder
from ..providers.base import Provider
from ..providers.factory import make_provider
from ..session.listing import list_sessions
from ..session.store import SessionStore
from ..statefiles import open_state_dir
from .loop import Agent
from .tools import ToolRegistry

__all__ = ["AgentHandle", "ProjectPaths", "open_agent", "project_paths"]


@dataclass(frozen=True, slots=True)
class ProjectPaths:
    """Where a project's files live: everything soba writes is under ``<root>/.soba/``."""

    root: Path
    soba: Path
    sessions: Path
    flight: Path
    capsules: Path
    memory: Path


def project_paths(project_dir: str | os.PathLike[str] | None = None) -> ProjectPaths:
    """The :class:`ProjectPaths` of ``project_dir`` (default: the working directory)."""
    root = Path(project_dir or os.getcwd()).resolve()
    soba = root / ".soba"
    return ProjectPaths(root, soba, soba / "sessions", soba / "flight.jsonl", soba / "capsules", soba / "memory")


@dataclass(frozen=True, slots=True)
class AgentHandle:
    """An opened agent, the project paths it writes to, and whether the offline demo model answers."""

    agent: Agent
    paths: ProjectPaths
    offline: bool  # the offline scripted model is answering

    @property
    def store(self) -> SessionStore:
        return self.agent.store

    def close(self) -> None:
        """Give up the session's writer lease (another kernel may then resume it)."""
        self.agent.store.release()


def open_agent(project_dir: str | os.PathLike[str] | None = None, *, config: SobaConfig | None = None,
               overrides: Mapping[str, Any] | None = None, session: str | os.PathLike[str] | None = None,
               new: bool = False, provider: Provider | None = None, bus: EventBus | None = None,
               user_namespace: dict[str, Any] | None = None, tools: ToolRegistry | None = None,
               take_over: bool = False, holder: Mapping[str, str | None] | None = None,
               kernel_state: KernelStateProvider | None = None) -> AgentHandle:
    """An agent on the newest session of the project (or ``session``, or a new one).

    The agent holds the session's writer lease: a session another live process writes raises
    :class:`~soba_notebook.errors.SessionHeldError` (naming it) unless ``take_over``. ``holder``
    adds to the lease record what identifies this writer (``kernel``, ``notebook``).
    ``provider`` replaces the one the config's ``model`` block describes; ``tools`` replaces the
    built-in tools (``default_tools(config.tools)`` and ``register`` your own on it).
    """
    paths = project_paths(project_dir)
    if os.path.lexists(paths.soba):  # a .soba that is a link is refused before anything is read or written
        os.close(open_state_dir(paths.soba))
    config = config or load_config(project_dir=paths.root, overrides=overrides)
    store: SessionStore | None = None
    if session is not None:
        candidate = Path(session)
        if not candidate.suffix:
            candidate = paths.sessions / f"{session}.jsonl"
        if not candidate.exists():
            raise SessionError(f"{candidate}: no such session (list them with %soba sessions)")
        store = SessionStore.open(candidate)
    elif not new:
        existing = list_sessions(paths.sessions)
        if existing:
            store = SessionStore.open(existing[0].path)
    if store is None:
        store = SessionStore.create(paths.sessions, cwd=str(paths.root))
    lease = store.claim(take_over=take_over, meta=dict(holder or {}))
    try:
        handle = _agent_on(store, paths, config, provider, bus, tools, _KernelSide(user_namespace, kernel_state))
        # The lease is ours: no result can be appended by the writer before us any more.
        if lease.previous is not None:
            handle.agent.close_open_calls(f"not finished: the session was taken over from "
                                          f"{lease.previous.describe()} while this call ran")
        elif lease.ended is not None:
            handle.agent.close_open_calls(f"not finished: the process that ran it ({lease.ended.describe()}) "
                                          f"ended first")
    except BaseException:
        store.release()
        raise
    return handle


@dataclass(frozen=True, slots=True)
class _KernelSide:
    """What only a kernel gives an agent: its namespace and the variables every capsule lists."""

    user_namespace: dict[str, Any] | None = None
    kernel_state: KernelStateProvider | None = None


def _agent_on(store: SessionStore, paths: ProjectPaths, config: SobaConfig, provider: Provider | None,
              bus: EventBus | None, tools: ToolRegistry | None, kernel: _KernelSide) -> AgentHandle:
    provider = provider or make_provider(config.model)
    summary_provider = None
    if config.model.compaction_model and config.model.provider != "scripted":
        summary_provider = make_provider(replace(config.model, model=config.model.compaction_model))
    workspace = Path(config.tools.workspace)
    if not workspace.is_absolute():
        workspace = paths.root / workspace
    agent = Agent(store, config, provider, workspace=workspace, bus=bus,
                  flight=FlightRecorder(paths.flight, store.id), user_namespace=kernel.user_namespace,
                  summary_provider=summary_provider, tools=tools, kernel_state=kernel.kernel_state,
                  project_root=paths.root)
    return AgentHandle(agent, paths, agent.provider.offline)
