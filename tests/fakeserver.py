"""A real loopback HTTP server that speaks the OpenAI chat-completions and Anthropic messages
wires, for tests that must not reach the network.

It listens on ``127.0.0.1`` on a free port, in background threads (``ThreadingHTTPServer``,
HTTP/1.1 keep-alive, streamed bodies in chunked transfer encoding exactly as the real APIs
stream them). Tests script it with queues of replies, or a handler that computes replies.

Usage (the ``fake_server`` fixture starts it and stops it after the test)::

    from fakeserver import fake_server_fixture  # noqa: F401  (makes the `fake_server` fixture visible)

    def test_something(fake_server):
        fake_server.openai.enqueue(text="hello", usage={"prompt_tokens": 12, "completion_tokens": 3})
        fake_server.anthropic.enqueue(tool_calls=[{"id": "toolu_1", "name": "ls", "arguments": {}}])
        provider = OpenAIChatProvider("m", base_url=fake_server.openai_base_url)   # .../v1
        provider = AnthropicProvider("m", base_url=fake_server.anthropic_base_url)  # root URL
        ...
        path, headers, body = fake_server.requests[0]      # every request, in arrival order

API:

* ``server.openai`` / ``server.anthropic`` (:class:`OpenAIWire` / :class:`AnthropicWire`):
  ``enqueue(**reply_options)`` a streamed answer; ``enqueue_error(status, body=None, headers=None,
  **shape)`` an error response in that provider's real JSON shape (or ``body`` verbatim, a dict or
  str); ``enqueue_overflow()`` that provider's real context-overflow error; ``reply(**options)``
  builds a :class:`Script` without queueing it (for handlers).
* Reply options, both wires: ``text`` (a str, streamed in pieces of ``text_chunk`` characters,
  or a list of exact deltas), ``thinking``, ``tool_calls`` (``[{"id", "name", "arguments"}]``;
  arguments a dict, or a str sent verbatim), ``split_args`` (piece size, or a list of cut
  positions, for fragmenting argument JSON; default 7), ``usage`` (a dict in the wire's own names;
  ``False`` for none), ``model``, ``error`` (sent mid-stream after the text, then the body ends),
  ``delay`` (seconds between frames), ``headers_delay`` (before the status line), ``chunk_size``
  (re-split the body bytes at arbitrary points), ``hold_open`` (after the frames keep sending
  ``: keep-alive`` comments until the client leaves), ``abort`` (drop the connection after the
  frames, mid-body). OpenAI only: ``finish_reason``, ``interleave`` (interleave fragments of
  parallel calls). Anthropic only: ``stop_reason``, ``ping`` (default True: a ``ping`` event
  after ``message_start``, as the real API sends).
* ``server.enqueue(path_kind, script_or_reply)`` queues a :class:`Script` or a raw :class:`Reply`
  (``path_kind`` is ``"openai"`` or ``"anthropic"``); ``Reply(reset=True)`` answers with a TCP
  reset instead of a response, as a server that crashed on the request does.
* ``server.handler = fn(path, request_json)`` is called when the queue for a wire is empty; it
  returns a :class:`Script`, a :class:`Reply`, or a dict of reply options for the wire the path
  belongs to. With nothing queued and no handler the server answers HTTP 400 "nothing scripted"
  (not retried by the providers, so the test fails fast and says why).
* ``Reply(close_after=True)``: after this reply the connection is dead; a request sent on it is
  counted in ``server.dead_connection_requests`` and answered by closing the connection.
* ``server.requests``: list of :class:`RecordedRequest` ``(path, headers, body)``; headers have
  lower-case names, ``body`` is the parsed JSON. ``server.wait_for_requests(n)`` and
  ``server.wait_for_disconnect()`` block (with a generous timeout) until that happened;
  ``server.disconnects`` counts clients that went away mid-response, ``server.connections_opened``
  the TCP connections accepted (keep-alive reuse keeps it at 1).
* Paths: anything ending in ``/chat/completions`` is the OpenAI wire, anything ending in
  ``/messages`` the Anthropic wire.
"""

from __future__ import annotations

import itertools
import json
import select
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

import pytest

__all__ = [
    "OVERFLOW_BODIES",
    "AnthropicWire",
    "FakeServer",
    "OpenAIWire",
    "RecordedRequest",
    "Reply",
    "Script",
    "fake_server_fixture",
    "split_points",
]

#: Real context-overflow error bodies, by server (status, JSON text).
OVERFLOW_BODIES: dict[str, tuple[int, str]] = {
    "openai": (400, json.dumps({"error": {
        "message": "This model's maximum context length is 128000 tokens. However, your messages resulted in "
                   "131072 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})),
    "anthropic": (400, json.dumps({"type": "error", "error": {
        "type": "invalid_request_error", "message": "prompt is too long: 208425 tokens > 200000 maximum"},
        "request_id": "req_011CFakeOverflow"})),
    "vllm": (400, json.dumps({"object": "error", "message": (
        "This model's maximum context length is 4096 tokens. However, you requested 5120 tokens "
        "(4096 in the messages, 1024 in the completion). Please reduce the length of the messages or "
        "completion."), "type": "BadRequestError", "param": None, "code": 400})),
    "llamacpp": (400, json.dumps({"error": {
        "code": 400, "message": "the request exceeds the available context size, try increasing it",
        "type": "exceed_context_size_error", "n_prompt_tokens": 9000, "n_ctx": 8192}})),
    "ollama": (400, json.dumps({"error": {
        "message": "input length (9000 tokens) is longer than the model's context length (8192 tokens)",
        "type": "api_error", "param": None, "code": None}})),
    "openrouter": (400, json.dumps({"error": {
        "message": "This endpoint's maximum context length is 131072 tokens. However, you requested about "
                   "140000 tokens. Please reduce the length of either one, or use the \"middle-out\" "
                   "transform to compress your prompt automatically.", "code": 400}})),
}


class RecordedRequest(NamedTuple):
    """One request the server received. ``headers`` keys are lower-case."""

    path: str
    headers: dict[str, str]
    body: Any


@dataclass(frozen=True, slots=True)
class Reply:
    """A fully rendered HTTP response: status, headers, and body pieces written one by one."""

    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    frames: tuple[bytes, ...] = ()
    stream: bool = True           # chunked transfer encoding (True) or Content-Length (False)
    delay: float = 0.0            # seconds between frames
    headers_delay: float = 0.0    # seconds before the status line
    chunk_size: int | None = None  # re-split the body bytes into pieces of this many bytes
    hold_open: bool = False
    abort: bool = False
    reset: bool = False           # reset the connection (TCP RST) instead of answering: a crashed server
    #: the server has closed this connection after the reply, without a word: the next request
    #: sent on it gets no answer, just the end of the connection (llama-cpp-python after an error
    #: inside a stream it had answered 200 to). Held until then, so the client cannot see it coming.
    close_after: bool = False


@dataclass(frozen=True, slots=True)
class Script:
    """A reply computed from the request body when it arrives (so it can mirror the request, e.g.
    send the usage chunk only when ``stream_options.include_usage`` asked for it)."""

    render: Callable[[Mapping[str, Any]], Reply]


#: paths only some local servers serve (llama-server's ``/tokenize``, ``/apply-template``;
#: llama-cpp-python's ``/extras/...``): without a route of a test's own, answered 404 like any
#: server without them, never with a scripted model reply
LOCAL_SERVER_EXTRAS = ("/extras/", "/tokenize", "/apply-template")


def split_points(text: str, split: int | Sequence[int] | None) -> list[str]:
    """``text`` cut into pieces: every ``split`` characters, or at the given positions."""
    if not text:
        return []
    if split is None:
        return [text]
    if isinstance(split, int):
        size = max(1, split)
        return [text[i:i + size] for i in range(0, len(text), size)]
    cuts = sorted({c for c in split if 0 < c < len(text)})
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def _compact(value: Any) -> str:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    try:
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate ("\ud83d") goes out as a JSON escape, as real servers send it
        text = json.dumps(value, separators=(",", ":"))
    return text


def _text_pieces(text: str | Sequence[str], size: int) -> list[str]:
    return split_points(text, size) if isinstance(text, str) else [t for t in text if t]


def _estimate_tokens(value: Any) -> int:
    return max(1, len(json.dumps(value, ensure_ascii=False)) // 4)


def _json_reply(status: int, body: Any, headers: Mapping[str, str] | None = None) -> Reply:
    text = body if isinstance(body, str) else json.dumps(body)
    hdrs = {"content-type": "application/json", **dict(headers or {})}
    return Reply(status=status, headers=tuple(hdrs.items()), frames=(text.encode(),), stream=False)


_STREAM_OPTIONS = ("delay", "headers_delay", "chunk_size", "hold_open", "abort")


class OpenAIWire:
    """Scripts for ``POST .../chat/completions`` (see the module docstring for the options)."""

    kind = "openai"

    def __init__(self, server: FakeServer) -> None:
        self._server = server

    def enqueue(self, **options: Any) -> None:
        self._server.enqueue(self.kind, self.reply(**options))

    def enqueue_error(self, status: int, body: Any = None, headers: Mapping[str, str] | None = None, *,
                      message: str = "fake error", type: str = "server_error", code: Any = None) -> None:
        if body is None:
            body = {"error": {"message": message, "type": type, "param": None, "code": code}}
        self._server.enqueue(self.kind, _json_reply(status, body, headers))

    def enqueue_overflow(self, server: str = "openai") -> None:
        status, body = OVERFLOW_BODIES[server]
        self._server.enqueue(self.kind, _json_reply(status, body))

    def reply(self, text: str | Sequence[str] = "", *, thinking: str = "",
              tool_calls: Sequence[Mapping[str, Any]] = (), split_args: int | Sequence[int] | None = 7,
              usage: Mapping[str, Any] | bool | None = None, finish_reason: str | None = None,
              model: str = "gpt-4o-mini-2024-07-18", error: Mapping[str, Any] | None = None,
              text_chunk: int = 5, interleave: bool = False, **stream: Any) -> Script:
        unknown = set(stream) - set(_STREAM_OPTIONS)
        if unknown:
            raise TypeError(f"unknown reply options: {sorted(unknown)}")

        def render(request: Mapping[str, Any]) -> Reply:
            base = {"id": "chatcmpl-fake0001", "object": "chat.completion.chunk", "created": 1_700_000_000,
                    "model": model, "system_fingerprint": "fp_fake"}
            if request.get("stream") is False:
                return self._whole(request, base, text, thinking, tool_calls, usage, finish_reason, error, stream)
            include_usage = bool((request.get("stream_options") or {}).get("include_usage"))

            def chunk(delta: Mapping[str, Any], finish: str | None = None, with_usage: bool = True) -> bytes:
                body = {**base, "choices": [{"index": 0, "delta": dict(delta), "logprobs": None,
                                             "finish_reason": finish}]}
                if include_usage and with_usage:
                    body["usage"] = None
                return f"data: {_compact(body)}\n\n".encode()

            frames = [chunk({"role": "assistant", "content": "", "refusal": None})]
            frames += [chunk({"reasoning_content": piece}) for piece in _text_pieces(thinking, text_chunk)]
            frames += [chunk({"content": piece}) for piece in _text_pieces(text, text_chunk)]
            per_call: list[list[bytes]] = []
            for index, call in enumerate(tool_calls):
                args = call.get("arguments", {})
                args_text = args if isinstance(args, str) else _compact(args)
                first = {"index": index, "id": call.get("id", f"call_fake{index}"), "type": "function",
                         "function": {"name": call["name"], "arguments": ""}}
                pieces = [chunk({"tool_calls": [first]})]
                pieces += [chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                           for piece in split_points(args_text, split_args)]
                per_call.append(pieces)
            if interleave:
                for row in range(max((len(p) for p in per_call), default=0)):
                    frames += [p[row] for p in per_call if row < len(p)]
            else:
                frames += [f for pieces in per_call for f in pieces]
            if error is not None:
                frames.append(f"data: {_compact({'error': dict(error)})}\n\n".encode())
            else:
                finish = finish_reason or ("tool_calls" if tool_calls else "stop")
                frames.append(chunk({}, finish))
                if include_usage and usage is not False:
                    final = {**base, "choices": [], "usage": self._usage(usage, request, text)}
                    frames.append(f"data: {_compact(final)}\n\n".encode())
                frames.append(b"data: [DONE]\n\n")
            return Reply(headers=(("content-type", "text/event-stream; charset=utf-8"),
                                  ("x-request-id", "req_fake")), frames=tuple(frames), **stream)

        return Script(render)

    def _whole(self, request: Mapping[str, Any], base: Mapping[str, Any], text: str | Sequence[str], thinking: str,
               tool_calls: Sequence[Mapping[str, Any]], usage: Mapping[str, Any] | bool | None,
               finish_reason: str | None, error: Mapping[str, Any] | None, stream: Mapping[str, Any]) -> Reply:
        """The non-streamed ``chat.completion`` object a real server sends for ``stream: false``."""
        if error is not None:
            return _json_reply(500, {"error": dict(error)})
        content = text if isinstance(text, str) else "".join(text)
        message: dict[str, Any] = {"role": "assistant", "content": content or None}
        if thinking:
            message["reasoning_content"] = thinking
        if tool_calls:
            message["tool_calls"] = [
                {"id": c.get("id", f"call_fake{i}"), "type": "function",
                 "function": {"name": c["name"], "arguments": c.get("arguments", {}) if isinstance(
                     c.get("arguments"), str) else _compact(c.get("arguments", {}))}}
                for i, c in enumerate(tool_calls)]
        body = {**base, "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "logprobs": None,
                             "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop")}]}
        if usage is not False:
            body["usage"] = self._usage(usage, request, text)
        # a plain reply arrives only when the whole answer is generated: the pacing a stream would
        # have spread over its frames comes before the status line
        pieces = len(_text_pieces(text, 5)) + len(tool_calls) + 1
        wait = float(stream.get("headers_delay", 0.0)) + float(stream.get("delay", 0.0)) * pieces
        return Reply(headers=(("content-type", "application/json"),), frames=(_compact(body).encode(),),
                     stream=False, headers_delay=wait)

    @staticmethod
    def _usage(usage: Mapping[str, Any] | bool | None, request: Mapping[str, Any],
               text: str | Sequence[str]) -> dict[str, Any]:
        given = dict(usage) if isinstance(usage, Mapping) else {}
        # like a real server, the prompt it counts holds the tool definitions too
        tools = _estimate_tokens(request["tools"]) if request.get("tools") else 0
        prompt = int(given.get("prompt_tokens", _estimate_tokens(request.get("messages", [])) + tools))
        completion = int(given.get("completion_tokens", _estimate_tokens(text)))
        cached = int(given.get("cached_tokens", 0))
        out = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
               "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
               "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                             "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}
        out.update({k: v for k, v in given.items() if k not in ("prompt_tokens", "completion_tokens", "cached_tokens")})
        return out


class AnthropicWire:
    """Scripts for ``POST .../v1/messages`` (see the module docstring for the options)."""

    kind = "anthropic"

    def __init__(self, server: FakeServer) -> None:
        self._server = server

    def enqueue(self, **options: Any) -> None:
        self._server.enqueue(self.kind, self.reply(**options))

    def enqueue_error(self, status: int, body: Any = None, headers: Mapping[str, str] | None = None, *,
                      type: str = "api_error", message: str = "fake error") -> None:
        if body is None:
            body = {"type": "error", "error": {"type": type, "message": message}, "request_id": "req_fake"}
        self._server.enqueue(self.kind, _json_reply(status, body, headers))

    def enqueue_overflow(self) -> None:
        status, body = OVERFLOW_BODIES["anthropic"]
        self._server.enqueue(self.kind, _json_reply(status, body))

    def reply(self, text: str | Sequence[str] = "", *, thinking: str = "",
              tool_calls: Sequence[Mapping[str, Any]] = (), split_args: int | Sequence[int] | None = 7,
              usage: Mapping[str, Any] | bool | None = None, stop_reason: str | None = None,
              model: str = "claude-sonnet-4-20250514", error: Mapping[str, Any] | None = None,
              text_chunk: int = 5, ping: bool = True, **stream: Any) -> Script:
        unknown = set(stream) - set(_STREAM_OPTIONS)
        if unknown:
            raise TypeError(f"unknown reply options: {sorted(unknown)}")

        def event(name: str, data: Mapping[str, Any] | str) -> bytes:
            payload = data if isinstance(data, str) else _compact(data)
            return f"event: {name}\ndata: {payload}\n\n".encode()

        def render(request: Mapping[str, Any]) -> Reply:
            given = dict(usage) if isinstance(usage, Mapping) else {}
            start_usage = {
                "input_tokens": int(given.get("input_tokens", _estimate_tokens(request.get("messages", [])))),
                "cache_creation_input_tokens": int(given.get("cache_creation_input_tokens", 0)),
                "cache_read_input_tokens": int(given.get("cache_read_input_tokens", 0)),
                "output_tokens": 1,
            }
            frames = [event("message_start", {"type": "message_start", "message": {
                "id": "msg_fake0001", "type": "message", "role": "assistant", "model": model, "content": [],
                "stop_reason": None, "stop_sequence": None,
                "usage": start_usage if usage is not False else {}}})]
            if ping:
                frames.append(event("ping", '{"type": "ping"}'))
            index = 0
            if thinking:
                frames.append(event("content_block_start", {"type": "content_block_start", "index": index,
                                                            "content_block": {"type": "thinking", "thinking": "",
                                                                              "signature": ""}}))
                frames += [event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                         "delta": {"type": "thinking_delta", "thinking": piece}})
                           for piece in _text_pieces(thinking, text_chunk)]
                frames.append(event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                            "delta": {"type": "signature_delta",
                                                                      "signature": "EqQBCgIYAhIM"}}))
                frames.append(event("content_block_stop", {"type": "content_block_stop", "index": index}))
                index += 1
            pieces = _text_pieces(text, text_chunk)
            if pieces or error is not None:
                frames.append(event("content_block_start", {"type": "content_block_start", "index": index,
                                                            "content_block": {"type": "text", "text": ""}}))
                frames += [event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                         "delta": {"type": "text_delta", "text": piece}})
                           for piece in pieces]
                if error is not None:
                    frames.append(event("error", {"type": "error", "error": dict(error)}))
                    return Reply(headers=(("content-type", "text/event-stream; charset=utf-8"),),
                                 frames=tuple(frames), **stream)
                frames.append(event("content_block_stop", {"type": "content_block_stop", "index": index}))
                index += 1
            for call in tool_calls:
                args = call.get("arguments", {})
                args_text = args if isinstance(args, str) else _compact(args)
                frames.append(event("content_block_start", {
                    "type": "content_block_start", "index": index,
                    "content_block": {"type": "tool_use", "id": call.get("id", f"toolu_fake{index}"),
                                      "name": call["name"], "input": {}}}))
                frames.append(event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                            "delta": {"type": "input_json_delta",
                                                                      "partial_json": ""}}))
                frames += [event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                         "delta": {"type": "input_json_delta",
                                                                   "partial_json": piece}})
                           for piece in split_points(args_text, split_args)]
                frames.append(event("content_block_stop", {"type": "content_block_stop", "index": index}))
                index += 1
            reason = stop_reason or ("tool_use" if tool_calls else "end_turn")
            output = int(given.get("output_tokens", _estimate_tokens(text)))
            frames.append(event("message_delta", {"type": "message_delta",
                                                  "delta": {"stop_reason": reason, "stop_sequence": None},
                                                  "usage": {"output_tokens": output} if usage is not False else {}}))
            frames.append(event("message_stop", {"type": "message_stop"}))
            return Reply(headers=(("content-type", "text/event-stream; charset=utf-8"),
                                  ("request-id", "req_fake")), frames=tuple(frames), **stream)

        return Script(render)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fakeserver/1"
    timeout = 30  # idle keep-alive connections end on their own

    server: _HTTPServer
    _dead = False  # set once a ``close_after`` reply went out on this connection

    def log_message(self, format: str, *args: Any) -> None:  # silence the default stderr logging
        pass

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # frames leave at once
        self.server.owner._track(self.connection, add=True)
        self.server.owner._connection_opened()

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._track(self.connection, add=False)

    def do_GET(self) -> None:
        owner = self.server.owner
        owner.gets.append(self.path)  # kept apart: ``requests`` holds the model requests only
        body = owner.get_routes.get(self.path)
        self._send(_json_reply(200, body) if body is not None else
                   _json_reply(404, {"error": {"message": f"fake server: no GET {self.path}"}}))

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self._dead:  # the server closed this connection after its last reply
            self.close_connection = True
            with self.server.owner._cond:
                self.server.owner.dead_connection_requests += 1
            return
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        owner = self.server.owner
        route = owner.post_routes.get(self.path)
        if route is not None:
            owner.other_posts.append((self.path, body))
            self._send(_json_reply(200, route(body if isinstance(body, Mapping) else {})))
            return
        if self.path.startswith(LOCAL_SERVER_EXTRAS):  # a generic server has none: 404, as a real one answers
            owner.other_posts.append((self.path, body))
            self._send(_json_reply(404, {"detail": "Not Found"}))
            return
        owner._record(RecordedRequest(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        reply = owner._next_reply(self.path, body if isinstance(body, Mapping) else {})
        self._send(reply)

    # -- writing -------------------------------------------------------------------------------
    def _send(self, reply: Reply) -> None:
        owner = self.server.owner
        try:
            if reply.headers_delay and not self._pause(reply.headers_delay):
                return
            if reply.reset:  # SO_LINGER 0: close() sends RST, the client reads ECONNRESET (httpx.ReadError)
                self.close_connection = True
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
                return
            self.send_response(reply.status)
            for name, value in reply.headers:
                self.send_header(name, value)
            if reply.stream:
                self.send_header("transfer-encoding", "chunked")
                self.send_header("cache-control", "no-cache")
            else:
                self.send_header("content-length", str(sum(len(f) for f in reply.frames)))
            self.end_headers()
            self.wfile.flush()
            if not reply.stream:
                self.wfile.write(b"".join(reply.frames))
                self.wfile.flush()
                self._dead = reply.close_after
                return
            pieces: list[bytes] = list(reply.frames)
            if reply.chunk_size:
                data = b"".join(pieces)
                pieces = [data[i:i + reply.chunk_size] for i in range(0, len(data), reply.chunk_size)]
            for i, piece in enumerate(pieces):
                if i and reply.delay and not self._pause(reply.delay):
                    return
                self._chunk(piece)
            if reply.hold_open:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    if not self._pause(reply.delay or 0.05):
                        return
                    self._chunk(b": keep-alive\n\n")
                return
            if reply.abort:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            if reply.close_after:
                self._dead = True
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.close_connection = True
            owner._client_left()
        except OSError:
            self.close_connection = True

    def _chunk(self, piece: bytes) -> None:
        self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        self.wfile.flush()

    def _pause(self, seconds: float) -> bool:
        """Wait ``seconds`` unless the server stops or the client hangs up (False then)."""
        owner = self.server.owner
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            if owner._stopping.is_set():
                self.close_connection = True
                return False
            readable, _, _ = select.select([self.connection], [], [], min(left, 0.02))
            if readable:
                try:
                    data = self.connection.recv(1, socket.MSG_PEEK)
                except OSError:
                    data = b""
                if not data:
                    self.close_connection = True
                    owner._client_left()
                    return False
                time.sleep(min(left, 0.02))  # pipelined bytes: not a hang-up, keep waiting


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: FakeServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):  # a client that hung up: expected in these tests
            return
        super().handle_error(request, client_address)


@dataclass(eq=False)
class FakeServer:
    """The server; see the module docstring. ``start()`` returns ``self``; ``stop()`` is idempotent."""

    handler: Callable[[str, Mapping[str, Any]], Script | Reply | Mapping[str, Any] | None] | None = None
    requests: list[RecordedRequest] = field(default_factory=list)
    disconnects: int = 0
    connections_opened: int = 0
    #: requests sent on a connection after a ``close_after`` reply (never answered)
    dead_connection_requests: int = 0
    #: GET path -> JSON body (a server's ``/props`` or ``/v1/models``); others answer 404
    get_routes: dict[str, Any] = field(default_factory=dict)
    gets: list[str] = field(default_factory=list)
    #: POST path -> a function of the request body giving the JSON reply (llama-server's
    #: ``/apply-template``); these requests are kept in ``other_posts``, not in ``requests``
    post_routes: dict[str, Callable[[Mapping[str, Any]], Any]] = field(default_factory=dict)
    other_posts: list[tuple[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.openai = OpenAIWire(self)
        self.anthropic = AnthropicWire(self)
        self._queues: dict[str, deque[Script | Reply]] = {"openai": deque(), "anthropic": deque()}
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> FakeServer:
        httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fakeserver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        with self._cond:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    # -- scripting -----------------------------------------------------------------------------
    def enqueue(self, kind: str, reply: Script | Reply) -> None:
        with self._cond:
            self._queues[kind].append(reply)

    def pending(self, kind: str) -> int:
        """How many queued replies of a wire have not been served yet."""
        with self._cond:
            return len(self._queues[kind])

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self.requests) >= count, timeout)

    def wait_for_disconnect(self, count: int = 1, timeout: float = 10.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.disconnects >= count, timeout)

    # -- used by the handler threads --------------------------------------------------------------
    def _record(self, request: RecordedRequest) -> None:
        with self._cond:
            self.requests.append(request)
            self._cond.notify_all()

    def _connection_opened(self) -> None:
        with self._cond:
            self.connections_opened += 1

    def _client_left(self) -> None:
        with self._cond:
            self.disconnects += 1
            self._cond.notify_all()

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._cond:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def _next_reply(self, path: str, body: Mapping[str, Any]) -> Reply:
        kind = "openai" if path.rstrip("/").endswith("/chat/completions") else (
            "anthropic" if path.rstrip("/").endswith("/messages") else None)
        if kind is None:
            return _json_reply(404, {"error": {"message": f"fake server: unknown path {path}"}})
        with self._cond:
            queued = self._queues[kind].popleft() if self._queues[kind] else None
        item: Any = queued
        if item is None and self.handler is not None:
            try:
                item = self.handler(path, body)
            except Exception as exc:  # surface handler bugs as a clear, non-retried error
                return _json_reply(400, {"error": {"message": f"fake server: handler raised {exc!r}"}})
        if item is None:
            return _json_reply(400, {"error": {"message": f"fake server: nothing scripted for {path}",
                                               "type": "fake_server_error"}})
        if isinstance(item, Mapping):
            wire = self.openai if kind == "openai" else self.anthropic
            item = wire.reply(**item)
        return item.render(body) if isinstance(item, Script) else item


@pytest.fixture(name="fake_server")
def fake_server_fixture() -> Iterator[FakeServer]:
    """The ``fake_server`` fixture: a started :class:`FakeServer`, stopped after the test.

    (The function has another name so that importing it into a test module, which makes pytest
    see the fixture, does not clash with the ``fake_server`` parameter of the tests.)"""
    server = FakeServer().start()
    try:
        yield server
    finally:
        server.stop()
