"""Issue 13, item 9: every numeric config key has a finite, sane range and a ConfigError naming file, key,
value and rule; nested JSON is a ConfigError; a config edited while a session runs applies at the next
turn or says it applies after %soba --new."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from IPython.core.interactiveshell import InteractiveShell
from kernel_support import trust_project_config

from soba_notebook.config import SobaConfig, load_config
from soba_notebook.errors import ConfigError
from unit.test_magics import shell  # noqa: F401  (the magics' one shell fixture)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(("block", "key", "raw", "rule"), [
    ("model", "contextWindow", "NaN", "finite"),
    ("model", "contextWindow", "Infinity", "finite"),
    ("model", "contextWindow", "1e300", "at most 100,000,000"),
    ("model", "temperature", "NaN", "finite"),
    ("model", "temperature", "7", "from 0 to 2"),
    ("tools", "shellTimeoutSec", "NaN", "finite"),
    ("tools", "shellTimeoutSec", "-Infinity", "finite"),
    ("tools", "maxOutputChars", "5", "from 1,000 to 10,000,000"),
    ("compaction", "timeoutMs", "1e12", "at most 3,600,000"),
    ("compaction", "minSavingsRatio", "NaN", "finite"),
])
def test_nonsense_numbers_are_config_errors_naming_file_key_value_and_rule(
        tmp_path: Path, block: str, key: str, raw: str, rule: str) -> None:
    f = _write(tmp_path / "p" / ".soba" / "config.json", f'{{"{block}": {{"{key}": {raw}}}}}')
    with pytest.raises(ConfigError) as info:
        load_config(home=tmp_path / "h", project_dir=tmp_path / "p")
    msg = str(info.value)
    assert str(f) in msg and f"{block}.{key}" in msg and rule in msg, msg
    assert info.value.key == f"{block}.{key}"


def test_every_numeric_key_declares_finite_bounds_on_its_field() -> None:
    config = SobaConfig()
    for section, block in config.to_json().items():
        for key, value in block.items():
            if isinstance(value, bool) or (value is None and key != "temperature"):
                continue
            if isinstance(value, int | float) or key == "temperature":
                bounds = config.field_bounds(f"{section}.{key}")
                assert bounds is not None, f"{section}.{key} has no declared bounds"
                assert bounds.high < 1e12


def test_deeply_nested_config_json_is_a_config_error(tmp_path: Path) -> None:
    f = _write(tmp_path / "p" / ".soba" / "config.json", "[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match=rf"{f}: .*nested too deeply"):
        load_config(home=tmp_path / "h", project_dir=tmp_path / "p")




def test_a_config_edited_during_a_session_applies_at_the_next_turn_or_says_when(
        shell: InteractiveShell, tmp_path: Path, fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    from soba_notebook.notebook import _LOADED

    monkeypatch.setenv("SOBA_TEST_KEY", "k" * 12)
    model = {"provider": "openai", "model": "gpt-4o-mini", "baseUrl": fake_server.openai_base_url,
             "apiKeyEnv": "SOBA_TEST_KEY", "contextWindow": 128000, "maxOutputTokens": 4000}
    cfg = _write(tmp_path / ".soba" / "config.json", json.dumps({"model": model}))
    trust_project_config(tmp_path, tmp_path / "home")  # and each edit below: the user trusts it again
    fake_server.openai.enqueue(text="one")
    shell.run_line_magic("soba", "first")
    capsys.readouterr()
    cfg.write_text(json.dumps({"model": {**model, "model": "gpt-4o", "temperature": 0.5},
                               "tools": {"allowShell": False}}))
    trust_project_config(tmp_path, tmp_path / "home")
    fake_server.openai.enqueue(text="two")
    shell.run_line_magic("soba", "second")
    out = capsys.readouterr().out
    assert "model.temperature = 0.5" in out and "tools.allowShell = False" in out and "from this turn on" in out
    assert "model.model = 'gpt-4o' changed; it applies after %soba --new" in out
    body = fake_server.requests[-1].body
    assert body["temperature"] == 0.5 and body["model"] == "gpt-4o-mini"
    assert "shell" not in {t["function"]["name"] for t in body.get("tools", [])}
    agent = _LOADED[id(shell)].session.handle.agent
    assert agent.config.tools.allow_shell is False
