"""A replay is a pure function of its session and config: the same fleet, in any order, on any
executor, gives the same figures.

Runs real pi and SWE-bench transcripts (the ones that compact under these windows) serially, on a
thread pool and on a process pool whose workers are *spawned* with a hash seed of their own (as a
Dask worker is), in orders hypothesis picks, and requires every row to equal a first serial run.
Before replays were pure, a capsule's random checkpoint id, the random entry ids an import gave
a transcript without ids (different in every process) and the environment's secrets all reached
the rendered capsule, so its token count, and every figure after it, moved by a few tokens.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import re
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from conftest import TRANSCRIPTS, repo_python_env
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from soba_notebook import views
from soba_notebook.session import SessionStore

# fleets in process pools: seconds
pytestmark = pytest.mark.slow

CONFIGS = {"48k": {"contextWindow": 48000}, "65k keep 8k": {"contextWindow": 65000, "keepRecentTokens": 8000},
           "32k keep 4k": {"contextWindow": 32000, "maxOutputTokens": 4000, "keepRecentTokens": 4000}}

#: transcripts that compact under CONFIGS (pi has ids of its own; the SWE-bench ones get them on import)
PICKED = ("pi-mono/large-session.jsonl",
          "mini-swe-agent-deepseek/deepseek_chat_dev/pylint-dev__astroid-1333/pylint-dev__astroid-1333.traj.json",
          "mini-swe-agent-deepseek/deepseek_chat_dev/sqlfluff__sqlfluff-1517/sqlfluff__sqlfluff-1517.traj.json",
          "mini-swe-agent-deepseek/deepseek_chat_dev/pvlib__pvlib-python-1707/pvlib__pvlib-python-1707.traj.json",
          "swe-agent/tests/test_data/trajectories/gpt4__swe-bench-dev-easy_first_only__default__t-0.00__p-0.95__"
          "c-3.00__install-1/pydicom__pydicom-1458.traj")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The picked transcripts and one broken file (its rows carry the error)."""
    broken = tmp_path_factory.mktemp("fleet") / "broken.jsonl"
    broken.write_text('{"hello": "no known transcript format"}\n')
    return [*(str(TRANSCRIPTS / p) for p in PICKED), str(broken)]


@pytest.fixture(scope="module")
def reference(fleet: list[str]) -> pd.DataFrame:
    with concurrent.futures.ThreadPoolExecutor(1) as serial:
        return views.simulate_many(fleet, CONFIGS, serial, progress=False)


@pytest.fixture(scope="module")
def spawned_pool() -> Iterator[concurrent.futures.ProcessPoolExecutor]:
    """Two spawned workers (nothing inherited from this process: no caches, no imported ids) with
    a fixed hash seed, so theirs differs from this process's random one."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in repo_python_env(PYTHONHASHSEED="4242").items():
            mp.setenv(key, value)
        with concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
            yield pool


def _by_session(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(["session", "config"], kind="stable").reset_index(drop=True)


# no shrinking: a failing fleet is already small, and each example replays it whole
@settings(max_examples=8, deadline=None, phases=(Phase.explicit, Phase.reuse, Phase.generate),
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(order=st.permutations(range(len(PICKED) + 1)), executor=st.sampled_from(["serial", "threads", "processes"]))
def test_a_fleet_gives_the_same_rows_in_any_order_on_any_executor(
        fleet: list[str], reference: pd.DataFrame, spawned_pool: concurrent.futures.ProcessPoolExecutor,
        order: list[int], executor: str) -> None:
    sessions = [fleet[i] for i in order]
    if executor == "processes":
        frame = views.simulate_many(sessions, CONFIGS, spawned_pool, progress=False)
    else:
        with concurrent.futures.ThreadPoolExecutor(1 if executor == "serial" else 2) as pool:
            frame = views.simulate_many(sessions, CONFIGS, pool, progress=False)
    assert frame["session"].tolist() == [s for s in sessions for _ in CONFIGS], "rows follow the given order"
    assert reference["error"].notna().sum() == len(CONFIGS), "only the broken file's rows are errors"
    assert int(reference["compactions"].sum()) > 20, "the fleet compacts, so capsules are measured"
    pd.testing.assert_frame_equal(_by_session(frame), _by_session(reference))


def test_a_replayed_capsule_is_the_same_in_every_process(fleet: list[str],
                                                         spawned_pool: concurrent.futures.ProcessPoolExecutor) -> None:
    """Not just the figures: the capsules themselves (their text, ids and checkpoint ids) agree."""
    session = fleet[1]  # a SWE-bench transcript without ids of its own
    here = views.simulate(session, 32000, 4000, keepRecentTokens=4000)
    there = spawned_pool.submit(_capsules, session).result()
    assert here.capsules and [c.to_json() for c in here.capsules] == [c for c, _ in there]
    assert [c.checkpoint_id for c in here.capsules] == [k for _, k in there]


def _capsules(session: str) -> list[tuple[dict[str, object], str | None]]:
    view = views.simulate(session, 32000, 4000, keepRecentTokens=4000)
    return [(c.to_json(), c.checkpoint_id) for c in view.capsules]


def test_the_environment_s_secrets_do_not_change_a_replay(fleet: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker whose environment holds a secret that occurs in the transcript replays it as one without."""
    session = fleet[0]
    plain = views.simulate(session, 32000, 4000, keepRecentTokens=4000)
    # a word of the first capsule's text, as a secret's value (the scrubber takes 8 characters and up)
    word = next(w for w in re.findall(r"[A-Za-z]{12,}", str(plain.capsules[0].to_json())))
    monkeypatch.setenv("FLEET_TEST_API_KEY", word)
    secret = views.simulate(session, 32000, 4000, keepRecentTokens=4000)
    assert [c.to_json() for c in secret.capsules] == [c.to_json() for c in plain.capsules]
    pd.testing.assert_series_equal(secret.summary(), plain.summary())


def test_a_transcript_without_ids_imports_to_the_same_ids_every_time(fleet: list[str], tmp_path: Path) -> None:
    """Each worker of a fleet imports for itself; the ids it gives must not depend on which one did."""
    from soba_notebook.importers import import_transcript

    def ids(source: str, into: str) -> list[str | None]:
        return [e.id for e in SessionStore.open(import_transcript(source, tmp_path / into)).entries()]

    first, again, other = ids(fleet[1], "a"), ids(fleet[1], "b"), ids(fleet[2], "c")
    assert first == again and len(set(first)) == len(first) and all(first)
    assert not set(first) & set(other), "another file's ids are its own"
