"""What the agent may ask a provider beyond ``complete``: its capabilities, declared with defaults.

:class:`~soba_notebook.providers.base.Provider` is what a provider must have (``name``, ``label``,
``offline``, ``complete``, ``aclose``: docs/API.md). Every other question the agent and the notebook
ask a provider — what its server renders, counts and escapes, what it learned — is declared here
once, with the answer a provider that knows nothing more gives:

* :class:`ProviderCapabilities`, a base class holding those defaults. The HTTP providers
  (``RemoteProvider``) and the offline model inherit it and override what they know;
* :class:`CapableProvider`, the protocol of both together: the whole contract, what the agent holds;
* :func:`capable`, the one edge where a provider written against the short protocol (a user's own,
  or a test's wrapper) is completed: a capability it has is used, any other is the default.

So the agent and the notebook call capabilities directly instead of probing with ``getattr``.

The two exact counts are ``None`` (not a method) when a provider cannot count at all: the agent
then asks nothing and records nothing, where a provider that can ask its server but was not
answered records why (``agent/exact_count.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from .base import ModelRequest, Provider, ToolSpec

__all__ = ["CapableProvider", "CountRequest", "CountText", "MessageForm", "ProviderCapabilities", "capable"]

#: The server's exact prompt count of a request, ``None`` when it did not count it.
CountRequest = Callable[[ModelRequest], Awaitable[int | None]]
#: The server's token count of a text inside a prompt, ``None`` when it did not count it.
CountText = Callable[[str], Awaitable[int | None]]
#: How a stored message is sent on the wire, for the budget to count it in that form.
MessageForm = Callable[[Mapping[str, Any]], Mapping[str, Any]]


class ProviderCapabilities:
    """The capabilities with the answers of a provider that knows nothing of its server."""

    __slots__ = ()

    #: can the server count a whole request exactly without generating (``None``: never asked)
    count_request_tokens: CountRequest | None = None
    #: can the server count a text as its template puts it in a prompt (``None``: never asked)
    count_text_tokens: CountText | None = None
    #: one line per thing the user should know about this provider's server (``%soba status``)
    warnings: Sequence[str] = ()
    #: where the provider sends requests (prices depend on it); ``None``: nowhere (the offline model)
    base_url: str | None = None

    async def prepare(self) -> None:
        """Learn what the server is before the first request is sized (nothing to learn here)."""

    def sent_system(self, system: str, tools: tuple[ToolSpec, ...]) -> str:
        """The system prompt as sent for a request with ``tools`` (here: as given)."""
        return system

    @property
    def message_form(self) -> MessageForm | None:
        """How a stored message is sent, for the budget to count it so; ``None``: as stored."""
        return None

    @property
    def renders_tools(self) -> bool:
        """Whether the tool definitions reach the model's prompt (unrendered ones are not counted)."""
        return True

    @property
    def rendering_hint(self) -> tuple[bool, float] | None:
        """``(tool results rendered, extra tokens per '"' in call arguments)`` where the server's
        template is known (``agent/rendering.py``); ``None``: nothing known."""
        return None

    @property
    def escapes_text(self) -> bool:
        """Whether the server's template HTML-escapes the text it renders."""
        return False

    @property
    def effective_context_window(self) -> int | None:
        """The context window the provider knows its server has; ``None``: it knows none."""
        return None

    @property
    def accepts_images(self) -> bool:
        """Whether the model takes images (``model.vision`` overrides it); else each becomes its description."""
        return False

    @property
    def image_rule(self) -> str:
        """How the server counts an image's tokens (``image_tokens.py``): ``"openai"`` or ``"anthropic"``;
        any other name counts the larger of the two."""
        return "unknown"


class CapableProvider(Provider, Protocol):
    """A provider with every capability answered: what the agent holds (see :func:`capable`)."""

    @property
    def count_request_tokens(self) -> CountRequest | None: ...

    @property
    def count_text_tokens(self) -> CountText | None: ...

    @property
    def warnings(self) -> Sequence[str]: ...

    @property
    def base_url(self) -> str | None: ...

    async def prepare(self) -> None: ...

    def sent_system(self, system: str, tools: tuple[ToolSpec, ...]) -> str: ...

    @property
    def message_form(self) -> MessageForm | None: ...

    @property
    def renders_tools(self) -> bool: ...

    @property
    def rendering_hint(self) -> tuple[bool, float] | None: ...

    @property
    def escapes_text(self) -> bool: ...

    @property
    def effective_context_window(self) -> int | None: ...

    @property
    def accepts_images(self) -> bool: ...

    @property
    def image_rule(self) -> str: ...


#: The capabilities a short-protocol provider may still have: read from it when it does.
_CAPABILITIES = ("count_request_tokens", "count_text_tokens", "warnings", "base_url", "prepare", "sent_system",
                 "message_form", "renders_tools", "rendering_hint", "escapes_text", "effective_context_window",
                 "accepts_images", "image_rule")


class _Completed(ProviderCapabilities):
    """A short-protocol provider with each capability it lacks answered by the default."""

    __slots__ = ("_has", "_inner")

    def __init__(self, inner: Provider) -> None:
        self._inner = inner
        self._has = frozenset(name for name in _CAPABILITIES if hasattr(inner, name))

    def __getattribute__(self, name: str) -> Any:
        if name in _CAPABILITIES and name in object.__getattribute__(self, "_has"):
            return getattr(object.__getattribute__(self, "_inner"), name)
        return object.__getattribute__(self, name)

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def label(self) -> str:
        return self._inner.label

    @property
    def offline(self) -> bool:
        return self._inner.offline

    async def complete(self, request: ModelRequest, **options: Any) -> Any:
        return await self._inner.complete(request, **options)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)  # anything else the wrapped provider has (a test's ``sent``)

    def __repr__(self) -> str:
        return repr(self._inner)


def capable(provider: Provider) -> CapableProvider:
    """``provider`` with every capability answered: itself when it inherits
    :class:`ProviderCapabilities`, else completed with the defaults for what it lacks."""
    if isinstance(provider, ProviderCapabilities):
        return provider
    return _Completed(provider)
