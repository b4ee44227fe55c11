"""The terminal approval prompt when standard input cannot be read (a captured or closed stream:
a script, a test runner, a service): no one can answer, so the call is denied at once with the way
to set the mode, instead of raising from deep inside the prompt or waiting for the timeout."""

from __future__ import annotations

import io

import pytest

from soba_notebook.agent.approval import ApprovalRequest
from soba_notebook.notebook.approvals import PendingApproval, shown_request


class _Unreadable(io.StringIO):
    def fileno(self) -> int:
        raise OSError("no file descriptor")

    def readline(self, size: int | None = -1) -> str:
        raise OSError("reading from stdin while output is captured")


def _request() -> ApprovalRequest:
    return ApprovalRequest(call_id="c1", tool="shell", body="touch marker.txt", diff=None, rules=(), timeout_s=300.0)


def test_an_unreadable_standard_input_denies_the_call_at_once_and_says_how_to_set_the_mode(
        capsys: pytest.CaptureFixture[str]) -> None:
    pending = PendingApproval(_request(), "terminal")
    pending.show(stdin=_Unreadable())
    decision = pending.future.result(timeout=0)
    assert decision.verdict == "deny"
    assert "standard input" in decision.reason and "%soba approval never" in decision.reason
    assert "touch marker.txt" in capsys.readouterr().out  # the question was still shown in full


def test_an_answer_on_standard_input_is_read(capsys: pytest.CaptureFixture[str]) -> None:
    pending = PendingApproval(_request(), "terminal")
    pending.show(stdin=io.StringIO("n not here\n"))
    decision = pending.future.result(timeout=0)
    assert (decision.verdict, decision.reason) == ("deny", "not here")


def test_a_question_that_is_not_about_running_says_what_it_asks_in_its_title(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The card after a sandboxed command asks to keep files, not to run it: the terminal prompt and
    the card (both from ``shown_request``) say so instead of "SOBA asks to run shell"."""
    keep = ApprovalRequest(call_id="c1", tool="shell", body="Keep mistune.py (new)?", diff=None, rules=(),
                           timeout_s=300.0, asks="keep files a sandboxed command left where this kernel imports from")
    assert shown_request(keep)["title"] == \
        "SOBA asks to keep files a sandboxed command left where this kernel imports from"
    assert shown_request(_request())["title"] == "SOBA asks to run shell"
    PendingApproval(keep, "terminal").show(stdin=io.StringIO("n\n"))
    out = capsys.readouterr().out
    assert "SOBA asks to keep files a sandboxed command left where this kernel imports from:" in out
    assert "asks to run" not in out
