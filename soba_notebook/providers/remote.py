"""The skeleton every HTTP provider shares; a wire module adds only its wire format.

:class:`RemoteProvider` owns what the OpenAI-compatible and the Anthropic wires have in common:

* **the key** — looked up at each request (:meth:`RemoteProvider.get_key`): the value given to
  the constructor, else the environment variable the config names (``model.apiKeyEnv``), so a key
  exported after the provider was built is used at the next request. A host that never answers
  without a key gets an :class:`~soba_notebook.errors.AuthError` before any request;
* **the client** (:class:`~soba_notebook.providers.clients.ClientCache`), **retries**
  (:func:`~soba_notebook.providers.retry.stream_with_retries`) and the two **deadlines**: ``timeout``
  is the idle timeout (no bytes for that long, ``model.idleTimeoutMs``), ``request_timeout`` the
  whole-request deadline (``model.requestTimeoutMs``) that covers every attempt, wait and byte of
  one :meth:`~RemoteProvider.complete`;
* **what the server renders and counts** — the capabilities of
  :class:`~soba_notebook.providers.capabilities.ProviderCapabilities`, which a wire that can ask its
  server overrides (the OpenAI-compatible one asks llama-server's ``/props``); every HTTP provider
  has the two exact counts, answering ``None`` where its server cannot count;
* **silent overflow** — a reply whose usage says the provider read more prompt tokens than the
  context window holds is raised as :class:`~soba_notebook.errors.ContextOverflowError` carrying
  that reply in its ``response`` field.

A subclass sets ``name``, ``endpoint``, ``hosts_requiring_key`` and the ``default_*`` values, and
implements :meth:`~RemoteProvider.wire_headers` and :meth:`~RemoteProvider.respond` (build the
body, :meth:`~RemoteProvider.post` it with a stream parser, return the response).
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlsplit

import httpx

from soba_notebook.errors import AuthError, ContextOverflowError

from .base import ModelRequest, ModelResponse, StreamEvent
from .capabilities import ProviderCapabilities
from .clients import ClientCache
from .failures import ErrorContext
from .retry import Deadline, RetryPolicy, stream_with_retries

__all__ = ["DEFAULT_IDLE_TIMEOUT", "DEFAULT_REQUEST_TIMEOUT", "Exchange", "RemoteProvider"]

T = TypeVar("T")

#: Seconds without a byte before a request counts as stalled (``model.idleTimeoutMs``).
DEFAULT_IDLE_TIMEOUT = 120.0
#: Seconds one whole request may take, retries included (``model.requestTimeoutMs``).
DEFAULT_REQUEST_TIMEOUT = 600.0


@dataclass(frozen=True, slots=True)
class Exchange:
    """What one :meth:`RemoteProvider.complete` call hands its wire: how to name errors, the wire's
    headers (key included), where stream events go, and the whole-request deadline."""

    ctx: ErrorContext
    headers: Mapping[str, str]
    on_event: Callable[[StreamEvent], None] | None
    deadline: Deadline | None


class RemoteProvider(ProviderCapabilities):
    """A :class:`~soba_notebook.providers.base.Provider` reached over HTTP (module docstring)."""

    name = ""
    offline = False
    #: where requests go (a declared capability, always known for a remote wire)
    base_url: str
    #: the path of the endpoint under ``base_url``
    endpoint: ClassVar[str] = ""
    #: hosts that never answer without a key: asking them without one is a configuration error
    hosts_requiring_key: ClassVar[frozenset[str]] = frozenset()
    default_base_url: ClassVar[str] = ""
    default_key_env: ClassVar[str] = ""
    default_display_name: ClassVar[str] = ""

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 api_key_env: str | None = None, transport: httpx.AsyncBaseTransport | None = None,
                 timeout: float = DEFAULT_IDLE_TIMEOUT, request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
                 max_retries: int = 4, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 context_window: int | None = None, jitter: Callable[[], float] = random.random,
                 display_name: str | None = None) -> None:
        self.model = model
        self.base_url = (base_url or self.default_base_url).rstrip("/")
        self.api_key_env = api_key_env or self.default_key_env
        self.context_window = context_window
        self.label = f"{display_name or self.default_display_name} · {model} @ {self.base_url}"
        #: the whole-request deadline in seconds (``None``: none)
        self.request_timeout = request_timeout
        self._api_key = api_key
        self._policy = RetryPolicy(max_retries=max(0, max_retries), sleep=sleep, jitter=jitter)
        self._clients = ClientCache(base_url=self.base_url, idle_timeout=timeout, transport=transport)

    def __repr__(self) -> str:
        key = "set" if self.get_key() else "unset"
        return (f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r}, "
                f"api_key_env={self.api_key_env!r}, key={key})")

    @property
    def url(self) -> str:
        return f"{self.base_url}{self.endpoint}"

    @property
    def effective_context_window(self) -> int | None:
        """The window a reply's usage is checked against (a wire may know a smaller one)."""
        return self.context_window

    async def count_request_tokens(self, request: ModelRequest) -> int | None:
        """The server's exact prompt count for ``request`` without generating, where the server
        offers one (a wire that can ask overrides this); ``None``: estimate instead."""
        return None

    async def count_text_tokens(self, text: str) -> int | None:
        """The server's own token count of ``text`` inside a prompt, where it tokenizes on request
        (a wire that can ask overrides this); ``None``: estimate instead."""
        return None

    def get_key(self) -> str | None:
        """The API key: the one given, else the environment variable's value; ``None`` if empty."""
        key = self._api_key if self._api_key is not None else os.environ.get(self.api_key_env)
        return (key.strip() or None) if key else None

    # -- what a wire supplies ----------------------------------------------------------------------
    def wire_headers(self, key: str | None) -> dict[str, str]:
        """The headers of every request on this wire, the key's included when there is one."""
        raise NotImplementedError

    async def respond(self, request: ModelRequest, exchange: Exchange) -> ModelResponse:
        """Send ``request`` (through :meth:`post`) and return the parsed reply."""
        raise NotImplementedError

    # -- the shared skeleton -----------------------------------------------------------------------
    async def complete(self, request: ModelRequest, *,
                       on_event: Callable[[StreamEvent], None] | None = None) -> ModelResponse:
        key = self.get_key()
        ctx = ErrorContext(self.name, self.url, self.api_key_env, key is not None, (key,) if key else ())
        host = (urlsplit(self.base_url).hostname or "").lower()
        if key is None and host in self.hosts_requiring_key:
            raise AuthError(ctx.say(f"no API key for {host}; set the {self.api_key_env} environment variable"))
        deadline = Deadline.start(self.request_timeout) if self.request_timeout else None
        exchange = Exchange(ctx, self.wire_headers(key), on_event, deadline)
        if deadline is None:
            response = await self.respond(request, exchange)
        else:
            scope = asyncio.timeout_at(deadline.at)
            try:
                async with scope:
                    response = await self.respond(request, exchange)
            except TimeoutError:
                if not scope.expired():
                    raise
                raise deadline.error(ctx) from None
        self._check_silent_overflow(response, ctx)
        return response

    async def post(self, exchange: Exchange, body: Mapping[str, Any],
                   consume: Callable[[AsyncIterator[bytes]], Awaitable[T]], *,
                   headers: Mapping[str, str] | None = None,
                   adapt: Callable[[int, str, Mapping[str, Any]], Mapping[str, Any] | None] | None = None) -> T:
        """POST ``body`` to :attr:`url` with retries under the exchange's deadline; ``consume``
        parses the body bytes. ``headers`` are added to the wire's own for this request."""
        return await stream_with_retries(
            self._clients.get(), self.url, headers={**exchange.headers, **(headers or {})}, body=body,
            consume=consume, ctx=exchange.ctx, policy=self._policy, on_event=exchange.on_event, adapt=adapt,
            deadline=exchange.deadline)

    def _check_silent_overflow(self, response: ModelResponse, ctx: ErrorContext) -> None:
        """Raise for a *silent* overflow: the provider answered, but reports having read more prompt
        tokens than the window holds (servers such as Ollama truncate or wrap instead of refusing)."""
        window = self.effective_context_window
        prompt = response.usage.prompt_tokens if response.usage else None
        if window is None or prompt is None or prompt <= window:
            return
        raise ContextOverflowError(ctx.say(
            f"silent context overflow: the provider reports {prompt:,} prompt tokens, more than the "
            f"configured context window of {window:,}"), requested_tokens=prompt, context_limit=window,
            response=response)

    async def aclose(self) -> None:
        await self._clients.aclose()
