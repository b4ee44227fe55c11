"""The magics in a real InteractiveShell: every magic and subcommand, and clear UsageErrors."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from kernel_support import trust_project_config

from soba_notebook.notebook import controller as controller_module
from soba_notebook.notebook.magics import SobaMagics


@pytest.fixture
def shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    """The one in-process shell with soba_notebook loaded, in ``tmp_path`` with a home whose
    ``~/.soba/config.json`` only turns approvals off (these tests are about other things, and no one
    answers a question here; tests/unit/test_approvals.py covers them): without a project config, the
    offline model. Other test files import it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "home" / ".soba").mkdir(parents=True, exist_ok=True)
    (tmp_path / "home" / ".soba" / "config.json").write_text('{"tools": {"approval": "never"}}')
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(controller_module, "detect_frontend", lambda: "terminal")
    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "soba_notebook")
    try:
        yield sh
    finally:
        sh.run_line_magic("unload_ext", "soba_notebook")


def _use_fake_server(tmp_path: Path, server: FakeServer, **compaction: object) -> None:
    (tmp_path / ".soba").mkdir(exist_ok=True)
    (tmp_path / ".soba" / "config.json").write_text(json.dumps({
        "model": {"provider": "openai", "model": "gpt-4o-mini", "baseUrl": server.openai_base_url,
                  "apiKeyEnv": "SOBA_TEST_KEY", "contextWindow": 128000, "maxOutputTokens": 4000},
        "compaction": compaction}))
    trust_project_config(tmp_path, tmp_path / "home")  # the user trusts their own loopback server


def _soba_outputs(shell: InteractiveShell, capsys: pytest.CaptureFixture[str], *lines: str) -> list[str]:
    """Run ``%soba LINE`` for each line in turn; what each printed."""
    outputs = []
    for line in lines:
        shell.run_line_magic("soba", line)
        outputs.append(capsys.readouterr().out)
    return outputs


def _magics(shell: InteractiveShell) -> SobaMagics:
    from soba_notebook.notebook import _LOADED

    return _LOADED[id(shell)]


def test_load_ext_registers_and_unload_removes_every_magic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "soba_notebook")
    names = set(sh.magics_manager.magics["line"])
    assert {"soba", "compact", "budget", "auto_compact", "capsule"} <= names
    assert "soba" in sh.magics_manager.magics["cell"]
    sh.run_line_magic("unload_ext", "soba_notebook")
    assert not {"soba", "compact", "budget", "auto_compact", "capsule"} & set(sh.magics_manager.magics["line"])


def test_soba_runs_a_turn_and_streams_its_answer(shell: InteractiveShell, tmp_path: Path, fake_server: FakeServer,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SOBA_TEST_KEY", "k" * 12)
    _use_fake_server(tmp_path, fake_server)
    fake_server.openai.enqueue(text="Hello from the model {with braces}")
    shell.run_line_magic("soba", "say hi with {braces} and $dollars")
    out = capsys.readouterr().out
    assert "Hello from the model {with braces}" in out
    body = fake_server.requests[-1].body
    assert body["messages"][-1]["content"] == "say hi with {braces} and $dollars", "no variable expansion"


def test_cell_magic_uses_the_cell_body_as_the_prompt(shell: InteractiveShell, tmp_path: Path,
                                                     fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOBA_TEST_KEY", "k" * 12)
    _use_fake_server(tmp_path, fake_server)
    fake_server.openai.enqueue(text="ok")
    shell.run_cell_magic("soba", "", "line one\nline two")
    assert fake_server.requests[-1].body["messages"][-1]["content"] == "line one\nline two"


def test_background_turn_returns_at_once_and_status_reports_it(shell: InteractiveShell, tmp_path: Path,
                                                              fake_server: FakeServer,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SOBA_TEST_KEY", "k" * 12)
    _use_fake_server(tmp_path, fake_server)
    fake_server.openai.enqueue(text=["slow ", "answer"], delay=0.3)
    shell.run_line_magic("soba", "--background take your time")
    assert "running in the background" in capsys.readouterr().out
    session = _magics(shell).session
    assert session.runtime is not None
    shell.run_line_magic("soba", "status")
    assert "busy" in capsys.readouterr().out
    fake_server.wait_for_requests(1)
    for _ in range(200):
        if not session.runtime.busy:
            break
        import time

        time.sleep(0.05)
    assert session.last_result is not None and session.last_result.text == "slow answer"


def test_bad_arguments_raise_usage_errors(shell: InteractiveShell) -> None:
    with pytest.raises(UsageError, match="needs a prompt"):
        shell.run_line_magic("soba", "")
    with pytest.raises(UsageError, match="unknown option '--fast'"):
        shell.run_line_magic("soba", "--fast do it")
    with pytest.raises(UsageError, match=re.escape("usage: %auto_compact [on|off]")):
        shell.run_line_magic("auto_compact", "maybe")
    with pytest.raises(UsageError, match="usage: %soba rewind ENTRY_ID"):
        shell.run_line_magic("soba", "rewind")
    with pytest.raises(UsageError, match="checkpoint milestone"):
        shell.run_line_magic("soba", "checkpoint someday")
    with pytest.raises(UsageError, match="no such entry"):
        shell.run_line_magic("soba", "rewind nosuchentry")
    with pytest.raises(UsageError, match="no such session"):
        shell.run_line_magic("soba", "resume nosuchsession")
    with pytest.raises(UsageError, match=re.escape("usage: %budget [--side]")):
        shell.run_line_magic("budget", "now")
    with pytest.raises(UsageError, match="quotes"):
        shell.run_line_magic("capsule", 'create "unterminated')


def test_bad_config_value_is_a_usage_error_naming_file_and_key(shell: InteractiveShell, tmp_path: Path) -> None:
    (tmp_path / ".soba").mkdir()
    (tmp_path / ".soba" / "config.json").write_text('{"compaction": {"autoCompactThresholdRatio": 1.5}}')
    with pytest.raises(UsageError, match=r"config\.json: compaction\.autoCompactThresholdRatio = 1\.5"):
        shell.run_line_magic("soba", "hello")


def test_auto_compact_off_says_only_soft_triggers_are_disabled(shell: InteractiveShell,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    shell.run_line_magic("auto_compact", "off")
    out = capsys.readouterr().out
    assert "soft triggers" in out and "hard limit" in out
    assert _magics(shell).session.config().compaction.auto is False
    shell.run_line_magic("auto_compact", "on")
    assert _magics(shell).session.config().compaction.auto is True


def test_budget_prints_one_line_in_a_terminal(shell: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    shell.run_line_magic("budget", "")
    out = capsys.readouterr().out
    assert "48,808" in out and "<" not in out.split("\n")[-2][:1], "a text line, never a widget repr"


def test_subcommands_sessions_rewind_checkpoint_skill_config_stop(shell: InteractiveShell, tmp_path: Path,
                                                                  fake_server: FakeServer,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SOBA_TEST_KEY", "k" * 12)
    _use_fake_server(tmp_path, fake_server)
    fake_server.openai.enqueue(text="first")
    shell.run_line_magic("soba", "one")
    session = _magics(shell).session
    store = session.handle.store
    first_user = next(e for e in store.path() if e.role == "user")
    shell.run_line_magic("soba", "sessions")
    assert store.id in capsys.readouterr().out
    shell.run_line_magic("soba", f"rewind {first_user.id}")
    assert store.leaf_id == first_user.id
    shell.run_line_magic("soba", 'checkpoint milestone "parser fixed"')
    assert "intent pending" in capsys.readouterr().out
    assert store.leaf().type == "checkpoint"
    skills = tmp_path / ".soba" / "skills" / "tdd"
    skills.mkdir(parents=True)
    (skills / "SKILL.md").write_text("---\nname: tdd\ndescription: test first\n---\nWrite the test first.")
    shell.run_line_magic("soba", "skill activate tdd")
    assert "tdd" in capsys.readouterr().out
    assert store.leaf().data["changes"] == {"activeSkills": ["tdd"]}
    with pytest.raises(UsageError, match="nope"):
        shell.run_line_magic("soba", "skill activate nope")
    monkeypatch.setenv("SOBA_TEST_KEY", "sk-super-secret-value")
    shell.run_line_magic("soba", "config")
    out = capsys.readouterr().out
    assert json.loads(out)["model"]["apiKeyEnv"] == "SOBA_TEST_KEY" and "sk-super" not in out
    shell.run_line_magic("soba", "stop")
    assert "nothing to stop" in capsys.readouterr().out, "the turn had ended"
    fake_server.openai.enqueue(text="fresh")
    shell.run_line_magic("soba", "--new a fresh start")
    assert session.handle.store.id != store.id


def test_no_provider_configured_says_the_offline_scripted_model_is_used(shell: InteractiveShell,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    shell.run_line_magic("soba", "create a tiny calculator package and make its tests pass")
    captured = capsys.readouterr()
    assert "offline demo script" in captured.out and "config.json" in captured.out and not captured.err
    assert "[offline scripted model]" in captured.out


def test_compact_without_history_is_a_reported_noop(shell: InteractiveShell, tmp_path: Path, fake_server: FakeServer,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SOBA_TEST_KEY", "k" * 12)
    _use_fake_server(tmp_path, fake_server)
    fake_server.openai.enqueue(text="short")
    shell.run_line_magic("soba", "hi")
    shell.run_line_magic("compact", "focus on the parser")
    out = capsys.readouterr().out
    assert out.count("nothing old enough to compact yet") == 1, out


def test_compact_with_history_reports_tokens_and_checkpoint(shell: InteractiveShell, tmp_path: Path,
                                                            fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SOBA_TEST_KEY", "k" * 12)
    _use_fake_server(tmp_path, fake_server, keepRecentTokens=200)
    # enough history that a capsule replaces more than it costs (a compact that would grow the
    # context appends nothing)
    for i in range(6):
        fake_server.openai.enqueue(text=f"answer {i} " + "words " * 400)
    for i in range(6):
        shell.run_line_magic("soba", f"question {i}")
    fake_server.handler = lambda path, body: {"text": '{"goal": "answer questions", "done": ["answered 6"]}'}
    shell.run_line_magic("compact", "focus on the answers")
    out = capsys.readouterr().out
    assert "compacted (user)" in out and "ck_" in out and "reclaimed" in out
    summary_request = fake_server.requests[-1].body
    assert "focus on the answers" in summary_request["messages"][-1]["content"]


def test_capsule_create_export_list_show_and_load(shell: InteractiveShell, tmp_path: Path, fake_server: FakeServer,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SOBA_TEST_KEY", "k" * 12)
    _use_fake_server(tmp_path, fake_server, keepRecentTokens=200)
    fake_server.openai.enqueue(tool_calls=[{"id": "w1", "name": "write_file",
                                            "arguments": {"path": "parser.py", "content": "def parse(): ...\n"}}])
    # a long reply, then a short turn: the capsule replaces more than it costs (a compact that
    # would grow the context appends nothing)
    fake_server.openai.enqueue(text="wrote the parser " + "words " * 1500)
    shell.run_line_magic("soba", "write a parser")
    fake_server.openai.enqueue(text="you are welcome " + "words " * 300)  # the retained tail
    shell.run_line_magic("soba", "thanks")
    fake_server.handler = lambda path, body: {"text": '{"goal": "write a parser", "filesModified": ["parser.py"]}'}
    session = _magics(shell).session
    store = session.handle.store
    size = store.file.stat().st_size
    shell.run_line_magic("capsule", 'create "handoff parser work"')
    out = capsys.readouterr().out
    assert "created ck_" in out and ".soba/capsules/" in out
    assert store.file.stat().st_size == size, "create does not change the session or its model input"
    shell.run_line_magic("compact", "")
    ck = next(e.data["checkpointId"] for e in store.entries() if e.type == "capsule")
    capsys.readouterr()
    shell.run_line_magic("capsule", f"export {ck} out/handoff.capsule.md")
    assert (tmp_path / "out" / "handoff.capsule.md").exists()
    with pytest.raises(UsageError, match="exists"):
        shell.run_line_magic("capsule", f"export {ck} out/handoff.capsule.md")
    shell.run_line_magic("capsule", f"export {ck} out/handoff.capsule.md --force")
    shell.run_line_magic("capsule", "list")
    listing = capsys.readouterr().out
    assert ck in listing and "created" in listing and "user" in listing
    shell.run_line_magic("capsule", f"show {ck}")
    assert "parser.py" in capsys.readouterr().out
    shell.run_line_magic("capsule", "load out/handoff.capsule.md")
    assert "new session" in capsys.readouterr().out
    new_store = session.handle.store
    assert new_store.id != store.id
    (loaded,) = [e for e in new_store.entries() if e.type == "capsule"]
    assert loaded.data["trigger"] == "capsule_load" and loaded.data["loadedFrom"]["path"].endswith("handoff.capsule.md")
    with pytest.raises(UsageError, match="usage: %capsule export"):
        shell.run_line_magic("capsule", "export only-one-arg")
    (tmp_path / "broken.capsule.md").write_text("no header here\n")
    with pytest.raises(UsageError, match=r"broken\.capsule\.md:1"):
        shell.run_line_magic("capsule", "load broken.capsule.md")
    with pytest.raises(UsageError, match="unknown %capsule command"):
        shell.run_line_magic("capsule", "frobnicate")


def test_resume_switches_session_and_model_option_changes_the_requested_model(
        shell: InteractiveShell, tmp_path: Path, fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SOBA_TEST_KEY", "k" * 12)
    _use_fake_server(tmp_path, fake_server)
    fake_server.openai.enqueue(text="one")
    shell.run_line_magic("soba", "first session")
    session = _magics(shell).session
    first_id = session.handle.store.id
    fake_server.openai.enqueue(text="two")
    shell.run_line_magic("soba", "--new --model gpt-4.1-mini second session")
    assert fake_server.requests[-1].body["model"] == "gpt-4.1-mini"
    assert session.handle.store.id != first_id
    shell.run_line_magic("soba", f"resume {first_id}")
    assert f"resumed session {first_id}" in capsys.readouterr().out
    assert [e.text for e in session.handle.store.path() if e.role == "user"] == ["first session"]


def test_a_new_session_is_offered_what_project_memory_holds(shell: InteractiveShell, tmp_path: Path,
                                                           fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SOBA_TEST_KEY", "k" * 12)
    _use_fake_server(tmp_path, fake_server, keepRecentTokens=200)
    for i in range(2):
        fake_server.openai.enqueue(text=f"answer {i} " + "words " * 300)
        shell.run_line_magic("soba", f"question {i}")
    fake_server.handler = lambda path, body: {"text": '{"goal": "answer questions", "done": ["answered"]}'}
    shell.run_line_magic("compact", "--remember")
    assert "mirrored into Project Memory" in capsys.readouterr().out
    fake_server.handler = None
    fake_server.openai.enqueue(text="hello again")
    shell.run_line_magic("soba", "--new hello")
    out = capsys.readouterr().out
    assert "Project Memory holds 1 capsule(s)" in out and "%capsule load" in out
