"""Build a :class:`~soba_notebook.providers.base.Provider` from the typed ``model`` config.

:func:`make_provider` takes the :class:`~soba_notebook.config.ModelConfig` that
:func:`~soba_notebook.config.load_config` already checked (types, bounds, choices), so nothing is
validated twice; what is left here is what only a provider knows: which names exist, what a name
aliases (several are the OpenAI-compatible wire with their usual local or hosted address, so
``{"provider": "ollama", "model": "qwen2.5-coder"}`` is a complete block), and that an address is
an http(s) URL. Secrets never appear in the config (DESIGN.md: "Secrets come from the environment
only"), only the *name* of the environment variable holding the key.

A ``model`` block as a mapping (the file's camelCase keys; docs/API.md) is still accepted: it is read
by :func:`~soba_notebook.config.read_model_block`, the one reader of those keys, then built the same way.

``provider: scripted`` is the offline demo model of :mod:`soba_notebook.demo`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import httpx

from soba_notebook.config import ModelConfig, read_model_block

# The module, not its class: the demo imports this package's interface (``base``), so whichever of
# the two packages is imported first, ``demo.ScriptedModel`` is looked up only when a model is made.
from soba_notebook.demo import scripted as demo
from soba_notebook.errors import ConfigError

from .anthropic import AnthropicProvider
from .base import Provider
from .openai import OpenAIChatProvider
from .openai_compat import StreamMode
from .tool_protocol import ToolProtocol

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


def _canonical_name(raw: str) -> str:
    """``Anthropic``, ``llama.cpp``, ``lm-studio``: the provider name as :data:`PROVIDER_NAMES` spells it."""
    name = raw.strip().lower().replace("-", "").replace("_", "").replace(".", "")
    if name not in PROVIDER_NAMES:
        raise ConfigError(f"unknown model provider {raw!r}; use one of: {', '.join(PROVIDER_NAMES)}",
                          key="model.provider", value=raw)
    return name


def make_provider(model_config: ModelConfig | Mapping[str, Any], *,
                  transport: httpx.AsyncBaseTransport | None = None) -> Provider:
    """The provider ``model_config`` describes: a :class:`ModelConfig`, or a ``model`` block mapping
    (read by :func:`~soba_notebook.config.read_model_block`; its window is declared only when the block
    names one). Raises :class:`ConfigError` for an unknown provider, a missing model name, an
    address that is not http(s), or a malformed value or a key written into a block."""
    if isinstance(model_config, ModelConfig):
        return _build(model_config, model_config.context_window, transport)
    block = model_config
    # a block that names no provider has always meant the OpenAI-compatible wire (a config file's
    # default is the offline model: that is ModelConfig's)
    config = read_model_block({"provider": "openai", **block}, source="make_provider")
    if "model" not in block and _canonical_name(config.provider) != "scripted":
        raise ConfigError(f"model.model is required for provider {config.provider!r}", key="model.model")
    return _build(config, config.context_window if "contextWindow" in block else None, transport)


def _build(config: ModelConfig, context_window: int | None, transport: httpx.AsyncBaseTransport | None) -> Provider:
    name = _canonical_name(config.provider)
    if name == "scripted":
        return demo.ScriptedModel()
    base_url = config.base_url
    if base_url is not None and not base_url.startswith(("http://", "https://")):
        raise ConfigError(f"model.baseUrl must start with http:// or https://, not {base_url!r}",
                          key="model.baseUrl", value=base_url)
    idle_timeout, request_timeout = config.idle_timeout_ms / 1000, config.request_timeout_ms / 1000
    if name == "anthropic":
        return AnthropicProvider(config.model, base_url=base_url or "https://api.anthropic.com",
                                 api_key_env=config.api_key_env or "ANTHROPIC_API_KEY", transport=transport,
                                 context_window=context_window, timeout=idle_timeout,
                                 request_timeout=request_timeout)
    defaults = OPENAI_COMPATIBLE[name]
    return OpenAIChatProvider(config.model, base_url=base_url or defaults.base_url,
                              api_key_env=config.api_key_env or defaults.api_key_env, transport=transport,
                              context_window=context_window, display_name=defaults.display_name,
                              stream=cast(StreamMode, config.stream), timeout=idle_timeout,
                              tool_protocol=cast(ToolProtocol, config.tool_protocol),
                              request_timeout=request_timeout)
