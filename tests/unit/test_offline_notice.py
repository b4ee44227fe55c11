"""The offline model's disclaimer in a real InteractiveShell: in full once per session, one line per later turn."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell

from unit.test_magics import shell  # noqa: F401  (the magics' one shell fixture)


def test_offline_disclaimer_is_said_in_full_once_per_session_and_in_one_line_each_later_turn(
        shell: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    prompts = ["create a calculator package", "add a parser", "add a command line"]
    outputs = []
    for prompt in prompts:
        shell.run_line_magic("soba", prompt)
        outputs.append(capsys.readouterr().out)
    everything = "".join(outputs)

    assert everything.count("Offline demo") == 1 and "Offline demo" in outputs[0]  # the kernel's note
    assert everything.count("I will not do what you asked") == 1 and "I will not do what you asked" in outputs[0]
    for later in outputs[1:]:
        assert later.count("Still the offline demo script, not your request") == 1, later[:2000]
    assert all(out.count("[offline scripted model] You asked:") == 1 for out in outputs)  # still labelled

    from soba_notebook.notebook import _LOADED

    _LOADED[id(shell)].session.ensure(new=True)  # another session: its first reply introduces the model again
    shell.run_line_magic("soba", "create a calculator package")
    fresh = capsys.readouterr().out
    assert "I will not do what you asked" in fresh, fresh[:3000]
    assert "Offline demo" not in fresh  # the note is once per kernel
