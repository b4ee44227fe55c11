"""Workspace trust's rules, on real files in a temp home: which keys need trust, what an untrusted,
trusted or changed project config gives, the trust record, and ``%soba trust`` / ``status`` in a
real InteractiveShell. The loopback-server proof in a real kernel is tests/test_kernel_workspace_trust.py."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from kernel_support import trust_project_config

from soba_notebook.config import ConfigWarning, UntrustedConfigWarning, load_config, project_trust
from soba_notebook.errors import ConfigError
from soba_notebook.notebook import current
from soba_notebook.trust import needs_trust, record_trust, revoke_trust, store_path
from unit.test_magics import shell  # noqa: F401  (the magics' one shell fixture)

RISKY = {"model": {"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "apiKeyEnv": "OTHER_KEY",
                   "model": "gpt-4o-mini"},
         "tools": {"approval": "never", "allowShell": True, "sandbox": "none", "shellTimeoutSec": 5},
         "compaction": {"keepRecentTokens": 1234}}


def _project(root: Path, config: object = RISKY) -> Path:
    (root / "p" / ".soba").mkdir(parents=True, exist_ok=True)
    (root / "p" / ".soba" / "config.json").write_text(json.dumps(config))
    return root / "p"


@pytest.mark.parametrize("key", ["tools.approval", "tools.approvalTimeoutMs", "tools.sandbox",
                                 "tools.sandboxSkipsApproval", "tools.sandboxEnv", "tools.workspace",
                                 "tools.allowShell", "tools.allowWrite", "tools.allowPython",
                                 "tools.allowBroadWorkspace", "model.baseUrl", "model.provider",
                                 "model.apiKeyEnv", "mcpServers", "mcpServers.x"])
def test_keys_that_lower_safety_redirect_credentials_or_run_programs_need_trust(key: str) -> None:
    assert needs_trust(key)


@pytest.mark.parametrize("key", ["model.model", "model.contextWindow", "model.temperature", "compaction.auto",
                                 "tools.shellTimeoutSec", "tools.maxOutputChars", "ui.sidePanel", "model",
                                 "tools", "agent.maxStepsPerTurn"])
def test_keys_that_only_tune_the_agent_need_no_trust(key: str) -> None:
    assert not needs_trust(key)


def test_an_untrusted_project_config_drops_those_keys_in_either_spelling_and_keeps_the_rest(tmp_path: Path) -> None:
    project = _project(tmp_path)
    with pytest.warns(UntrustedConfigWarning) as caught:
        config = load_config(home=tmp_path / "home", project_dir=project)

    assert (config.model.provider, config.model.base_url, config.model.api_key_env) == ("scripted", None, None)
    assert (config.tools.approval, config.tools.shell_timeout_sec) == ("ask", 5.0)  # the harmless key is kept
    assert config.compaction.keep_recent_tokens == 1234 and config.model.model == "gpt-4o-mini"
    (line,) = [str(w.message) for w in caught if w.category is UntrustedConfigWarning]
    assert line == (f"{project / '.soba' / 'config.json'} (this project): ignored until you trust this project's "
                    f"config: model.provider, model.baseUrl, model.apiKeyEnv, tools.approval, tools.allowShell, "
                    f"tools.sandbox — review the file, then run %soba trust")
    assert "\n" not in line


def test_a_trusted_project_config_is_honoured_and_a_changed_one_is_not(tmp_path: Path) -> None:
    project, home = _project(tmp_path), tmp_path / "home"
    report = project_trust(project, home=home)
    assert report is not None and report.trust.state == "untrusted"
    record_trust(report.trust, home)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UntrustedConfigWarning)
        config = load_config(home=home, project_dir=project)
    assert (config.model.base_url, config.tools.approval) == ("http://127.0.0.1:9/v1", "never")

    (project / ".soba" / "config.json").write_text(json.dumps({**RISKY, "ui": {"sidePanel": True}}))
    with pytest.warns(UntrustedConfigWarning, match="it changed since you trusted it"):
        changed = load_config(home=home, project_dir=project)
    assert (changed.model.base_url, changed.tools.approval, changed.ui.side_panel) == (None, "ask", True)


def test_the_users_own_config_and_arguments_are_always_trusted(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".soba").mkdir(parents=True)
    (home / ".soba" / "config.json").write_text(json.dumps({"model": {"provider": "openai",
                                                                      "baseUrl": "http://127.0.0.1:8/v1"}}))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        config = load_config(home=home, project_dir=tmp_path / "none",
                             overrides={"tools": {"approval": "never"}})
    assert (config.model.base_url, config.tools.approval) == ("http://127.0.0.1:8/v1", "never")


def test_a_project_config_without_risky_keys_needs_no_trust_and_says_nothing(tmp_path: Path) -> None:
    project = _project(tmp_path, {"compaction": {"auto": False}})
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        assert load_config(home=tmp_path / "home", project_dir=project).compaction.auto is False


def test_trust_never_widens_the_workspace_from_a_project(tmp_path: Path) -> None:
    project, home = _project(tmp_path, {"tools": {"allowBroadWorkspace": True}}), tmp_path / "home"
    trust_project_config(project, home)
    with pytest.warns(ConfigWarning, match="cannot widen the workspace"):
        assert load_config(home=home, project_dir=project).tools.allow_broad_workspace is False


def test_the_trust_record_is_in_home_and_holds_paths_and_digests_only(tmp_path: Path) -> None:
    project, home = _project(tmp_path), tmp_path / "home"
    trust_project_config(project, home)
    record = store_path(home)
    data = json.loads(record.read_text())
    assert data == {"version": 1, "projects": {str((project / ".soba" / "config.json").resolve()): {
        "sha256": project_trust(project, home=home).trust.sha256}}}  # type: ignore[union-attr]
    assert record.stat().st_mode & 0o077 == 0  # the user's alone
    assert sorted(p.name for p in (project / ".soba").iterdir()) == ["config.json"]
    assert revoke_trust(project / ".soba" / "config.json", home) and json.loads(record.read_text())["projects"] == {}


def test_a_corrupt_trust_record_is_a_warning_and_counts_as_untrusted_never_a_crash(tmp_path: Path) -> None:
    project, home = _project(tmp_path), tmp_path / "home"
    store_path(home).parent.mkdir(parents=True)
    store_path(home).write_text("{not json")
    with pytest.warns(UntrustedConfigWarning, match="the trust record is not valid") as caught:
        config = load_config(home=home, project_dir=project)
    assert config.tools.approval == "ask" and str(store_path(home)) in str(caught[0].message)

    trust_project_config(project, home)  # rewrites the record; the unreadable one is kept beside it
    assert store_path(home).with_name("trusted-projects.json.corrupt").read_text() == "{not json"
    assert load_config(home=home, project_dir=project).tools.approval == "never"


def test_a_project_config_that_is_not_json_stays_a_config_error(tmp_path: Path) -> None:
    project = _project(tmp_path)
    (project / ".soba" / "config.json").write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON"):
        project_trust(project, home=tmp_path / "home")


def _words(text: str) -> str:
    return " ".join(text.split())


def test_soba_trust_and_revoke_say_what_is_honoured_and_status_says_whether_it_is_trusted(
        shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    (tmp_path / ".soba").mkdir()
    (tmp_path / ".soba" / "config.json").write_text(json.dumps({"tools": {"approval": "edits"}}))
    shell.run_line_magic("soba", "status")
    status = capsys.readouterr().out
    assert status.count("ignored until you trust this project's config: tools.approval") == 1  # the one line
    assert "project config not trusted: tools.approval ignored (review the file, then %soba trust)" in _words(status)
    assert "approval never" in _words(status)  # the user's own ~/.soba/config.json

    shell.run_line_magic("soba", "trust")
    out = capsys.readouterr().out
    assert 'tools.approval = "edits"' in out and "they apply from the next turn: tools.approval" in out, out
    shell.run_line_magic("soba", "status")
    out = _words(capsys.readouterr().out)
    assert "project config trusted: tools.approval honoured" in out, out
    assert current(shell).config().tools.approval == "edits"  # what the next turn takes over

    shell.run_line_magic("soba", "trust --revoke")
    out = capsys.readouterr().out
    assert "no longer trusted" in out and "its tools.approval are ignored from the next turn" in out, out
    shell.run_line_magic("soba", "status")
    assert "not trusted: tools.approval ignored" in capsys.readouterr().out
    shell.run_line_magic("soba", "trust --revoke")
    assert "was not trusted; nothing to revoke" in capsys.readouterr().out
