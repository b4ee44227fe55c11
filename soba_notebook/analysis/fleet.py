"""Fleet analysis: many sessions x many compaction configs, one DataFrame.

:func:`simulate_many` replays every session under every config (the same replay as
:func:`~.simulation.simulate`: the real preflight barrier, deterministic capsules) and returns one
:func:`~.simulation.compare` row per (session, config). Sessions are spread over any
:class:`concurrent.futures.Executor` (a process pool by default, so a fleet of hundreds of
trajectories uses every core; a Dask or Ray executor runs the same call on a cluster), one job per
session so its import, snapshot and token counts are shared by all its configs.
"""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from ..config import SobaConfig
from ..importers.fleet import run_all, transcript_files
from ..session.store import SessionStore
from ..tokens import encoding_for_model
from ._common import SessionLike, snapshot
from .simulation import COMPARE_COLUMNS, replay_snapshot, simulation_config, summary_row

__all__ = ["FLEET_COLUMNS", "simulate_many"]

#: Columns of :func:`simulate_many`: the session and config, :data:`COMPARE_COLUMNS`, and the error.
FLEET_COLUMNS = ("session", "config", *COMPARE_COLUMNS, "error")
_BOOL_COLUMNS = ("any_oversized", "pairs_intact")


def _simulate_session(session: str, configs: Mapping[str, SobaConfig], base_tokens: int) -> list[dict[str, Any]]:
    """All configs of one session (runs in a worker): one row each, or the error in each row."""
    try:
        snap = snapshot(session)
        rows: list[dict[str, Any]] = []
        for name, cfg in configs.items():
            summary = summary_row(replay_snapshot(snap, cfg, base_tokens), cfg)
            rows.append({"session": session, "config": name, **summary, "error": None})
        return rows
    except Exception as exc:  # one broken transcript must not sink a fleet of hundreds
        return [{"session": session, "config": name, "error": f"{type(exc).__name__}: {exc}"} for name in configs]


def _session_list(sessions: SessionLike | Iterable[SessionLike]) -> list[str]:
    if isinstance(sessions, str | os.PathLike):
        if os.path.isdir(sessions):
            return [str(p) for p in transcript_files(sessions)]
        return [os.fspath(sessions)]
    if isinstance(sessions, SessionStore):
        return [str(sessions.file)]
    return [str(s.file) if isinstance(s, SessionStore) else os.fspath(s) for s in sessions]


def _resolve(configs: Mapping[str, Mapping[str, Any]] | Sequence[Mapping[str, Any]],
             base: SobaConfig | None) -> dict[str, SobaConfig]:
    named = configs.items() if isinstance(configs, Mapping) else ((str(i), c) for i, c in enumerate(configs))
    resolved = {}
    for name, settings in named:
        if not isinstance(settings, Mapping):
            raise TypeError(f"simulate_many: settings of {name!r} must be a mapping of config keys, "
                            f"got {type(settings).__name__}")
        resolved[str(name)] = simulation_config(settings, base)
    if not resolved:
        raise ValueError("simulate_many needs at least one config, e.g. {'65k': {'contextWindow': 65000}}")
    return resolved


def simulate_many(sessions: SessionLike | Iterable[SessionLike],
                  configs: Mapping[str, Mapping[str, Any]] | Sequence[Mapping[str, Any]],
                  executor: concurrent.futures.Executor | None = None, *, base_tokens: int = 0,
                  config: SobaConfig | None = None, progress: bool = True) -> pd.DataFrame:
    """Replay every session under every config; one row per (session, config).

    ``sessions`` is a folder (every transcript file under it: SOBA sessions and transcripts of
    other agents alike), one path, or an iterable of paths / :class:`SessionStore`. ``configs``
    maps a name to settings as :func:`~.simulation.compare` takes them (a list is named
    ``"0"``, ``"1"``…); all are validated before anything runs.

    ``executor``: any :class:`concurrent.futures.Executor`; by default a process pool with one
    worker per CPU, shut down afterwards (an executor you pass is left running). Workers open the
    sessions by path, so they must see the same files. A progress bar counts
    sessions (``progress=False`` hides it).

    Columns: ``session`` (string, the path), ``config`` (string), then :func:`compare`'s columns
    (``Int64``; ``any_oversized`` and ``pairs_intact`` as nullable ``boolean``), then ``error``
    (string: why the session could not be replayed, its other columns then NA; NA when it was).
    Rows follow the order of ``sessions``, then of ``configs``.
    """
    resolved = _resolve(configs, config)
    paths = _session_list(sessions)
    if executor is None or isinstance(executor, concurrent.futures.ProcessPoolExecutor):
        # Load the common encoding once here: forked workers inherit it instead of each spending
        # about half a second building it again (it is cached for the life of this process).
        encoding_for_model(None)
    jobs = [(path, resolved, base_tokens) for path in paths]
    results = run_all(_simulate_session, jobs, executor, desc="simulate", unit="session", progress=progress)
    rows = [row for result in results for row in result]
    frame = pd.DataFrame.from_records(rows, columns=list(FLEET_COLUMNS)) if rows else \
        pd.DataFrame(columns=list(FLEET_COLUMNS))
    out: dict[str, pd.Series] = {"session": frame["session"].astype("string"),
                                 "config": frame["config"].astype("string")}
    for col in COMPARE_COLUMNS:
        if col in _BOOL_COLUMNS:
            out[col] = frame[col].astype("boolean")
        else:
            out[col] = pd.array(frame[col].tolist(), dtype="Int64")  # type: ignore[assignment]  # array is a column too
    out["error"] = frame["error"].astype("string")
    return pd.DataFrame(out, columns=list(FLEET_COLUMNS))
