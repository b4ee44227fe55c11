"""Model providers: the interface the agent uses, and its httpx implementations.

``base`` defines the values (:class:`ModelRequest`, :class:`StreamEvent`, :class:`ModelResponse`)
and the :class:`Provider` protocol; ``openai`` and ``anthropic`` speak the two wires on the
skeleton in ``remote`` (key, client, retries, deadlines, silent overflow), which uses ``clients``
(the HTTP client cache), ``retry`` (the retrying request loop), ``failures`` (error
classification and redaction) and ``overflow`` (context-overflow recognition); ``sse`` parses
event streams; ``factory`` builds a provider from the config's ``model`` block, the offline demo
model (:mod:`soba_notebook.demo`, which implements the same interface beside these providers)
included.
"""

from __future__ import annotations

from .anthropic import AnthropicProvider
from .base import ModelRequest, ModelResponse, Provider, StreamEvent, ToolSpec, repair_tool_pairing
from .factory import PROVIDER_NAMES, make_provider
from .openai import OpenAIChatProvider
from .overflow import is_context_overflow

__all__ = [
    "PROVIDER_NAMES",
    "AnthropicProvider",
    "ModelRequest",
    "ModelResponse",
    "OpenAIChatProvider",
    "Provider",
    "StreamEvent",
    "ToolSpec",
    "is_context_overflow",
    "make_provider",
    "repair_tool_pairing",
]
