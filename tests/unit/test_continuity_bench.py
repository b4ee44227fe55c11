"""bench/continuity.py: a capsule is measured against the whole history it replaced, and the measure
counts what a hand count of a small history says; invention by a summarizer shows up as dropped
claims, and pi's rule lists only the paths of pi's write/edit calls."""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import REPO, TRANSCRIPTS

from soba_notebook.compaction.capsule import Capsule, Verification
from soba_notebook.session import ToolCall, assistant_message, tool_result, user_message

sys.path.insert(0, str(REPO / "bench"))

import continuity  # bench/ is not a package: imported from its folder

HISTORY = [
    user_message("Fix the tokenizer crash in src/lexer.py"),
    assistant_message("Reading it.", [ToolCall("c1", "write_file", {"path": "src/lexer.py", "content": "x"})]),
    tool_result("c1", "write_file", "wrote src/lexer.py"),
    assistant_message("", [ToolCall("c2", "edit_file", {"path": "src/parser.py", "old": "a", "new": "b"})]),
    tool_result("c2", "edit_file", "edited"),
    assistant_message("", [ToolCall("c3", "edit_file", {"path": "src/broken.py", "old": "a", "new": "b"})]),
    tool_result("c3", "edit_file", "no such text", is_error=True),  # a failed edit modifies nothing
    user_message("never edit the tests folder"),
    assistant_message("", [ToolCall("c4", "shell", {"command": "pytest -q"})]),
    tool_result("c4", "shell", "1 failed, 3 passed", exit_code=1),
    user_message("also keep the public API unchanged"),
]


def test_recall_of_a_small_history_matches_the_hand_count() -> None:
    # by hand: files modified {src/lexer.py, src/parser.py}; checks {pytest -q: failed}, one open
    # error; constraints: the two later user messages; latest request: the last one
    capsule = Capsule(files_modified=("src/lexer.py",), verification=(Verification("pytest -q", "passed"),),
                      constraints=("User: never edit the tests folder",),
                      latest_request="also keep the public API unchanged")
    score = continuity.score_capsule(capsule, HISTORY)
    assert (score.files_modified.found, score.files_modified.expected) == (1, 2)
    assert (score.checks.found, score.checks.expected) == (0, 1)  # listed, but with the wrong status
    assert (score.open_errors.found, score.open_errors.expected) == (0, 1)
    assert (score.constraints.found, score.constraints.expected) == (1, 2)
    assert score.latest_request is True
    assert score.held == {"verification": 1}


def test_the_latest_request_is_carried_by_the_capsule_or_by_the_tail_that_shows_a_newer_one() -> None:
    prefix, tail = HISTORY[:-1], HISTORY[-1:]  # the last user message is kept verbatim in the tail
    assert continuity.score_capsule(Capsule(), prefix, tail=tail).latest_request is True
    assert continuity.score_capsule(Capsule(), prefix).latest_request is False  # the prefix's request is lost
    quoted = Capsule(latest_request="never edit the tests folder")
    assert continuity.score_capsule(quoted, prefix).latest_request is True
    assert continuity.score_capsule(Capsule(), prefix, tail=HISTORY[-2:-1]).latest_request is False  # no user there


def test_a_held_constraint_no_user_message_supports_is_counted_by_field() -> None:
    capsule = Capsule(constraints=("User: never edit the tests folder", continuity.INVENTED_CONSTRAINT),
                      files_modified=("src/lexer.py", continuity.INVENTED_FILE))
    assert continuity.held_unsupported(capsule, HISTORY) == {"constraints": 1, "filesModified": 1}


def test_pis_rule_lists_the_paths_of_its_write_and_edit_calls_only() -> None:
    pi_history = [assistant_message("", [ToolCall("p1", "write", {"path": "a.ts", "content": ""}),
                                         ToolCall("p2", "read", {"path": "b.ts"}),
                                         ToolCall("p3", "bash", {"command": "sed -i s/x/y/ c.ts"}),
                                         ToolCall("p4", "edit", {"path": "d.ts", "oldText": "", "newText": ""})])]
    assert continuity.pi_modified_files(pi_history) == ("a.ts", "d.ts")
    assert continuity.pi_modified_files(HISTORY) == ()  # SOBA's tool names are not pi's


def test_three_compactions_in_a_row_each_scored_and_the_inventive_control_is_dropped() -> None:
    small = TRANSCRIPTS / "mini-swe-agent-deepseek" / "deepseek_chat_dev" / "pvlib__pvlib-python-1072" / \
        "pvlib__pvlib-python-1072.traj.json"
    offline = continuity.run_one(small, (16000, 2000, 3000), None, "offline")
    assert len(offline.capsules) >= 3
    assert all(c.files_modified.share in (None, 1.0) and c.latest_request for c in offline.capsules)
    assert all(not c.dropped for c in offline.capsules)
    assert offline.thrown_away == 0  # no model: nothing generated, nothing thrown away
    control = continuity.run_one(small, (16000, 2000, 3000), continuity.InventiveSummarizer(), "inventive")
    assert len(control.capsules) >= 3
    for c in control.capsules:  # each capsule's three inventions were dropped, none is held
        assert c.dropped.get("constraints", 0) >= 1 and c.dropped.get("filesModified") == 1
        assert "constraints" not in c.held and "filesModified" not in c.held


def test_summaries_thrown_away_are_the_generated_ones_not_appended_or_replaced_by_the_local_capsule() -> None:
    base = {"kind": "compaction", "summary_input_tokens": 1_000, "summary_output_tokens": 200, "duration_ms": 1_500}
    flight = [
        {**base, "generated": True, "outcome": "completed", "summary_used": True},  # used
        {**base, "generated": True, "outcome": "skipped"},  # the ROI rejected it after generation
        {**base, "generated": True, "outcome": "completed", "summary_used": False},  # the local capsule won
        {**base, "generated": False, "outcome": "skipped"},  # nothing generated, nothing thrown away
        {"kind": "budget", "generated": True},
    ]
    assert continuity.thrown_away(flight) == (2, 2_400, 3.0)


def test_bad_window_argument_is_named() -> None:
    import argparse

    import pytest
    with pytest.raises(argparse.ArgumentTypeError, match="CONTEXT/OUTPUT/KEEP"):
        continuity._window("16000x2000")
    with pytest.raises(SystemExit, match="does not exist"):
        continuity.transcripts([Path("/nonexistent/transcripts")])
