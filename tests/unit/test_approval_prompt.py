"""The terminal approval prompt when standard input cannot be read (a captured or closed stream:
a script, a test runner, a service): no one can answer, so the call is denied at once with the way
to set the mode, instead of raising from deep inside the prompt or waiting for the timeout."""

from __future__ import annotations

import io

import pytest

from soba_notebook.agent.approval import ApprovalRequest
from soba_notebook.notebook.approvals import PendingApproval


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
