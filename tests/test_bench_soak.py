"""bench/bench_soak.py on a short run: every turn completes, no request the model receives is over
the hard limit, and what SOBA keeps per session stays bounded by the model input, not by the
number of turns (the long run and its timings are the bench's, never a test's)."""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))

import bench_soak  # bench/ is not a package: imported from its folder


def test_short_soak_sends_no_oversized_request_and_keeps_bounded_counts(tmp_path: Path) -> None:
    result = bench_soak.soak(tmp_path / "project", 30, warmup=10)
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
