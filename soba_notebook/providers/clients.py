"""The HTTP client a provider sends with: one ``httpx.AsyncClient`` per event loop.

An ``AsyncClient``'s pooled connections belong to the loop that opened them, while a provider
object outlives ``asyncio.run`` calls (tests) or moves to the notebook's background loop; this
module owns that bookkeeping, the client's timeouts, the one network-environment rule (proxy
variables are ignored for servers on this machine, where they only ever do harm), and what to do
with a pooled connection the server had already closed (:class:`ReconnectOnce`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import weakref
from urllib.parse import urlsplit

import httpx

__all__ = ["ClientCache", "ReconnectOnce", "is_loopback_url"]

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback_url(url: str) -> bool:
    """True for URLs on this machine (local model servers, the test fake server)."""
    host = (urlsplit(url).hostname or "").lower()
    if host in _LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


#: what httpcore says when a connection closed before a single byte of the response came
_CLOSED_UNANSWERED = "without sending a response"


class ReconnectOnce(httpx.AsyncBaseTransport):
    """Sends a request again, once, when the connection it went out on closed before the server
    answered a single byte: the pooled connection the server had already closed, whose close
    reached this side only after the request was written.

    llama-server closes its connection after a streamed reply, and the pool can hand that
    connection to the next request before the close reaches this side: a ``/tokenize`` would then
    fail ("Server disconnected without sending a response") and a chat request would cost a visible
    retry with a back-off (docs/HISTORY.md). The failed connection has left the pool, so the second
    send opens a new one.
    A second such failure is the caller's (its retries, its error); no other error is retried
    here, and a body that cannot be sent twice (a stream) is not.
    """

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return await self._inner.handle_async_request(request)
        except httpx.RemoteProtocolError as exc:
            if _CLOSED_UNANSWERED not in str(exc) or not isinstance(request.stream, httpx.ByteStream):
                raise
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


class ClientCache:
    """One ``httpx.AsyncClient`` per running event loop.

    ``idle_timeout`` is the longest wait for the next bytes (response headers included): httpx's
    read timeout. The connect timeout is the same, capped at 30 s. When the loop changes, the old
    client is abandoned (it cannot be closed from another loop); :meth:`aclose` closes the current
    one.
    """

    def __init__(self, *, base_url: str, idle_timeout: float,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._timeout = httpx.Timeout(idle_timeout, connect=min(idle_timeout, 30.0))
        self._transport = transport
        self._trust_env = not is_loopback_url(base_url)
        self._client: httpx.AsyncClient | None = None
        self._loop: weakref.ReferenceType[asyncio.AbstractEventLoop] | None = None

    @property
    def idle_timeout(self) -> float:
        read = self._timeout.read
        return float(read) if read is not None else 0.0

    def get(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._client
        if client is None or client.is_closed or self._loop is None or self._loop() is not loop:
            inner = self._transport or httpx.AsyncHTTPTransport(trust_env=self._trust_env)
            client = httpx.AsyncClient(transport=ReconnectOnce(inner), timeout=self._timeout,
                                       trust_env=self._trust_env)
            self._client = client
            self._loop = weakref.ref(loop)
        return client

    async def drop_connections(self) -> None:
        """Close the pooled connections, so the next request opens a fresh one. For a server that
        closes its side of a connection after a reply without saying so (llama-cpp-python after an
        error inside a stream it had already answered 200 to): the pool would hand the next
        request that dead connection, and the server's "disconnected without a response" would
        cost a retry."""
        client = self._client
        if client is None or client.is_closed or self._loop is None or self._loop() is not asyncio.get_running_loop():
            return
        self._client = None
        await client.aclose()

    async def aclose(self) -> None:
        client, self._client, self._loop = self._client, None, None
        if client is not None and not client.is_closed:
            await client.aclose()
