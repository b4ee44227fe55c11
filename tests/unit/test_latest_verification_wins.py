"""The latest verification result wins, read from the recorded exit status first."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from soba_notebook.compaction.capsule import Capsule
from soba_notebook.compaction.extract import deterministic_capsule, extract_facts
from soba_notebook.compaction.verification import NOT_THE_CHECKS_STATUS, verification_outcome
from soba_notebook.importers._common import tool_data
from soba_notebook.session.entries import Entry, ToolCall, assistant_message, tool_result

COMMAND = "npm run check"

#: How a run's result can be recorded: SOBA's shell tool (exit code field and footer), an old SOBA
#: entry (footer only), pi (isError recorded for every run, no exit line in the text),
#: mini-swe-agent (returncode), and a piped run whose status only the output text shows.
STYLES = ("soba", "soba_text_only", "pi", "mini_swe", "piped")


def _run(i: int, passed: bool, style: str) -> list[Entry]:
    call_id = f"c{i}"
    command = f"{COMMAND} 2>&1 | tail -5" if style == "piped" else COMMAND
    call = assistant_message("", [ToolCall(call_id, "bash" if style == "pi" else "shell", {"command": command})])
    if style == "soba":
        result = tool_result(call_id, "shell", f"checked\n[exit code {0 if passed else 2}]", is_error=not passed,
                             exit_code=0 if passed else 2)
    elif style == "soba_text_only":
        result = tool_result(call_id, "shell", f"checked\n[exit code {0 if passed else 1}]", is_error=not passed)
    elif style == "pi":
        result = Entry("message", tool_data(call_id, "bash", "> tsc --noEmit\n", is_error=not passed,
                                            status_recorded=True))
    elif style == "mini_swe":
        result = Entry("message", tool_data(call_id, "bash", "output", exit_code=0 if passed else 1))
    else:
        text = "Tests: 12 passed, 12 total" if passed else "Tests: 3 failed, 9 passed, 12 total"
        result = tool_result(call_id, "shell", f"{text}\n[exit code 0]", exit_code=0)
    return [call, result]


runs = st.lists(st.tuples(st.booleans(), st.sampled_from(STYLES)), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(runs=runs, cuts=st.lists(st.integers(min_value=1, max_value=11), max_size=3))
def test_capsule_status_equals_the_last_runs_for_any_sequence_of_runs_of_one_command(
        runs: list[tuple[bool, str]], cuts: list[int]) -> None:
    entries = [e for i, (passed, style) in enumerate(runs) for e in _run(i, passed, style)]
    # compact several times at random points: each capsule rolls the previous one forward
    bounds = [*sorted({2 * c for c in cuts if 2 * c < len(entries)}), len(entries)]
    capsule: Capsule | None = None
    start = 0
    for end in bounds:
        capsule = deterministic_capsule(entries[start:end], capsule, f"ck_{end}")
        start = end
    assert capsule is not None
    (check,) = capsule.verification
    assert check.status == ("passed" if runs[-1][0] else "failed")
    assert extract_facts(entries).verification[0].status == check.status
    if runs[-1][0]:
        assert not capsule.blockers, "a check that passed last is never an open blocker"


def test_failed_then_passed_is_passed_with_the_failure_kept_as_history() -> None:
    entries = _run(0, False, "soba") + _run(1, True, "pi")
    capsule = deterministic_capsule(entries)
    assert [(v.command, v.status) for v in capsule.verification] == [(COMMAND, "passed")]
    assert capsule.blockers == ()
    assert any("failed earlier" in item for item in capsule.done)


def test_a_blocker_a_later_entry_resolved_moves_to_done() -> None:
    first = deterministic_capsule(_run(0, False, "soba"), None)
    assert first.blockers and first.blockers[0].startswith(f"{COMMAND} failed")
    second = deterministic_capsule(_run(1, True, "mini_swe"), first, "ck_1")
    assert second.blockers == ()
    assert f"Resolved: {first.blockers[0]}" in second.done


def test_imported_success_without_an_exit_line_is_passed_from_the_recorded_status() -> None:
    assert verification_outcome("> tsc --noEmit\n", False, status_recorded=True) == ("passed", "recorded success")
    assert verification_outcome("> tsc --noEmit\n", False)[0] == "unknown"  # not recorded: nothing known
    assert verification_outcome("", None, exit_code=0) == ("passed", "exit 0")
    assert verification_outcome("", None, exit_code=3) == ("failed", "exit 3")


def test_a_piped_status_is_said_to_belong_to_the_last_command() -> None:
    status, detail = verification_outcome("nothing readable\n[exit code 0]", None, exit_code=0,
                                          exit_code_reliable=False)
    assert status == "unknown" and detail == NOT_THE_CHECKS_STATUS
    status, detail = verification_outcome("Tests: 3 failed, 12 total\n[exit code 0]", None, exit_code=0,
                                          exit_code_reliable=False)
    assert status == "failed" and NOT_THE_CHECKS_STATUS in detail


def test_importers_keep_the_status_their_source_recorded() -> None:
    from soba_notebook.importers.openai_messages import _tool
    from soba_notebook.importers.pi import _message

    _, data = _message({"role": "toolResult", "toolCallId": "t1", "toolName": "bash", "isError": False,
                        "content": [{"type": "text", "text": "ok"}]}, "l1", _Log())
    assert data["message"]["statusRecorded"] is True and data["message"]["isError"] is False
    mini = _tool({"role": "tool", "tool_call_id": "t2", "content": "out"}, {"returncode": 1}, "l2", _Log(), {}, [])
    assert mini["message"]["exitCode"] == 1


class _Log:
    def skip(self, *args: object) -> None: ...

    def problem(self, *args: object) -> None: ...
