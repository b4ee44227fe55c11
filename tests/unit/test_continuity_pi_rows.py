"""bench/pi_continuity.py: pi's rows of the continuity bench. A SOBA history becomes pi session
entries with the same ids; pi's file lists are scored against the whole history before pi's first
kept entry, like a capsule; what pi's model would write is reported as not reproduced; and a
transcript whose agent never used pi's file tools gets no pi row. The replay through pi's own code
runs when bench/install-pi.sh has installed it (it is never committed), and is skipped otherwise."""

from __future__ import annotations

import sys

import pytest
from conftest import REPO

from soba_notebook.session import Entry, ToolCall, assistant_message, tool_result, user_message

sys.path.insert(0, str(REPO / "bench"))

import continuity  # bench/ is not a package: imported from its folder
import pi_continuity


def _with_ids(entries: list[Entry]) -> list[Entry]:
    return [e.with_ids(f"e{i}", f"e{i - 1}" if i else None, "2026-01-01T00:00:00Z") for i, e in enumerate(entries)]


PI_HISTORY = _with_ids([
    user_message("Make the greeting configurable in src/greet.ts " + "and explain it. " * 40),
    assistant_message("Reading it.", [ToolCall("c1", "read", {"path": "src/greet.ts"})]),
    tool_result("c1", "read", "export const greet = () => 'hi';\n" * 30),
    assistant_message("", [ToolCall("c2", "edit", {"path": "src/greet.ts", "oldText": "hi", "newText": "x"})]),
    tool_result("c2", "edit", "edited " + "ok " * 200),
    assistant_message("", [ToolCall("c3", "edit", {"path": "src/missing.ts", "oldText": "a", "newText": "b"})]),
    tool_result("c3", "edit", "Could not find the text to replace", is_error=True),  # modifies nothing
    assistant_message("", [ToolCall("c4", "write", {"path": "src/config.ts", "content": "export {}\n" * 60})]),
    tool_result("c4", "write", "wrote src/config.ts " + "ok " * 200),
    user_message("now add a test for it " + "please " * 60),
    assistant_message("", [ToolCall("c5", "write", {"path": "test/greet.test.ts", "content": "test()\n" * 80})]),
    tool_result("c5", "write", "wrote " + "ok " * 200),
    assistant_message("Done: the greeting is configurable and tested. " * 10),
])


def test_a_history_becomes_pi_session_entries_with_its_ids_and_no_usage() -> None:
    entries = pi_continuity.pi_entries(PI_HISTORY)
    assert [e["id"] for e in entries] == [e.id for e in PI_HISTORY]
    roles = [e["message"]["role"] for e in entries]
    assert roles[:3] == ["user", "assistant", "toolResult"]
    call = entries[1]["message"]["content"][-1]
    assert call == {"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "src/greet.ts"}}
    assert entries[6]["message"]["isError"] is True and entries[6]["message"]["toolCallId"] == "c3"
    assert not any("usage" in e["message"] for e in entries)  # pi's own estimate decides when


def test_only_a_history_with_pi_file_tools_is_reproducible() -> None:
    assert pi_continuity.reproducible(PI_HISTORY)
    soba_tools = [assistant_message("", [ToolCall("c1", "edit_file", {"path": "a.py"}),
                                         ToolCall("c2", "bash", {"command": "sed -i s/a/b/ a.py"})])]
    assert not pi_continuity.reproducible(soba_tools)


def test_pis_lists_are_scored_against_the_history_before_its_first_kept_entry() -> None:
    # kept from e9: the prefix modified src/greet.ts and src/config.ts (src/missing.ts failed)
    compaction = pi_continuity.PiCompaction("e9", "threshold", False, 5_000, 1_000, read_files=(),
                                            modified_files=("src/config.ts", "src/greet.ts", "src/missing.ts"))
    (score,) = pi_continuity.score_pi(PI_HISTORY, [compaction])
    assert (score.files_modified.found, score.files_modified.expected) == (2, 2)
    assert score.held == {"filesModified": 1}  # pi lists the failed edit's path: unsupported
    assert score.checks.expected == score.constraints.expected == 0 and score.latest_request is None
    with pytest.raises(ValueError, match="'nope'"):
        pi_continuity.score_pi(PI_HISTORY, [pi_continuity.PiCompaction("nope", "threshold", False, 0, 0, (), ())])


def test_a_pi_row_says_its_model_text_is_not_reproduced() -> None:
    compaction = pi_continuity.PiCompaction("e9", "threshold", False, 5_000, 1_000, (), ("src/greet.ts",))
    row = continuity.ReplayScore("t", (4000, 500, 300), "pi rules", 0, pi_continuity.score_pi(PI_HISTORY, [compaction]),
                                 model_text=False)
    line = continuity.table([row]).splitlines()[-1]
    assert line.count(continuity.NOT_REPRODUCED) == 4 and "not reproduced (model calls)" in line
    assert "| 50% (2) |" in line


@pytest.mark.skipif(pi_continuity.pi_skip_reason() is not None, reason=str(pi_continuity.pi_skip_reason()))
def test_pis_own_code_compacts_a_small_history_and_lists_the_files_of_its_calls() -> None:
    version, compactions = pi_continuity.run_pi_rules(PI_HISTORY, (1_200, 200, 300))
    assert version == "0.73.1" and compactions
    last = compactions[-1]
    # pi lists every write/edit path it summarized, failed or not, rolled from compaction to compaction
    assert {"src/greet.ts", "src/missing.ts"} <= set(last.modified_files)
    assert all(c.tokens_after < c.tokens_before for c in compactions)
