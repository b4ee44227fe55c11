"""What a cell shows besides the widget: clipped tool output, notes, per-cell summaries, status."""

from __future__ import annotations

from soba_notebook.notebook.cellview import cell_summary, note, offline_notice, status_lines, stopped_turn, tool_block
from soba_notebook.textclip import head_tail

FAILING_RUN = "\n".join([f"test_{i} ... ok" for i in range(300)]
                        + ["FAIL: test_div", "Traceback (most recent call last):", "AssertionError: 1 != 2",
                           "Ran 301 tests in 0.2s", "FAILED (failures=1)", "[exit code 1]"])


def test_a_long_tool_output_keeps_head_and_tail_with_an_omitted_lines_marker_and_the_exit_line() -> None:
    shown = head_tail(FAILING_RUN, head_lines=3, tail_lines=6)
    lines = shown.splitlines()
    assert lines[:3] == ["test_0 ... ok", "test_1 ... ok", "test_2 ... ok"]
    assert lines[3] == "… 297 lines omitted …"
    assert lines[-6:] == FAILING_RUN.splitlines()[-6:]  # the summary and the traceback survive
    assert lines[-1] == "[exit code 1]"


def test_a_single_over_long_line_is_cut_with_a_marker_never_silently() -> None:
    text = "x" * 5_000 + "\n[exit code 0]"
    shown = head_tail(text, line_chars=300)
    assert "… 4,700 characters omitted …" in shown and shown.endswith("[exit code 0]")
    assert head_tail("short\n[exit code 0]") == "short\n[exit code 0]"


def test_the_tool_block_puts_the_exit_line_in_its_summary() -> None:
    block = tool_block("shell", "error", FAILING_RUN)
    summary = block.html.split("</summary>")[0]
    assert "[exit code 1]" in summary and "lines omitted" in block.html
    assert block.text.endswith("[exit code 1]")


def test_the_offline_notice_is_a_styled_note_saying_what_and_where() -> None:
    text = offline_notice("/home/me/project")
    assert "fixed offline demo script" in text and "calc_demo/ inside /home/me/project" in text
    assert "never writes over an existing file" in text
    out = note(text, title="Offline demo")
    assert "class='soba-note'" in out.html and "jp-info-color1" in out.html
    assert "error" not in out.html.lower()


def test_a_cell_summary_lists_its_compactions_and_says_a_skip_in_one_plain_line() -> None:
    snap = {"effective": 12_877, "hard_limit": 14_000, "usage_percent": 92.0}
    ends = [{"trigger": "auto_threshold", "outcome": "completed", "tokens_before": 15_709, "tokens_after": 9_120,
             "checkpoint_id": "ck_1", "quality": "ok"},
            {"trigger": "user", "outcome": "skipped", "reason": "nothing old enough to compact yet: 12,409 tokens"},
            {"trigger": "user", "outcome": "skipped", "reason": "nothing old enough to compact yet: 12,409 tokens"}]
    out = cell_summary(snap, ends)
    assert out.text.splitlines()[0] == "After this turn: context 12,877 / 14,000 tokens (92.0%) · 1 compaction"
    assert "history 15,709 tokens (never sent; over the 14,000 limit) → 9,120 sent" in out.text
    assert out.text.count("nothing old enough to compact yet") == 1


def test_a_stopped_turn_says_so_in_the_cell_and_names_only_capsules_appended_before_the_stop() -> None:
    cancelled = {"trigger": "turn_complete", "outcome": "cancelled", "reason": "interrupted from the kernel"}
    out = stopped_turn("cancelled", [cancelled])
    assert out.text == "Turn cancelled: the transcript is consistent and no capsule was appended"
    assert "class='soba-note'" in out.html and "no capsule was appended" in out.html
    earlier = {"trigger": "auto_threshold", "outcome": "completed", "checkpoint_id": "ck_1"}
    out = stopped_turn("cancelled", [earlier, cancelled])
    assert "ck_1" in out.text and "no capsule was appended after it" in out.text
    assert "nothing was sent" in stopped_turn(None).text
    assert stopped_turn("completed").text.startswith("Turn not cancelled:")


def test_soba_status_prints_aligned_fields_with_thousands_separators() -> None:
    status = {"session": "s1", "file": "/p/.soba/sessions/s1.jsonl", "provider": "offline", "offline": True,
              "busy": False, "queued": 0, "entries": 1_234, "effective": 12_409, "hard_limit": 14_000,
              "soft_limit": 11_200, "source": "provider_usage", "auto_compact": True, "pending_intents": [],
              "active_skills": [], "last_compaction": None, "last_turn": "completed"}
    lines = status_lines(status)
    column = len("auto-compaction") + 2  # the longest label, then two spaces
    assert all(line[column - 2:column] == "  " and line[column] != " " for line in lines), lines
    text = "\n".join(lines)
    assert "12,409 / 14,000 tokens" in text and "1,234" in text and "none yet" in text
    assert "{" not in text  # no raw dicts
