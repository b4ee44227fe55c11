"""Configuration: the seed's ``compaction`` block, the ``model`` block, and tool and memory switches.

Layers merge in this order, later winning: built-in defaults < ``~/.soba/config.json`` <
``.soba/config.json`` (or the ``path`` given) < explicit arguments. Every value is validated
where it is read; a :class:`~soba_notebook.errors.ConfigError` names the file, the dotted key,
the bad value and what is allowed. Unknown keys are not fatal (a newer config may be shared with
an older soba) but warn with the nearest known key.

Secrets never live here: API keys are read from the environment variable the ``model`` block
names (``apiKeyEnv``); a config file that holds a key is refused.
"""

from __future__ import annotations

import difflib
import json
import os
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .errors import ConfigError

__all__ = [
    "CompactionConfig",
    "ConfigWarning",
    "MemoryConfig",
    "ModelConfig",
    "SobaConfig",
    "ToolsConfig",
    "UiConfig",
    "load_config",
]


class ConfigWarning(UserWarning):
    """A config file holds something soba ignores (an unknown key)."""


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


@dataclass(frozen=True, slots=True)
class CompactionConfig:
    """Exactly the seed's ``compaction`` keys and defaults (section 5)."""

    auto: bool = True
    compact_on_turn_complete: bool = True
    compact_on_milestone: bool = True
    min_tokens_for_auto_compact: int = 32_000
    min_reclaimable_tokens: int = 12_000
    min_savings_ratio: float = 0.25
    keep_recent_tokens: int = 20_000
    safety_reserve_tokens: int = 8_192
    auto_compact_threshold_ratio: float = 0.8
    timeout_ms: int = 15_000


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """Which model answers, and the window it has. ``provider: scripted`` is the offline model."""

    provider: str = "scripted"
    model: str = "soba-scripted"
    base_url: str | None = None
    api_key_env: str | None = None
    context_window: int = 65_000
    max_output_tokens: int = 8_000
    compaction_model: str | None = None
    temperature: float | None = None


@dataclass(frozen=True, slots=True)
class ToolsConfig:
    """What the agent's tools may do. File tools never leave ``workspace``."""

    workspace: str = "."
    allow_shell: bool = True
    allow_write: bool = True
    allow_python: bool = True
    shell_timeout_sec: float = 60.0
    max_output_chars: int = 20_000


@dataclass(frozen=True, slots=True)
class MemoryConfig:
    """Project Memory: an explicit, validated, non-degraded compact may mirror its capsule."""

    mirror_explicit_compacts: bool = False


@dataclass(frozen=True, slots=True)
class UiConfig:
    """How the notebook shows the agent. ``sidePanel``: the first turn opens the live budget widget
    in a JupyterLab side panel (``%budget --side`` does it on demand)."""

    side_panel: bool = False


@dataclass(frozen=True, slots=True)
class SobaConfig:
    compaction: CompactionConfig = field(default_factory=CompactionConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    ui: UiConfig = field(default_factory=UiConfig)
    #: where each dotted key's value came from ("defaults", a file path, "arguments")
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def hard_limit(self) -> int:
        from .budget import hard_limit

        return hard_limit(self.model.context_window, self.model.max_output_tokens,
                          self.compaction.safety_reserve_tokens)

    @property
    def soft_limit(self) -> int:
        from .budget import soft_limit

        return soft_limit(self.hard_limit, self.compaction.min_tokens_for_auto_compact,
                          self.compaction.auto_compact_threshold_ratio)

    def to_json(self) -> dict[str, Any]:
        """The config in its file form (camelCase). Contains no secret by construction."""
        return {section: {_camel(k): v for k, v in asdict(getattr(self, section)).items()}
                for section in _SECTIONS}

    def with_overrides(self, overrides: Mapping[str, Any], source: str = "arguments") -> SobaConfig:
        return _merge(self, overrides, source)


_SECTIONS: dict[str, type] = {"compaction": CompactionConfig, "model": ModelConfig, "tools": ToolsConfig,
                              "memory": MemoryConfig, "ui": UiConfig}
_SECRET_KEYS = {"apikey", "api_key", "key", "token", "accesstoken", "secret", "password", "authorization"}


def _known(section: str) -> dict[str, str]:
    """camelCase file key -> dataclass field name."""
    return {_camel(f.name): f.name for f in fields(_SECTIONS[section])}


def _warn_unknown(source: str, key: str, candidates: list[str]) -> None:
    near = difflib.get_close_matches(key.split(".")[-1], candidates, n=1, cutoff=0.5)
    hint = f"; did you mean {near[0]!r}?" if near else f"; known keys: {', '.join(sorted(candidates))}"
    warnings.warn(f"{source}: unknown config key {key!r} is ignored{hint}", ConfigWarning, stacklevel=4)


def _check_value(source: str, dotted: str, name: str, value: Any, default: Any) -> Any:
    def bad(allowed: str) -> ConfigError:
        return ConfigError(f"{source}: {dotted} = {value!r} is not allowed: {allowed}", source=source,
                           key=dotted, value=value)

    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise bad("expected true or false")
        return value
    if name.endswith("_ratio"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad("expected a number between 0 and 1")
        low_ok = value > 0 if name == "auto_compact_threshold_ratio" else value >= 0
        if not (low_ok and value <= 1):
            rng = "greater than 0 and at most 1" if name == "auto_compact_threshold_ratio" else "from 0 to 1"
            raise bad(f"a ratio must be {rng}")
        return float(value)
    if isinstance(default, int) and name not in ("temperature",):
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
            raise bad("expected a whole number of tokens" if "token" in name or "window" in name
                      else "expected a whole number")
        positive = name in ("context_window", "max_output_tokens", "timeout_ms", "max_output_chars")
        if value < 0 or (positive and value == 0):
            raise bad("must be greater than 0" if positive else "must not be negative")
        return int(value)
    if isinstance(default, float) or name == "temperature":
        if value is None and name == "temperature":
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or (value <= 0 and name != "temperature"):
            raise bad("expected a positive number")
        return float(value)
    # strings (some optional)
    if value is None and default is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise bad("expected a non-empty string")
    return value


def _merge(config: SobaConfig, layer: Mapping[str, Any], source: str) -> SobaConfig:
    if not isinstance(layer, Mapping):
        raise ConfigError(f"{source}: the config must be a JSON object, got {type(layer).__name__}",
                          source=source)
    sources = dict(config.sources)
    sections = {name: getattr(config, name) for name in _SECTIONS}
    for section, values in layer.items():
        if section not in _SECTIONS:
            _warn_unknown(source, section, list(_SECTIONS))
            continue
        if not isinstance(values, Mapping):
            raise ConfigError(f"{source}: {section} must be an object of settings, got {values!r}",
                              source=source, key=section, value=values)
        known = _known(section)
        changes: dict[str, Any] = {}
        for key, value in values.items():
            dotted = f"{section}.{key}"
            if key not in known and (key.lower() in _SECRET_KEYS
                                     or key.lower().endswith(("apikey", "api_key", "secret", "password"))):
                raise ConfigError(f"{source}: {dotted} looks like a secret; API keys are read only from the "
                                  f"environment: set model.apiKeyEnv to the variable's name instead",
                                  source=source, key=dotted)
            name = known.get(key) or (key if key in known.values() else None)
            if name is None:
                _warn_unknown(source, dotted, list(known))
                continue
            default = getattr(_SECTIONS[section](), name)
            changes[name] = _check_value(source, dotted, name, value, default)
            sources[f"{section}.{_camel(name)}"] = source
        sections[section] = replace(sections[section], **changes)
    merged = SobaConfig(**sections, sources=sources)
    _check_consistency(merged)
    return merged


def _check_consistency(config: SobaConfig) -> None:
    """Rules that involve several keys; the error names the key that was set last."""
    m, c = config.model, config.compaction

    def src(key: str) -> str:
        return config.sources.get(key, "defaults")

    hard = m.context_window - m.max_output_tokens - c.safety_reserve_tokens
    if hard <= 0:
        key = "compaction.safetyReserveTokens" if src("compaction.safetyReserveTokens") != "defaults" \
            else "model.maxOutputTokens"
        raise ConfigError(
            f"{src(key)}: {key} leaves no room for input: contextWindow {m.context_window} - maxOutputTokens "
            f"{m.max_output_tokens} - safetyReserveTokens {c.safety_reserve_tokens} = {hard}; the hard limit "
            f"must be greater than 0", source=src(key), key=key, value=hard)
    if c.keep_recent_tokens >= hard:
        key = "compaction.keepRecentTokens"
        raise ConfigError(
            f"{src(key)}: {key} = {c.keep_recent_tokens} is not allowed: it must be less than the hard limit "
            f"{hard} (contextWindow - maxOutputTokens - safetyReserveTokens), or nothing could ever be "
            f"compacted", source=src(key), key=key, value=c.keep_recent_tokens)


def _read_layer(path: Path) -> Mapping[str, Any] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file ({exc.strerror})", source=str(path)) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg})", source=str(path)) \
            from None


def load_config(path: str | os.PathLike[str] | None = None, *, overrides: Mapping[str, Any] | None = None,
                home: str | os.PathLike[str] | None = None,
                project_dir: str | os.PathLike[str] | None = None) -> SobaConfig:
    """Merge defaults < ``~/.soba/config.json`` < project config (or ``path``) < ``overrides``.

    ``overrides`` uses the file's shape: ``{"compaction": {"auto": False}}``.
    """
    config = SobaConfig()
    _check_consistency(config)
    home_dir = Path(home) if home is not None else Path.home()
    project_file = Path(path) if path is not None else Path(project_dir or ".") / ".soba" / "config.json"
    if path is not None and not project_file.exists():
        raise ConfigError(f"{project_file}: no such config file", source=str(project_file))
    for file in (home_dir / ".soba" / "config.json", project_file):
        layer = _read_layer(file)
        if layer is not None:
            config = _merge(config, layer, str(file))
    if overrides:
        config = _merge(config, overrides, "arguments")
    return config
