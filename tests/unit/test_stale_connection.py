"""A pooled connection the server had already closed (``providers/clients.ReconnectOnce``).

llama-server closes its connection after a streamed reply; when the pool hands that connection to
the next request before the close arrives, the request is written and the server's side is gone:
"Server disconnected without sending a response". In 6 of 30 tries against a real llama-server
the ``/tokenize`` after a streamed chat reply failed this way (and, in the fresh-clone CI of
``9d79e29``, left a capsule without the server's count, and turned the count off for the session).

The loopback server here produces that shape every time: it answers the first request on each
connection with keep-alive, then closes the connection when the next request on it arrives,
without a byte of answer. The real-server check of the same path is
``tests/realmodel/test_realmodel_counts.py``'s capsule count on llama-server.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from soba_notebook.providers.base import ModelRequest, StreamEvent
from soba_notebook.providers.clients import ClientCache
from soba_notebook.providers.openai import OpenAIChatProvider

COUNT = 161


class OneAnswerPerConnection:
    """An HTTP/1.1 server that answers one request per connection and silently drops the next."""

    def __init__(self) -> None:
        self.connections = 0
        self.answered: list[str] = []
        self.dropped: list[str] = []
        self._handlers: set[asyncio.Task[None]] = set()

    async def _read_request(self, reader: asyncio.StreamReader) -> str | None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        length = next((int(v) for k, _, v in (line.partition(": ") for line in lines[1:])
                       if k.lower() == "content-length"), 0)
        if length:
            await reader.readexactly(length)
        return lines[0].split(" ")[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            path = await self._read_request(reader)
            if path is None:
                return
            self.answered.append(path)
            body = json.dumps(self.answer(path)).encode()
            status = b"200 OK" if path in ("/tokenize", "/v1/chat/completions") else b"404 Not Found"
            writer.write(b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\ncontent-length: "
                         + str(len(body)).encode() + b"\r\nconnection: keep-alive\r\n\r\n" + body)
            await writer.drain()
            # the next request on this connection is read, then the connection closes unanswered
            self.dropped.append(await self._read_request(reader) or "")
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @staticmethod
    def answer(path: str) -> dict[str, object]:
        if path == "/tokenize":
            return {"tokens": list(range(COUNT))}
        if path == "/v1/chat/completions":
            return {"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13}}
        return {"error": "not found"}

    @asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.close()
            # the client has closed its connections: each handler ends on their end of file
            await asyncio.wait_for(asyncio.gather(*self._handlers, return_exceptions=True), 10)


def test_the_loopback_server_reproduces_the_closed_pooled_connection_for_a_plain_client() -> None:
    # the shape is real: without ReconnectOnce the second request on the pooled connection fails
    fake = OneAnswerPerConnection()

    async def scenario() -> None:
        async with fake.running() as root, httpx.AsyncClient(trust_env=False) as client:
            assert (await client.post(f"{root}/tokenize", json={"content": "a"})).status_code == 200
            with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
                await client.post(f"{root}/tokenize", json={"content": "b"})

    asyncio.run(scenario())


def test_a_request_on_a_connection_the_server_closed_is_sent_once_more_on_a_new_one() -> None:
    fake = OneAnswerPerConnection()

    async def scenario() -> list[int]:
        async with fake.running() as root:
            cache = ClientCache(base_url=root, idle_timeout=10)
            try:
                client = cache.get()
                return [(await client.post(f"{root}/tokenize", json={"content": str(n)})).status_code
                        for n in range(3)]
            finally:
                await cache.aclose()

    assert asyncio.run(scenario()) == [200, 200, 200]
    assert fake.connections == 3 and len(fake.dropped) >= 2, (fake.connections, fake.dropped)
    assert fake.answered == ["/tokenize"] * 3, "each request answered exactly once"


def test_a_chat_reply_then_a_count_on_the_connection_the_server_closed_costs_no_retry_and_counts() -> None:
    fake = OneAnswerPerConnection()

    async def scenario() -> tuple[list[StreamEvent], int | None, bool | None]:
        async with fake.running() as root:
            provider = OpenAIChatProvider("m", base_url=f"{root}/v1", stream="never")
            # what the probe of a llama-server learns (this server has no /props to probe)
            provider.quirks.probed = provider.quirks.renders_on_request = True
            events: list[StreamEvent] = []
            try:
                request = ModelRequest(model="m", system="", messages=({"role": "user", "content": "hi"},),
                                       max_output_tokens=4)
                await provider.complete(request, on_event=events.append)
                await provider.complete(request, on_event=events.append)
                counted = await provider.count_text_tokens("a capsule's text")
            finally:
                await provider.aclose()
            return events, counted, provider.quirks.counts_text

    events, counted, counts_text = asyncio.run(scenario())
    assert [e for e in events if e.kind == "retry"] == [], "no retry, no back-off, nothing for the user to read"
    assert counted == COUNT and counts_text is True
    assert fake.answered == ["/v1/chat/completions", "/v1/chat/completions", "/tokenize"], fake.answered
    assert fake.dropped[:2] == ["/v1/chat/completions", "/tokenize"], fake.dropped


def test_a_count_whose_connection_fails_returns_none_this_time_and_the_server_is_asked_again() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if len(calls) == 1:
            raise httpx.ReadTimeout("the server is busy", request=request)
        return httpx.Response(200, json={"tokens": list(range(COUNT))})

    async def scenario() -> tuple[int | None, bool | None, int | None]:
        provider = OpenAIChatProvider("m", base_url="http://127.0.0.1:9/v1", transport=httpx.MockTransport(handler))
        provider.quirks.probed = provider.quirks.renders_on_request = True
        try:
            first = await provider.count_text_tokens("text")
            after_failure = provider.quirks.counts_text
            return first, after_failure, await provider.count_text_tokens("text")
        finally:
            await provider.aclose()

    first, after_failure, second = asyncio.run(scenario())
    assert first is None and after_failure is None, "a failed connection says nothing of the endpoint"
    assert second == COUNT and calls == ["/tokenize", "/tokenize"]
