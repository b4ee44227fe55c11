"""bench/bench_soak.py on a short run: every turn completes, no request the model receives is over
the hard limit, and what SOBA keeps per session stays bounded by the model input, not by the
number of turns (the long run and its timings are the bench's, never a test's). The session store
keeps few entries whole here, so that 30 turns are many times what it keeps."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from conftest import REPO

from soba_notebook.session import SessionStore

sys.path.insert(0, str(REPO / "bench"))

import bench_soak  # bench/ is not a package: imported from its folder

# the module's soak (its set-up) runs 30 turns: seconds
pytestmark = pytest.mark.slow

KEEP = 40  # entries the session store keeps whole by itself in these runs (30 turns write ~400)


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> Iterator[bench_soak.SoakResult]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SessionStore, "_keep", KEEP)
        yield bench_soak.soak(tmp_path_factory.mktemp("soak") / "project", 30, warmup=10)


def test_short_soak_sends_no_oversized_request_and_keeps_bounded_counts(result: bench_soak.SoakResult) -> None:
    assert result.not_completed == [] and result.failed_turns == 0
    assert result.requests >= 30 and result.oversized == 0, f"{result.oversized} requests over {result.hard_limit:,}"
    assert result.compactions >= 5, "the small window compacts every few turns"
    # bounded by the model input, however many turns ran: at most a few dozen entries, and the
    # running totals of the model input and of the budget tracker no longer than it (plus the capsule)
    assert result.largest_model_input <= 60
    assert result.counts_kept <= result.largest_model_input + 1
    assert result.tracker_counts <= result.largest_model_input + 3
    assert result.capsule_costs <= 8
    assert result.session_entries > 10 * result.largest_model_input, "the transcript keeps every entry"


def test_a_soak_keeps_only_the_model_input_and_the_newest_entries_whole(result: bench_soak.SoakResult) -> None:
    # the transcript is ten times what is kept whole: the store's newest and the model input's
    assert result.session_entries > 10 * KEEP
    assert result.entries_alive <= KEEP + result.largest_model_input
    # and no turn read an old entry back from the file: a turn's cost does not grow with the session
    assert result.read_back == 0
