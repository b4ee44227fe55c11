"""What a ``%soba`` line means: only our magic lines ending in ``?`` are rewritten so the prompt reaches
the agent verbatim (the real-kernel check is ``tests/kernel/test_magic_prompts_kernel.py``), and a
mistyped subcommand or option is named instead of being sent to the model as a prompt."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from kernel_support import trust_project_config

from soba_notebook.notebook import _LOADED, verbatim
from soba_notebook.notebook.controller import NotebookSession
from unit.test_magics import shell  # noqa: F401  (the magics' one shell fixture)

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("cell", "expected"), [
    ("%soba what does greet.py print?", "get_ipython().run_line_magic('soba', 'what does greet.py print?')\n"),
    ("%compact keep the parser??", "get_ipython().run_line_magic('compact', 'keep the parser??')\n"),
    ("if ready:\n    %soba go?\n", "if ready:\n    get_ipython().run_line_magic('soba', 'go?')\n"),
    ("%soba one \\\ntwo?", "get_ipython().run_line_magic('soba', 'one  two?')\n"),
    ("%soba?", "get_ipython().run_line_magic('pinfo', '%soba')\n"),
    ("%soba??", "get_ipython().run_line_magic('pinfo2', '%soba')\n"),
    ("len?", "get_ipython().run_line_magic('pinfo', 'len')\n"),
    ("%sobax y?", "get_ipython().run_line_magic('pinfo', 'y')\n"),
    ("%%soba\nis this verbatim?\n%soba and this?", "get_ipython().run_cell_magic('soba', '', "
                                                  "'is this verbatim?\\n%soba and this?\\n')\n"),
    ('s = """\n%soba inside a string?\n"""', 's = """\n%soba inside a string?\n"""\n'),
])
def test_only_our_magic_lines_ending_in_a_question_mark_are_rewritten(shell: InteractiveShell,  # noqa: F811
                                                                      cell: str, expected: str) -> None:
    assert shell.transform_cell(cell) == expected


def test_loading_twice_installs_the_transform_once_and_unloading_removes_it(shell: InteractiveShell  # noqa: F811
                                                                            ) -> None:
    transforms = shell.input_transformer_manager.line_transforms
    shell.run_line_magic("load_ext", "soba_notebook")
    assert transforms.count(verbatim.verbatim_magic_lines) == 1
    shell.run_line_magic("unload_ext", "soba_notebook")
    assert verbatim.verbatim_magic_lines not in transforms
    shell.run_line_magic("load_ext", "soba_notebook")  # the fixture unloads it again


# -- a mistyped subcommand or option is named, never sent --------------------------------------
def _session(shell: InteractiveShell) -> NotebookSession:  # noqa: F811
    return _LOADED[id(shell)].session


def _sent(shell: InteractiveShell) -> list[str]:  # noqa: F811
    """The prompts the current session sent (none when no session was even opened)."""
    handle = _session(shell).handle
    if handle is None:
        return []
    return [e.text for e in handle.store.path() if e.role == "user" and e.data.get("source") != "cell_history"]


@pytest.mark.parametrize(("line", "command"), [
    ("stauts", "status"), ("sesions", "sessions"), ("stpo", "stop"), ("Skills", "skill"), ("chekpoint", "checkpoint"),
    ("status?", "status"), ("--new status", "status")])
def test_a_one_word_prompt_close_to_a_subcommand_asks_did_you_mean_and_sends_nothing(
        shell: InteractiveShell, line: str, command: str) -> None:  # noqa: F811
    with pytest.raises(UsageError, match=re.escape(f"did you mean `%soba {command}`?")) as raised:
        shell.run_line_magic("soba", line)
    word = line.split()[-1]
    assert f"-- {word}" in str(raised.value), "the message says how to send it as a prompt"
    assert _sent(shell) == []


def test_text_after_a_double_dash_and_a_word_close_to_no_subcommand_are_prompts(shell: InteractiveShell  # noqa: F811
                                                                                ) -> None:
    for line in ("-- stauts", "hello", "frobnicate", "-- -x list files", "-1 is less than zero", "-- stop the server"):
        shell.run_line_magic("soba", line)
    assert _sent(shell) == ["stauts", "hello", "frobnicate", "-x list files", "-1 is less than zero",
                            "stop the server"]
    shell.run_line_magic("soba", "--new -- status")
    assert _sent(shell) == ["status"], "options, then -- , then the prompt"


@pytest.mark.parametrize(("line", "option"), [("-x list files", "-x"), ("--frobnicate list files", "--frobnicate"),
                                              ("--new -v go", "-v")])
def test_an_unknown_leading_option_is_an_error_naming_it_and_the_valid_ones(shell: InteractiveShell,  # noqa: F811
                                                                            line: str, option: str) -> None:
    with pytest.raises(UsageError, match=re.escape(f"unknown option {option!r} for %soba")) as raised:
        shell.run_line_magic("soba", line)
    message = str(raised.value)
    assert all(name in message for name in ("--background", "--model NAME", "--new")), message
    assert "%soba -- " in message, "the message says how to send text that starts with '-'"
    assert _sent(shell) == []


def test_a_misspelled_option_or_flag_is_named_with_the_one_it_is_close_to(shell: InteractiveShell  # noqa: F811
                                                                          ) -> None:
    misspelled = "unknown option '--backgroud' for %soba (did you mean --background?)"
    with pytest.raises(UsageError, match=re.escape(misspelled)):
        shell.run_line_magic("soba", "--backgroud do it")
    with pytest.raises(UsageError) as raised:
        shell.run_line_magic("compact", "--remembr keep the parser")
    message = str(raised.value)
    assert "unknown option '--remembr' for %compact (did you mean --remember?)" in message, message
    assert "usage: %compact [--remember] [instructions]" in message
    with pytest.raises(UsageError, match=re.escape("unknown option '--sid' for %budget (did you mean --side?)")):
        shell.run_line_magic("budget", "--sid")
    with pytest.raises(UsageError, match=re.escape("unknown option '--forse' for %capsule export")):
        shell.run_line_magic("capsule", "export ck_1 out.md --forse")
    assert _session(shell).handle is None, "no magic ran"


@pytest.mark.parametrize("line", ["stop the server", "status of the build", "config the linter"])
def test_a_subcommand_given_words_it_does_not_take_is_a_usage_error_not_silently_run(
        shell: InteractiveShell, line: str, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    name = line.split()[0]
    with pytest.raises(UsageError, match=re.escape(f"usage: %soba {name}")) as raised:
        shell.run_line_magic("soba", line)
    assert "%soba -- TEXT" in str(raised.value)
    assert capsys.readouterr().out == "" and _sent(shell) == []


def test_stop_with_nothing_running_says_so(shell: InteractiveShell,  # noqa: F811
                                           capsys: pytest.CaptureFixture[str]) -> None:
    shell.run_line_magic("soba", "stop")
    assert "nothing to stop" in capsys.readouterr().out
    assert _session(shell).handle is None, "stopping nothing opens no session"
    shell.run_line_magic("soba", "hello")
    capsys.readouterr()
    shell.run_line_magic("soba", "stop")
    assert "nothing to stop" in capsys.readouterr().out


def test_stop_during_a_background_turn_cancels_it(shell: InteractiveShell, tmp_path: Path,  # noqa: F811
                                                  fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SOBA_TEST_KEY", "k" * 12)
    (tmp_path / ".soba").mkdir()
    (tmp_path / ".soba" / "config.json").write_text(json.dumps({"model": {
        "provider": "openai", "model": "gpt-4o-mini", "baseUrl": fake_server.openai_base_url,
        "apiKeyEnv": "SOBA_TEST_KEY"}}))
    trust_project_config(tmp_path, tmp_path / "home")
    fake_server.openai.enqueue(text="still thinking", hold_open=True)  # runs until the client leaves
    shell.run_line_magic("soba", "--background take your time")
    fake_server.wait_for_requests(1)
    capsys.readouterr()
    shell.run_line_magic("soba", "stop")
    assert "cancelling the running turn" in capsys.readouterr().out
    session = _session(shell)
    assert session.runtime is not None
    for _ in range(400):
        if not session.runtime.busy:
            break
        time.sleep(0.05)
    assert session.last_result is not None and session.last_result.outcome == "cancelled"


def test_auto_compact_alone_shows_the_current_state(shell: InteractiveShell,  # noqa: F811
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    shell.run_line_magic("auto_compact", "")
    assert "auto-compaction is on" in capsys.readouterr().out
    shell.run_line_magic("auto_compact", "OFF")
    capsys.readouterr()
    shell.run_line_magic("auto_compact", "")
    assert "auto-compaction is off" in capsys.readouterr().out
    with pytest.raises(UsageError, match=re.escape("usage: %auto_compact [on|off]")):
        shell.run_line_magic("auto_compact", "on off")


def test_skill_list_with_no_skills_says_there_are_none_and_where_they_go(shell: InteractiveShell,  # noqa: F811
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    shell.run_line_magic("soba", "skill list")
    out = capsys.readouterr().out
    assert "no skills" in out and ".soba/skills/NAME/SKILL.md" in out, out
