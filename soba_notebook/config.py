"""Configuration: the seed's ``compaction`` block, the ``model`` block, and tool and memory switches.

Layers merge in this order, later winning: built-in defaults < ``~/.soba/config.json`` <
``.soba/config.json`` (or the ``path`` given) < explicit arguments. Every value is validated
where it is read; a :class:`~soba_notebook.errors.ConfigError` names the file, the dotted key,
the bad value and what is allowed. Unknown keys are not fatal (a newer config may be shared with
an older soba) but warn with the nearest known key.

Secrets never live here: API keys are read from the environment variable the ``model`` block
names (``apiKeyEnv``); a config file that holds a key is refused.

A project's own config is data from whoever made the project: the keys that lower safety or
redirect credentials (:func:`~soba_notebook.trust.needs_trust`) are dropped from it before the
merge until the user trusts that file's content (:mod:`soba_notebook.trust`, ``%soba trust``), and
one :class:`UntrustedConfigWarning` line names them. ``~/.soba/config.json`` and explicit arguments
are the user's own and always honoured.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import shutil
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .mcp_config import McpServerConfig, parse_mcp_servers
from .scrub import names_a_secret
from .trust import ProjectTrust, check_trust, needs_trust

__all__ = [
    "RESTART_KEYS",
    "TOOL_NAMES",
    "AgentConfig",
    "Bounds",
    "CompactionConfig",
    "ConfigEdit",
    "ConfigWarning",
    "MemoryConfig",
    "ModelConfig",
    "NotebookConfig",
    "SobaConfig",
    "ToolsConfig",
    "TrustReport",
    "UiConfig",
    "UntrustedConfigWarning",
    "config_edit",
    "load_config",
    "project_trust",
    "read_model_block",
]


class ConfigWarning(UserWarning):
    """A config file holds something soba ignores (an unknown key)."""


class UntrustedConfigWarning(ConfigWarning):
    """A project's config sets keys that need the user's trust, and they were ignored (one line)."""


@dataclass(frozen=True, slots=True)
class Bounds:
    """The rule for a numeric key, declared on its field: ``low..high``, whole or not, optional or not.

    ``open_low`` excludes ``low`` itself (a ratio that must be greater than 0). Every bound is
    finite, so NaN, Infinity and absurd values such as a 1e300 window are refused by name.
    """

    low: float
    high: float
    whole: bool = True
    open_low: bool = False
    unit: str = ""
    ratio: bool = False

    def describe(self) -> str:
        kind = "a ratio" if self.ratio else ("a whole number" if self.whole else "a number")
        unit = f" {self.unit}" if self.unit else ""
        if self.open_low:
            return f"{kind}{unit} greater than {_fmt(self.low)} and at most {_fmt(self.high)}"
        return f"{kind}{unit} from {_fmt(self.low)} to {_fmt(self.high)}"


def _fmt(x: float) -> str:
    return f"{int(x):,}" if x == int(x) else f"{x:g}"


def _num(default: Any, low: float, high: float, **kw: Any) -> Any:
    return field(default=default, metadata={"bounds": Bounds(low, high, **kw)})


#: the built-in tools' names, for ``tools.enabled`` / ``tools.disabled`` (the config sits below the
#: agent, so the names are listed here; tests/unit/test_tool_allow_list.py holds them equal to the registry's)
TOOL_NAMES = ("read_file", "write_file", "edit_file", "list_files", "glob", "grep", "shell", "python", "recall",
              "checkpoint", "activate_skill", "deactivate_skill", "variables", "notebook_read", "notebook_edit",
              "notebook_run")

#: an MCP server's tool in the allow list (agent/mcp_tools.py names them so)
_MCP_TOOL_NAME = re.compile(r"(?=.{1,64}$)mcp__[A-Za-z0-9_-]+__[A-Za-z0-9_-]+")

_BIG = 100_000_000  # tokens: far beyond any model's window, still finite


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


@dataclass(frozen=True, slots=True)
class CompactionConfig:
    """Exactly the seed's ``compaction`` keys and defaults (section 5)."""

    auto: bool = True
    compact_on_turn_complete: bool = True
    compact_on_milestone: bool = True
    min_tokens_for_auto_compact: int = _num(32_000, 0, _BIG, unit="of tokens")
    min_reclaimable_tokens: int = _num(12_000, 0, _BIG, unit="of tokens")
    min_savings_ratio: float = _num(0.25, 0, 1, whole=False, ratio=True)
    keep_recent_tokens: int = _num(20_000, 0, _BIG, unit="of tokens")
    safety_reserve_tokens: int = _num(8_192, 0, _BIG, unit="of tokens")
    auto_compact_threshold_ratio: float = _num(0.8, 0, 1, whole=False, open_low=True, ratio=True)
    timeout_ms: int = _num(15_000, 0, 3_600_000, open_low=True, unit="of milliseconds")


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """Which model answers, and the window it has. ``provider: scripted`` is the offline model."""

    provider: str = "scripted"
    model: str = "soba-scripted"
    base_url: str | None = None
    api_key_env: str | None = None
    context_window: int = _num(65_000, 0, _BIG, open_low=True, unit="of tokens")
    max_output_tokens: int = _num(8_000, 0, _BIG, open_low=True, unit="of tokens")
    compaction_model: str | None = None
    temperature: float | None = _num(None, 0, 2, whole=False)
    #: "auto" (stream; plain requests when the server streams no usage), "always" or "never"
    stream: str = field(default="auto", metadata={"choices": ("auto", "always", "never")})
    #: how tools reach the model: "native" (the server's ``tools`` list), "json" (SOBA's own protocol:
    #: definitions in the system prompt, each answer one JSON tool call or reply), "auto" (json only
    #: where the server is known not to show tools natively; docs/PROVIDERS.md)
    tool_protocol: str = field(default="auto", metadata={"choices": ("auto", "native", "json")})
    #: the whole-request deadline: one inference, every retry and wait included, is abandoned after it
    #: (a server that sends only keep-alives cannot hold a turn longer)
    request_timeout_ms: int = _num(600_000, 100, 86_400_000, unit="of milliseconds")
    #: no byte from the provider for this long (headers included) counts as a stalled request
    idle_timeout_ms: int = _num(120_000, 100, 3_600_000, unit="of milliseconds")
    #: whether the model is sent images: "auto" (what the provider declares), "on" or "off"
    #: (``true`` / ``false`` read the same); a model that sees none gets each image's one-line description
    vision: str = field(default="auto", metadata={"choices": ("auto", "on", "off")})
    #: the newest images the model input keeps; older ones become their description (images go first)
    keep_images: int = _num(8, 0, 1_000, unit="of images")


@dataclass(frozen=True, slots=True)
class ToolsConfig:
    """What the agent's tools may do. File tools never leave ``workspace``."""

    #: ``~`` and ``$VARIABLE`` are expanded when the config is read; a relative path is relative to
    #: the project directory. :func:`load_config` refuses one that is not an existing directory.
    workspace: str = "."
    allow_shell: bool = True
    allow_write: bool = True
    allow_python: bool = True
    #: a workspace of ``/``, ``$HOME`` or an ancestor of it; honoured only from ``~/.soba/config.json``
    #: or explicit arguments, never from a project's own config
    allow_broad_workspace: bool = False
    shell_timeout_sec: float = _num(60.0, 0, 86_400, whole=False, open_low=True, unit="of seconds")
    #: how long one cell ``notebook_run`` runs may take before it is interrupted
    notebook_run_timeout_sec: float = _num(600.0, 0, 86_400, whole=False, open_low=True, unit="of seconds")
    max_output_chars: int = _num(20_000, 1_000, 10_000_000, unit="of characters")
    #: "none": shell commands run with the kernel's rights; "bwrap": under bubblewrap (read-only file
    #: system but the workspace, no network, no secrets; see docs/SECURITY.md). Never a silent fall-back:
    #: "bwrap" without the ``bwrap`` program is a ConfigError at load.
    sandbox: str = field(default="none", metadata={"choices": ("none", "bwrap")})
    #: under "ask" and "edits", whether a sandboxed shell command runs without a card (the sandbox
    #: standing in for the question); false: it asks like any command (docs/SECURITY.md)
    sandbox_skips_approval: bool = False
    #: names of environment variables a sandboxed command gets beyond the allow list (PATH, HOME, the
    #: locale…; agent/sandbox.py); a secret-named one is refused here and never passed
    sandbox_env: tuple[str, ...] = ()
    #: who asks before a tool acts (agent/approval.py): "ask" (shell, python and every write ask first),
    #: "edits" (writes in the workspace run, except to files this kernel imports; shell and python ask),
    #: "never" (nothing asks)
    approval: str = field(default="ask", metadata={"choices": ("ask", "edits", "never")})
    #: how long a call waits for an answer; with no one to answer (a headless run) it is then denied
    approval_timeout_ms: int = _num(300_000, 100, 86_400_000, unit="of milliseconds")
    #: the only tools offered (None: every tool the switches above allow); a small model does better
    #: with few. Names from :data:`TOOL_NAMES` or an MCP server's ``mcp__<server>__<tool>``; another
    #: name is a ConfigError at load
    enabled: tuple[str, ...] | None = None
    #: tools never offered, whatever ``enabled`` says
    disabled: tuple[str, ...] = ()

    def offers(self, name: str) -> bool:
        """Whether the allow list (``enabled``, ``disabled``) lets the model see tool ``name``."""
        return (self.enabled is None or name in self.enabled) and name not in self.disabled


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """Bounds on one turn, so a model that loops cannot run forever or bill without end."""

    #: inferences in one turn; the turn ends with a clear message at the bound
    max_steps_per_turn: int = _num(50, 1, 10_000, unit="of model steps")
    #: how often one tool call with the same arguments may run in one turn, with no state-changing
    #: call in between
    max_repeated_tool_calls: int = _num(3, 1, 1_000, unit="of runs")
    #: tokens of standing instructions (~/.soba/AGENTS.md, the project's AGENTS.md or CLAUDE.md) in
    #: the system prompt, all files together; over it they are clipped with a marker. 0: none loaded
    instructions_max_tokens: int = _num(4_000, 0, 1_000_000, unit="of tokens")


@dataclass(frozen=True, slots=True)
class MemoryConfig:
    """Project Memory: an explicit, validated, non-degraded compact may mirror its capsule."""

    mirror_explicit_compacts: bool = False


@dataclass(frozen=True, slots=True)
class NotebookConfig:
    """The notebook layer. ``share_cell_history``: the next turn starts with a note of the cells the
    user ran since the last one; ``None`` (the default) means on in a notebook, off in terminal IPython."""

    share_cell_history: bool | None = None


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
    agent: AgentConfig = field(default_factory=AgentConfig)
    notebook: NotebookConfig = field(default_factory=NotebookConfig)
    ui: UiConfig = field(default_factory=UiConfig)
    #: the MCP servers to start (mcp_config.py); a later layer's server replaces one of the same name
    mcp_servers: tuple[McpServerConfig, ...] = ()
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

    def field_bounds(self, dotted: str) -> Bounds | None:
        """The declared rule of a numeric key such as ``model.contextWindow`` (None for others)."""
        section, _, key = dotted.partition(".")
        name = _known(section).get(key) if section in _SECTIONS else None
        return _FIELDS[section][name].metadata.get("bounds") if name else None


_SECTIONS: dict[str, type] = {"compaction": CompactionConfig, "model": ModelConfig, "tools": ToolsConfig,
                              "memory": MemoryConfig, "agent": AgentConfig, "notebook": NotebookConfig,
                              "ui": UiConfig}
_FIELDS = {name: {f.name: f for f in fields(cls)} for name, cls in _SECTIONS.items()}
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SECRET_KEYS = {"apikey", "api_key", "key", "token", "accesstoken", "secret", "password", "authorization"}


def _known(section: str) -> dict[str, str]:
    """camelCase file key -> dataclass field name."""
    return {_camel(f.name): f.name for f in fields(_SECTIONS[section])}


def _warn_unknown(source: str, key: str, candidates: list[str], stacklevel: int = 4) -> None:
    near = difflib.get_close_matches(key.split(".")[-1], candidates, n=1, cutoff=0.5)
    hint = f"; did you mean {near[0]!r}?" if near else f"; known keys: {', '.join(sorted(candidates))}"
    warnings.warn(f"{source}: unknown config key {key!r} is ignored{hint}", ConfigWarning, stacklevel=stacklevel)


#: choice keys where ``true`` / ``false`` stand for one of the choices
_BOOLEAN_CHOICES = {"stream": ("always", "never"), "vision": ("on", "off")}


def _check_value(source: str, dotted: str, name: str, value: Any, default: Any,
                 bounds: Bounds | None = None, choices: tuple[str, ...] | None = None) -> Any:
    def bad(allowed: str) -> ConfigError:
        return ConfigError(f"{source}: {dotted} = {value!r} is not allowed: {allowed}", source=source,
                           key=dotted, value=value)

    if name == "share_cell_history":  # true, false, or null for "automatic"
        if value is not None and not isinstance(value, bool):
            raise bad("expected true, false or null (on in notebooks, off in terminal IPython)")
        return value
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise bad("expected true or false")
        return value
    if name in ("enabled", "disabled"):  # tools.enabled / tools.disabled: tool names
        return None if value is None and default is None else _tool_names(value, bad)
    if isinstance(default, tuple):  # tools.sandboxEnv: variable names
        return _variable_names(value, bad)
    if bounds is not None:
        return _check_number(value, bounds, optional=default is None, bad=bad)
    if choices is not None:
        if name in _BOOLEAN_CHOICES and (value is True or value is False):  # true / false read naturally
            value = _BOOLEAN_CHOICES[name][0 if value else 1]
        if value not in choices:
            raise bad(f"expected one of {', '.join(choices)}")
        return value
    # strings (some optional)
    if value is None and default is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise bad("expected a non-empty string")
    return value


def _variable_names(value: Any, bad: Any) -> tuple[str, ...]:
    """A list of environment variable names, none of them one the scrubber calls secret."""
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise bad('expected a list of environment variable names, e.g. ["VIRTUAL_ENV", "PGHOST"]')
    for name in value:
        if not _VARIABLE_NAME.fullmatch(name):
            raise bad(f"{name!r} is not an environment variable name (letters, digits and _, not first a digit)")
        if names_a_secret(name):
            raise bad(f"{name} is a secret's name, and secret variables are never passed into the sandbox")
    return tuple(dict.fromkeys(value))


def _tool_names(value: Any, bad: Any) -> tuple[str, ...]:
    """A list of tool names: built-in ones (:data:`TOOL_NAMES`) or an MCP server's
    (``mcp__<server>__<tool>``, which servers offer is known only once they run), each named if unknown."""
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise bad('expected a list of tool names, e.g. ["read_file", "list_files", "grep"]')
    for name in value:
        if name.startswith("mcp__") and not _MCP_TOOL_NAME.fullmatch(name):
            raise bad(f"{name!r} is not an MCP tool name: expected mcp__<server>__<tool> (letters, digits, _ and -, "
                      f"at most 64 characters)")
        if name not in TOOL_NAMES and not name.startswith("mcp__"):
            near = difflib.get_close_matches(name, TOOL_NAMES, n=1, cutoff=0.6)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise bad(f"{name!r} is not a tool; {hint}known tools: {', '.join(TOOL_NAMES)}, "
                      f"or an MCP server's as mcp__<server>__<tool>")
    return tuple(dict.fromkeys(value))


def _check_number(value: Any, b: Bounds, *, optional: bool, bad: Any) -> Any:
    """``value`` checked against its field's declared :class:`Bounds` (never guessed from the name)."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad(f"expected {b.describe()}")
    if not math.isfinite(value):
        raise bad(f"expected a finite number: {b.describe()}")
    if b.whole and value != int(value):
        raise bad(f"expected {b.describe()}")
    too_low = value <= b.low if b.open_low else value < b.low
    if too_low or value > b.high:
        if b.ratio:
            rng = "greater than 0 and at most 1" if b.open_low else "from 0 to 1"
            raise bad(f"a ratio must be {rng}")
        if too_low and b.low == 0:
            raise bad("must be greater than 0" if b.open_low else "must not be negative")
        raise bad(f"must be {b.describe()}")
    return int(value) if b.whole else float(value)


def _workspace(source: str, dotted: str, value: str, base: Path | None) -> str:
    """``tools.workspace`` with ``~`` and ``$VARIABLE`` expanded; with ``base`` (the project
    directory, where a relative workspace starts) it must name an existing directory."""
    expanded = os.path.expanduser(os.path.expandvars(value))
    if base is not None:
        where = base / expanded  # an absolute ``expanded`` replaces ``base``
        if not where.is_dir():
            shown = f" ({where})" if str(where) != value else ""
            raise ConfigError(f"{source}: {dotted} = {value!r} is not allowed: the directory{shown} does not "
                              f"exist (~ and $VARIABLES are expanded; a relative path starts at the project "
                              f"directory {base})", source=source, key=dotted, value=value)
    return expanded


def _section_changes(section: str, values: Mapping[str, Any], source: str, *, project_layer: bool = False,
                     base: Path | None = None) -> dict[str, Any]:
    """One section's settings from a layer, checked: field name -> value (the one place a setting's
    file spelling is read and its value validated)."""
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
            _warn_unknown(source, dotted, list(known), stacklevel=5)
            continue
        if name == "allow_broad_workspace" and project_layer:
            warnings.warn(f"{source}: {dotted} is ignored here: a project's own config cannot widen the "
                          f"workspace; set it in ~/.soba/config.json", ConfigWarning, stacklevel=4)
            continue
        spec = _FIELDS[section][name]
        changes[name] = _check_value(source, dotted, name, value, spec.default, spec.metadata.get("bounds"),
                                     spec.metadata.get("choices"))
        if section == "tools" and name == "workspace":
            changes[name] = _workspace(source, dotted, changes[name], base)
        if section == "tools" and name == "sandbox" and value == "bwrap" and shutil.which("bwrap") is None:
            raise ConfigError(f'{source}: {dotted} is "bwrap" but bwrap is not installed (not on PATH): '
                              f"apt-get install bubblewrap, or set it to \"none\" to run shell commands "
                              f"unsandboxed", source=source, key=dotted, value=value)
    return changes


def read_model_block(block: Mapping[str, Any], source: str = "model block") -> ModelConfig:
    """A ``model`` block (the file's camelCase keys) as a :class:`ModelConfig`, checked as
    :func:`load_config` checks it; keys it does not name keep their defaults."""
    if not isinstance(block, Mapping):
        raise ConfigError(f"{source}: model must be an object of settings, got {block!r}", source=source,
                          key="model", value=block)
    return replace(ModelConfig(), **_section_changes("model", block, source))


def _merge(config: SobaConfig, layer: Mapping[str, Any], source: str, *, project_layer: bool = False,
           base: Path | None = None) -> SobaConfig:
    if not isinstance(layer, Mapping):
        raise ConfigError(f"{source}: the config must be a JSON object, got {type(layer).__name__}",
                          source=source)
    sources = dict(config.sources)
    sections = {name: getattr(config, name) for name in _SECTIONS}
    servers = {server.name: server for server in config.mcp_servers}
    for section, values in layer.items():
        if section == "mcpServers":
            for server in parse_mcp_servers(source, values):
                servers[server.name] = server
                sources[f"mcpServers.{server.name}"] = source
            continue
        if section not in _SECTIONS:
            _warn_unknown(source, section, list(_SECTIONS))
            continue
        if not isinstance(values, Mapping):
            raise ConfigError(f"{source}: {section} must be an object of settings, got {values!r}",
                              source=source, key=section, value=values)
        changes = _section_changes(section, values, source, project_layer=project_layer, base=base)
        sources.update({f"{section}.{_camel(name)}": source for name in changes})
        sections[section] = replace(sections[section], **changes)
    merged = SobaConfig(**sections, mcp_servers=tuple(servers.values()), sources=sources)
    _check_consistency(merged)
    return merged


#: Keys a running session cannot take over: they decide which model answers, where the files are, or
#: what the session was opened with. A change to one applies after ``%soba --new``; every other key
#: applies at the next turn.
RESTART_KEYS = frozenset({"model.provider", "model.model", "model.baseUrl", "model.apiKeyEnv",
                          "model.compactionModel", "model.requestTimeoutMs", "model.idleTimeoutMs",
                          "model.toolProtocol",
                          "tools.workspace", "tools.allowBroadWorkspace", "memory.mirrorExplicitCompacts"})


@dataclass(frozen=True, slots=True)
class ConfigEdit:
    """What changed between the running config and the files: ``applied`` now, ``deferred`` to a new session.

    Both map a dotted key to ``(old, new)``; ``config`` is the running config with ``applied`` taken over.
    """

    config: SobaConfig
    applied: Mapping[str, tuple[Any, Any]]
    deferred: Mapping[str, tuple[Any, Any]]


def config_edit(running: SobaConfig, fresh: SobaConfig) -> ConfigEdit:
    """Split the differences between ``running`` and ``fresh`` into keys to apply now and at restart."""
    old, new = running.to_json(), fresh.to_json()
    applied: dict[str, tuple[Any, Any]] = {}
    deferred: dict[str, tuple[Any, Any]] = {}
    sections = {name: getattr(running, name) for name in _SECTIONS}
    sources = dict(running.sources)
    for section, block in new.items():
        known = _known(section)
        for key, value in block.items():
            before = old[section].get(key)
            if before == value:
                continue
            dotted = f"{section}.{key}"
            if dotted in RESTART_KEYS:
                deferred[dotted] = (before, value)
                continue
            applied[dotted] = (before, value)
            sections[section] = replace(sections[section], **{known[key]: getattr(getattr(fresh, section),
                                                                                  known[key])})
            sources[dotted] = fresh.sources.get(dotted, "defaults")
    merged = SobaConfig(**sections, mcp_servers=running.mcp_servers, sources=sources)  # servers start with the agent
    _check_consistency(merged)
    return ConfigEdit(merged, applied, deferred)


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


def _read_layer(path: Path) -> tuple[Any, bytes] | None:
    """The parsed JSON of one config file (any shape: :func:`_merge` checks it) and its bytes (read
    once, so the content trusted is the content used), None when absent."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file ({exc.strerror})", source=str(path)) from None
    try:
        return json.loads(data.decode("utf-8")), data
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a usable config: it is not UTF-8 text", source=str(path)) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg})", source=str(path)) \
            from None
    except RecursionError:
        raise ConfigError(f"{path}: not a usable config: its JSON is nested too deeply", source=str(path)) from None


def load_config(path: str | os.PathLike[str] | None = None, *, overrides: Mapping[str, Any] | None = None,
                home: str | os.PathLike[str] | None = None,
                project_dir: str | os.PathLike[str] | None = None) -> SobaConfig:
    """Merge defaults < ``~/.soba/config.json`` < project config (or ``path``) < ``overrides``.

    ``overrides`` uses the file's shape: ``{"compaction": {"auto": False}}``. A ``tools.workspace``
    that is not an existing directory (relative to ``project_dir``, default: the current one) is
    a :class:`ConfigError` naming the layer that set it.
    """
    config = SobaConfig()
    _check_consistency(config)
    home_dir = Path(home) if home is not None else Path.home()
    base = Path(project_dir or ".").absolute()
    project_file = Path(path) if path is not None else Path(project_dir or ".") / ".soba" / "config.json"
    if path is not None and not project_file.exists():
        raise ConfigError(f"{project_file}: no such config file", source=str(project_file))
    for file, is_project in ((home_dir / ".soba" / "config.json", False), (project_file, True)):
        read = _read_layer(file)
        if read is None:
            continue
        layer, data = read
        if is_project:
            report = TrustReport(file, check_trust(file, data, home_dir), _trust_settings(layer))
            if not report.honoured:
                layer = _without_trusted_keys(layer)
                warnings.warn(report.notice(), UntrustedConfigWarning, stacklevel=2)
        config = _merge(config, layer, str(file), project_layer=is_project, base=base)
    if overrides:
        config = _merge(config, overrides, "arguments", base=base)
    return config


@dataclass(frozen=True, slots=True)
class TrustReport:
    """What trust decides for one project config: the file, whether its content is trusted, and
    the settings in it that need trust, as ``(dotted key, value)`` in the file's order."""

    file: Path  # as the project names it (.soba/config.json); ``trust.file`` is its resolved path
    trust: ProjectTrust
    settings: tuple[tuple[str, Any], ...]

    @property
    def honoured(self) -> bool:
        """Whether the settings that need trust apply: the file is trusted, or holds none of them."""
        return self.trust.trusted or not self.settings

    def notice(self) -> str:
        """The one line a user sees when settings are ignored: which, why, and how to trust."""
        keys = ", ".join(key for key, _ in self.settings)
        why = "it changed since you trusted it, so these are ignored until you trust it again" \
            if self.trust.state == "changed" else "ignored until you trust this project's config"
        problem = f" ({self.trust.problem})" if self.trust.problem else ""
        return f"{self.file} (this project): {why}: {keys} — review the file, then run %soba trust{problem}"


def _canonical(section: str, key: str) -> str | None:
    """A file key's dotted camelCase name (``tools.allow_shell`` -> ``tools.allowShell``), None if unknown."""
    known = _known(section)
    name = known.get(key) or (key if key in known.values() else None)
    return f"{section}.{_camel(name)}" if name else None


def _trust_settings(layer: Any) -> tuple[tuple[str, Any], ...]:
    """The entries of a parsed project config that need trust, ``(dotted, value)`` in the file's
    order. A malformed layer yields none: :func:`_merge` says what is wrong with it."""
    found: list[tuple[str, Any]] = []
    if not isinstance(layer, Mapping):
        return ()
    for section, values in layer.items():
        if needs_trust(str(section)):
            found.append((str(section), values))
        elif section in _SECTIONS and isinstance(values, Mapping):
            found.extend((dotted, value) for key, value in values.items()
                         if needs_trust(dotted := _canonical(section, key) or ""))
    return tuple(found)


def _without_trusted_keys(layer: Mapping[str, Any]) -> dict[str, Any]:
    """``layer`` without the settings that need trust (a new mapping; the parsed file is not changed)."""
    kept: dict[str, Any] = {}
    for section, values in layer.items():
        if needs_trust(str(section)):
            continue
        if section in _SECTIONS and isinstance(values, Mapping):
            values = {k: v for k, v in values.items() if not needs_trust(_canonical(section, k) or "")}
        kept[section] = values
    return kept


def project_trust(project_dir: str | os.PathLike[str] | None = None, *,
                  home: str | os.PathLike[str] | None = None) -> TrustReport | None:
    """The trust of the project's ``.soba/config.json`` (None when there is none): for ``%soba trust``
    and ``%soba status``. A config that is not valid JSON is a :class:`ConfigError`."""
    file = Path(project_dir or ".") / ".soba" / "config.json"
    read = _read_layer(file)
    if read is None:
        return None
    layer, data = read
    return TrustReport(file, check_trust(file, data, Path(home) if home is not None else Path.home()),
                       _trust_settings(layer))
