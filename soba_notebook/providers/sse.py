"""Incremental Server-Sent Events parsing: bytes in, ``(event, data)`` values out.

Both provider wires stream their answers as ``text/event-stream`` (OpenAI-compatible servers use
bare ``data:`` lines, Anthropic names every event with an ``event:`` line). This module owns the
framing and nothing else, so it stays pure and can be tested on hostile inputs: bytes arrive in
arbitrary pieces (a chunk may end in the middle of a line, in the middle of a multi-byte UTF-8
character, or between the ``\\r`` and ``\\n`` of a CRLF), lines may end in ``\\n``, ``\\r\\n`` or
``\\r``, one event may carry several ``data:`` lines, and lines starting with ``:`` are comments
(keep-alives).

The rules follow the WHATWG "event stream interpretation" algorithm, with one documented
leniency: at the end of the stream an event whose terminating blank line never came is still
delivered (:meth:`SSEParser.close`), because some local servers end their last event with a single
newline.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import AsyncGenerator, AsyncIterable, Iterable
from dataclasses import dataclass

__all__ = ["SSEEvent", "SSEParser", "aiter_sse", "parse_sse"]

_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event. ``event`` is ``"message"`` when the stream named none; ``data`` is the
    ``data:`` lines joined by ``\\n``; ``id`` is the last event id seen so far (or ``None``)."""

    event: str
    data: str
    id: str | None = None


class SSEParser:
    """Feed it chunks with :meth:`feed`, get complete events back; call :meth:`close` at the end."""

    __slots__ = ("_buffer", "_data", "_decoder", "_event", "_id", "_skip_lf", "_started")

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""            # text of an unfinished line
        self._skip_lf = False        # the previous chunk ended with "\r": a leading "\n" belongs to it
        self._started = False        # a leading byte-order mark is dropped once
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None

    def feed(self, chunk: bytes | str) -> list[SSEEvent]:
        """Consume one piece of the stream and return the events it completed (maybe none)."""
        text = self._decoder.decode(chunk) if isinstance(chunk, bytes | bytearray) else chunk
        return self._feed_text(text)

    def close(self) -> list[SSEEvent]:
        """End of stream: finish a dangling line and deliver a pending event (see module doc)."""
        events = self._feed_text(self._decoder.decode(b"", final=True))
        if self._buffer:
            line, self._buffer = self._buffer, ""
            event = self._process_line(line)
            if event is not None:
                events.append(event)
        event = self._dispatch()
        if event is not None:
            events.append(event)
        return events

    # -- internals -----------------------------------------------------------------------------
    def _feed_text(self, text: str) -> list[SSEEvent]:
        if not text:
            return []
        if not self._started:
            self._started = True
            if text.startswith("\ufeff"):
                text = text[1:]
        if self._skip_lf:
            self._skip_lf = False
            if text.startswith("\n"):
                text = text[1:]
        events: list[SSEEvent] = []
        start = 0
        for match in _LINE_END.finditer(text):
            line = self._buffer + text[start:match.start()]
            self._buffer = ""
            start = match.end()
            if match.group() == "\r" and start == len(text):
                self._skip_lf = True
            event = self._process_line(line)
            if event is not None:
                events.append(event)
        self._buffer += text[start:]
        return events

    def _process_line(self, line: str) -> SSEEvent | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\x00" not in value:
            self._id = value
        # "retry" and unknown fields are ignored, as the specification says.
        return None

    def _dispatch(self) -> SSEEvent | None:
        data, event = self._data, self._event
        self._data, self._event = [], ""
        if not data:
            return None
        return SSEEvent(event or "message", "\n".join(data), self._id)


def parse_sse(chunks: Iterable[bytes | str]) -> list[SSEEvent]:
    """Parse a whole stream given as pieces (convenient in tests)."""
    parser = SSEParser()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    events.extend(parser.close())
    return events


async def aiter_sse(chunks: AsyncIterable[bytes]) -> AsyncGenerator[SSEEvent, None]:
    """Events from an async byte stream (an ``httpx`` response's ``aiter_bytes()``)."""
    parser = SSEParser()
    async for chunk in chunks:
        for event in parser.feed(chunk):
            yield event
    for event in parser.close():
        yield event
