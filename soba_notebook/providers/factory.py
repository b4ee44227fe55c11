"""Build a :class:`~soba_notebook.providers.base.Provider` from the config's ``model`` block.

The ``model`` block names a wire and where to reach it; secrets never appear in it (DESIGN.md:
"Secrets come from the environment only"), only the *name* of the environment variable holding
the key. Several provider names are aliases of the OpenAI-compatible wire with their usual local
or hosted address, so ``{"provider": "ollama", "model": "qwen2.5-coder"}`` is a complete config.

``provider: scripted`` is the offline demo model of :mod:`soba_notebook.demo`.

Keys read here: ``provider``, ``model``, ``baseUrl``, ``apiKeyEnv``, ``contextWindow``, ``stream``,
``toolProtocol`` (OpenAI-compatible servers only: ``auto``, ``native`` or ``json``),
``requestTimeoutMs`` (the whole-request deadline) and ``idleTimeoutMs`` (no bytes for that long). Other
keys of the block (``maxOutputTokens``…) belong to the request and are ignored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import httpx

# The module, not its class: the demo imports this package's interface (``base``), so whichever of
# the two packages is imported first, ``demo.ScriptedModel`` is looked up only when a model is made.
from soba_notebook.demo import scripted as demo
from soba_notebook.errors import ConfigError

from .anthropic import AnthropicProvider
from .base import Provider
from .openai import OpenAIChatProvider
from .openai_compat import StreamMode
from .remote import DEFAULT_IDLE_TIMEOUT, DEFAULT_REQUEST_TIMEOUT
from .tool_protocol import TOOL_PROTOCOLS, ToolProtocol

__all__ = ["OPENAI_COMPATIBLE", "PROVIDER_NAMES", "OpenAICompatibleDefaults", "make_provider"]


@dataclass(frozen=True, slots=True)
class OpenAICompatibleDefaults:
    """Where an OpenAI-compatible provider alias lives by default, and its key variable."""

    display_name: str
    base_url: str
    api_key_env: str


OPENAI_COMPATIBLE: Mapping[str, OpenAICompatibleDefaults] = {
    "openai": OpenAICompatibleDefaults("OpenAI-compatible", "https://api.openai.com/v1", "OPENAI_API_KEY"),
    "openrouter": OpenAICompatibleDefaults("OpenRouter", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
    "ollama": OpenAICompatibleDefaults("Ollama", "http://127.0.0.1:11434/v1", "OLLAMA_API_KEY"),
    "vllm": OpenAICompatibleDefaults("vLLM", "http://127.0.0.1:8000/v1", "VLLM_API_KEY"),
    "lmstudio": OpenAICompatibleDefaults("LM Studio", "http://127.0.0.1:1234/v1", "LMSTUDIO_API_KEY"),
    "llamacpp": OpenAICompatibleDefaults("llama.cpp", "http://127.0.0.1:8080/v1", "LLAMACPP_API_KEY"),
}

#: Every accepted value of ``model.provider``.
PROVIDER_NAMES: tuple[str, ...] = ("anthropic", *OPENAI_COMPATIBLE, "scripted")


def _optional_str(config: Mapping[str, Any], key: str) -> str | None:
    value = config.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ConfigError(f"model.{key} must be a string, not {value!r}", key=f"model.{key}", value=value)
    return value


def _context_window(config: Mapping[str, Any]) -> int | None:
    value = config.get("contextWindow")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"model.contextWindow must be a positive integer, not {value!r}",
                          key="model.contextWindow", value=value)
    return value


def _seconds(config: Mapping[str, Any], key: str, default: float) -> float:
    """A ``...Ms`` key in seconds (``default`` when absent)."""
    value = config.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"model.{key} must be a positive number of milliseconds, not {value!r}",
                          key=f"model.{key}", value=value)
    return value / 1000


def make_provider(model_config: Mapping[str, Any], *,
                  transport: httpx.AsyncBaseTransport | None = None) -> Provider:
    """The provider the ``model`` block describes. Raises :class:`ConfigError` for an unknown
    provider, a missing model name, a malformed value, or a key written into the config."""
    raw_name = model_config.get("provider", "openai")
    name = str(raw_name).strip().lower().replace("-", "").replace("_", "").replace(".", "")
    if name == "scripted":
        return demo.ScriptedModel()
    if name not in PROVIDER_NAMES:
        raise ConfigError(f"unknown model provider {raw_name!r}; use one of: {', '.join(PROVIDER_NAMES)}",
                          key="model.provider", value=raw_name)
    for secret_key in ("apiKey", "api_key", "key"):
        if model_config.get(secret_key):
            raise ConfigError(f"model.{secret_key} is not allowed: secrets come from the environment only; "
                              "set model.apiKeyEnv to the name of the variable that holds the key",
                              key=f"model.{secret_key}", value="[redacted]")
    model = _optional_str(model_config, "model")
    if model is None:
        raise ConfigError(f"model.model is required for provider {name!r}", key="model.model")
    base_url = _optional_str(model_config, "baseUrl")
    if base_url is not None and not base_url.startswith(("http://", "https://")):
        raise ConfigError(f"model.baseUrl must start with http:// or https://, not {base_url!r}",
                          key="model.baseUrl", value=base_url)
    key_env = _optional_str(model_config, "apiKeyEnv")
    context_window = _context_window(model_config)
    idle_timeout = _seconds(model_config, "idleTimeoutMs", DEFAULT_IDLE_TIMEOUT)
    request_timeout = _seconds(model_config, "requestTimeoutMs", DEFAULT_REQUEST_TIMEOUT)
    if name == "anthropic":
        return AnthropicProvider(model, base_url=base_url or "https://api.anthropic.com",
                                 api_key_env=key_env or "ANTHROPIC_API_KEY", transport=transport,
                                 context_window=context_window, timeout=idle_timeout,
                                 request_timeout=request_timeout)
    defaults = OPENAI_COMPATIBLE[name]
    stream = model_config.get("stream") or "auto"
    if stream not in ("auto", "always", "never"):
        raise ConfigError(f"model.stream must be auto, always or never, not {stream!r}", key="model.stream",
                          value=stream)
    tool_protocol = model_config.get("toolProtocol") or "auto"
    if tool_protocol not in TOOL_PROTOCOLS:
        raise ConfigError(f"model.toolProtocol must be one of {', '.join(TOOL_PROTOCOLS)}, not {tool_protocol!r}",
                          key="model.toolProtocol", value=tool_protocol)
    return OpenAIChatProvider(model, base_url=base_url or defaults.base_url,
                              api_key_env=key_env or defaults.api_key_env, transport=transport,
                              context_window=context_window, display_name=defaults.display_name,
                              stream=cast(StreamMode, stream), timeout=idle_timeout,
                              tool_protocol=cast(ToolProtocol, tool_protocol),
                              request_timeout=request_timeout)
