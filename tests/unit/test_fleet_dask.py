"""Fleets on a real distributed engine: ``dask.distributed``'s ``LocalCluster`` with two worker
processes, driven through ``Client.get_executor()`` like any ``concurrent.futures`` executor.

The rows are the serial run's, a worker killed in the middle of a fleet costs no row (the engine
runs its task again; a broken transcript is still one ``error`` row per config), a worker's memory
stays flat over a fleet of 1,000 sessions, and the progress bar counts the sessions. Real pi and
SWE-bench transcripts from tests/data/transcripts; the 1,000 are ten of them, hard-linked a hundred times
each (by reference: one copy on disk per transcript). No assertion reads a clock.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import gc
import logging
import os
import shutil
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from ci_support import unavailable
from conftest import TRANSCRIPTS, repo_python_env

from soba_notebook import views
from soba_notebook.importers import import_transcripts
from soba_notebook.session import SessionStore

# a LocalCluster of worker processes and a 1,000-session fleet: tens of seconds
pytestmark = pytest.mark.slow

try:
    import dask
    from distributed import Client, LocalCluster
except ImportError:  # pragma: no cover - the test extra installs it
    dask = Client = LocalCluster = None

CONFIGS = {"48k": {"contextWindow": 48000}, "32k keep 4k": {"contextWindow": 32000, "maxOutputTokens": 4000,
                                                            "keepRecentTokens": 4000}}
PI = "pi-mono/large-session.jsonl"
SWE = ("mini-swe-agent-deepseek/deepseek_chat_dev/pvlib__pvlib-python-1707/pvlib__pvlib-python-1707.traj.json",
       "mini-swe-agent-deepseek/deepseek_reasoner_dev/pylint-dev__astroid-1196/pylint-dev__astroid-1196.traj.json")


def _serial(sessions: list[str], configs: dict[str, Any] = CONFIGS) -> pd.DataFrame:
    with concurrent.futures.ThreadPoolExecutor(1) as one:
        return views.simulate_many(sessions, configs, one, progress=False)


def _retained_memory() -> int:
    """What this process holds once garbage is collected and freed pages are handed back: its
    resident set, in bytes, after ``gc.collect()`` and glibc's ``malloc_trim`` (the peak would
    count transient pages and the allocator's fragmentation, not what stays)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: the resident set as it is
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@contextlib.contextmanager
def _cluster() -> Iterator[Any]:
    """A ``LocalCluster`` of two single-threaded worker processes importing this checkout, and its
    client."""
    if Client is None:
        unavailable("needs dask[distributed] (in the test extra: pip install -e '.[test]')")
    # Dask's statistical profiler keeps a profile of the worker's stacks per second of run time (up to
    # an hour of them): memory that grows with the clock, not with the sessions; off for this cluster.
    # Its 30 s connect timeouts are too short for workers importing pandas on a loaded 2-core machine.
    settings = {"distributed.worker.profile.enabled": False, "distributed.comm.timeouts.connect": "300s",
                "distributed.comm.timeouts.tcp": "300s"}
    with pytest.MonkeyPatch.context() as mp, dask.config.set(settings):
        for key, value in repo_python_env().items():  # the workers import this checkout's package
            mp.setenv(key, value)
        with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None,
                          silence_logs=logging.ERROR) as cluster, Client(cluster) as dask_client:
            yield dask_client


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    with _cluster() as dask_client:
        yield dask_client


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """pi's session, two SWE-bench runs and a file in no transcript format, in one folder."""
    folder = tmp_path_factory.mktemp("dask-fleet")
    for name in (PI, *SWE):
        shutil.copy(TRANSCRIPTS / name, folder / Path(name).name)
    (folder / "broken.jsonl").write_text('{"hello": "no known transcript format"}\n')
    return sorted(str(p) for p in folder.iterdir())


def test_simulate_many_on_a_dask_cluster_gives_the_serial_rows_behind_a_progress_bar(
        client: Any, fleet: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    frame = views.simulate_many(fleet, CONFIGS, client.get_executor())
    bar = capsys.readouterr().err
    assert "simulate" in bar and f"{len(fleet)}/{len(fleet)}" in bar, "the bar counted every session"
    pd.testing.assert_frame_equal(frame, _serial(fleet))
    assert frame["error"].notna().sum() == len(CONFIGS) and int(frame["compactions"].sum()) > 10


def test_import_transcripts_on_a_dask_cluster_writes_what_a_serial_import_writes(
        client: Any, fleet: list[str], tmp_path: Path) -> None:
    folder = Path(fleet[0]).parent
    on_dask = import_transcripts(folder, tmp_path / "dask", client.get_executor(), progress=False)
    with concurrent.futures.ThreadPoolExecutor(1) as one:
        serial = import_transcripts(folder, tmp_path / "serial", one, progress=False)
    assert list(on_dask.errors) == list(serial.errors) == [folder / "broken.jsonl"]
    assert [r.source for r in on_dask.reports] == [r.source for r in serial.reports] and len(serial.reports) == 3
    for ours, theirs in zip(on_dask.sessions, serial.sessions, strict=True):
        written = [[(e.id, e.parent_id, e.type, dict(e.data)) for e in SessionStore.open(s).entries()]
                   for s in (ours, theirs)]
        assert written[0] == written[1], "the same entries, ids included"


def test_a_worker_killed_in_the_middle_of_a_fleet_loses_no_row(client: Any, fleet: list[str], tmp_path: Path) -> None:
    """SIGKILL to a worker while it replays; the scheduler gives its task to a worker that lives."""
    pi = next(s for s in fleet if s.endswith(Path(PI).name))
    sessions = [str(_link(Path(pi), tmp_path / f"pi{i}.jsonl")) for i in range(6)]
    sessions.append(next(s for s in fleet if s.endswith("broken.jsonl")))
    out: dict[str, pd.DataFrame] = {}
    runner = threading.Thread(target=lambda: out.update(frame=views.simulate_many(
        sessions, CONFIGS, client.get_executor(), progress=False)))
    pids: dict[str, int] = client.run(os.getpid)
    runner.start()
    killed = None
    while killed is None and runner.is_alive():
        busy = [worker for worker, keys in client.processing().items() if keys and worker in pids]
        if busy:
            killed = pids[busy[0]]
            os.kill(killed, signal.SIGKILL)
    runner.join()
    assert killed is not None, "a worker was killed while it held a task"
    assert killed not in client.run(os.getpid).values()
    frame = out["frame"]
    expected = _serial([pi, sessions[-1]])
    assert frame["session"].tolist() == [s for s in sessions for _ in CONFIGS]
    figures = list(views.COMPARE_COLUMNS)
    for session in sessions[:-1]:
        rows = frame[frame["session"] == session].reset_index(drop=True)
        assert rows["error"].isna().all()
        pd.testing.assert_frame_equal(rows[figures], expected[expected["session"] == pi][figures]
                                      .reset_index(drop=True))
    broken = frame[frame["session"] == sessions[-1]]
    assert len(broken) == len(CONFIGS) and broken["error"].str.contains("format").all()


def _link(source: Path, target: Path) -> Path:
    os.link(source, target)
    return target


def test_a_worker_s_memory_stays_flat_over_a_fleet_of_1000_sessions(tmp_path: Path) -> None:
    """What each worker retains after 1,000 sessions against after the first 100: under 16 MiB more.

    Ten real SWE-bench runs, each copied once and hard-linked 100 times: 1,000 paths, so each is a
    session of its own to every cache (imports, token counters), while the disk holds ten files.
    Each session's entries take 20 to 80 KB in memory: keeping every session alive by mistake
    retained 33 MiB more per worker over the last 900 (checked by doing so), none kept 6 MiB.
    """
    picked = sorted(TRANSCRIPTS.rglob("*.traj"))[:10]
    copies = [Path(shutil.copy(p, tmp_path / f"{i}-{p.name}")) for i, p in enumerate(picked)]
    (tmp_path / "fleet").mkdir()
    sessions = [str(_link(copies[n % 10], tmp_path / "fleet" / f"{n:04d}-{copies[n % 10].name}"))
                for n in range(1000)]
    config = {"48k": {"contextWindow": 48000}}
    # A cluster of its own, so what the workers hold is this test's alone. Not the shared cluster
    # restarted: after the kill test, one nanny closed instead of restarting its worker on a
    # loaded machine and `client.restart` waited 600 s for it (fast suite, 2026-12-02).
    with _cluster() as client:
        executor = client.get_executor()
        first = views.simulate_many(sessions[:100], config, executor, progress=False)
        after_100: dict[str, int] = client.run(_retained_memory)
        frame = views.simulate_many(sessions, config, executor, progress=False)
        after_1000: dict[str, int] = client.run(_retained_memory)
    assert len(frame) == 1000 and frame["error"].isna().all() and int(frame["inferences"].sum()) > 1000
    pd.testing.assert_frame_equal(frame.head(100), first)
    for worker, held in after_1000.items():
        mib = f"{after_100[worker] / 2**20:,.1f} MiB after 100 sessions, {held / 2**20:,.1f} MiB after 1,000"
        assert held - after_100[worker] <= 16 * 2**20, f"worker {worker} kept what it no longer needs: {mib}"
