"""Config: the seed's keys and defaults, merge order, and errors that name file, key and value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from soba_notebook.config import CompactionConfig, ConfigWarning, load_config
from soba_notebook.errors import ConfigError

SEED_COMPACTION = {
    "auto": True, "compactOnTurnComplete": True, "compactOnMilestone": True,
    "minTokensForAutoCompact": 32000, "minReclaimableTokens": 12000, "minSavingsRatio": 0.25,
    "keepRecentTokens": 20000, "safetyReserveTokens": 8192, "autoCompactThresholdRatio": 0.8,
    "timeoutMs": 15000,
}


def _write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "home", tmp_path / "project"


def test_compaction_block_has_exactly_the_seed_keys_and_defaults(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    config = load_config(home=home, project_dir=project)
    assert config.to_json()["compaction"] == SEED_COMPACTION
    assert config.compaction == CompactionConfig()


def test_merge_order_defaults_home_project_arguments(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    _write(home / ".soba/config.json", {"compaction": {"keepRecentTokens": 10000, "timeoutMs": 1000}})
    _write(project / ".soba/config.json", {"compaction": {"keepRecentTokens": 15000}})
    config = load_config(home=home, project_dir=project, overrides={"compaction": {"timeoutMs": 500}})
    assert config.compaction.keep_recent_tokens == 15000
    assert config.compaction.timeout_ms == 500
    assert config.compaction.min_savings_ratio == 0.25
    assert config.sources["compaction.keepRecentTokens"].endswith("project/.soba/config.json")


@pytest.mark.parametrize(("block", "key", "value", "allowed"), [
    ("compaction", "autoCompactThresholdRatio", 1.5, "ratio"),
    ("compaction", "minSavingsRatio", -0.1, "ratio"),
    ("compaction", "safetyReserveTokens", -5, "negative"),
    ("compaction", "auto", "yes", "true or false"),
    ("compaction", "timeoutMs", 0, "greater than 0"),
    ("model", "contextWindow", "big", "whole number"),
    ("compaction", "keepRecentTokens", 48808, "less than the hard limit 48808"),
])
def test_invalid_value_error_names_file_key_value_and_what_is_allowed(
        dirs: tuple[Path, Path], block: str, key: str, value: object, allowed: str) -> None:
    home, project = dirs
    f = _write(project / ".soba/config.json", {block: {key: value}})
    with pytest.raises(ConfigError) as info:
        load_config(home=home, project_dir=project)
    msg = str(info.value)
    assert str(f) in msg and f"{block}.{key}" in msg and allowed in msg
    assert repr(value) in msg or str(value) in msg
    assert info.value.key == f"{block}.{key}"


def test_hard_limit_that_leaves_no_room_is_rejected(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    with pytest.raises(ConfigError, match="leaves no room"):
        load_config(home=home, project_dir=project,
                    overrides={"model": {"contextWindow": 16000, "maxOutputTokens": 8000},
                               "compaction": {"keepRecentTokens": 100}})


def test_unknown_key_warns_with_the_nearest_known_key(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    _write(project / ".soba/config.json", {"compaction": {"keepRecentToken": 100}})
    with pytest.warns(ConfigWarning, match="did you mean 'keepRecentTokens'"):
        config = load_config(home=home, project_dir=project)
    assert config.compaction.keep_recent_tokens == 20000


def test_broken_json_names_file_line_and_column(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    f = project / ".soba/config.json"
    f.parent.mkdir(parents=True)
    f.write_text('{\n  "compaction": {"auto": tru }\n}')
    with pytest.raises(ConfigError, match=rf"{f}:2:\d+: not valid JSON"):
        load_config(home=home, project_dir=project)


def test_api_key_in_a_config_file_is_refused(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    _write(project / ".soba/config.json", {"model": {"apiKey": "sk-live-123"}})
    with pytest.raises(ConfigError, match="environment") as info:
        load_config(home=home, project_dir=project)
    assert "sk-live-123" not in str(info.value)


def test_serialized_config_holds_no_secret_from_the_environment(dirs: tuple[Path, Path],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    home, project = dirs
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value-xyz")
    config = load_config(home=home, project_dir=project,
                         overrides={"model": {"provider": "openai", "apiKeyEnv": "OPENAI_API_KEY"}})
    assert "sk-secret-value-xyz" not in json.dumps(config.to_json())
    assert config.to_json()["model"]["apiKeyEnv"] == "OPENAI_API_KEY"


def test_explicit_path_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "missing.json", home=tmp_path)


def test_the_side_panel_switch_is_a_ui_key_off_by_default(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    assert load_config(home=home, project_dir=project).ui.side_panel is False
    _write(project / ".soba" / "config.json", {"ui": {"sidePanel": True}})
    config = load_config(home=home, project_dir=project)
    assert config.ui.side_panel is True and config.to_json()["ui"] == {"sidePanel": True}
    _write(project / ".soba" / "config.json", {"ui": {"sidePanel": "yes"}})
    with pytest.raises(ConfigError, match=r"ui\.sidePanel"):
        load_config(home=home, project_dir=project)
