"""MCP servers' tools as agent tools: the client sessions, their state, and one tool per server tool.

:class:`McpHub` owns the sessions of the configured servers (``mcpServers``, :mod:`soba_notebook.mcp_config`)
on a thread and event loop of its own: the SDK's sessions live in anyio task groups that must be entered
and left on one loop, while the agent's tool calls come from whichever loop runs the turn (the runtime's
thread in a kernel, ``asyncio.run`` in a script). Each server is one long-lived task that opens the
transport and the session, lists the tools and waits until it is told to stop; a call is scheduled on
that loop and awaited from the caller's.

Each server tool becomes a :class:`~.tools.Tool` named ``mcp__<server>__<tool>`` with the server's JSON
schema, so the registry offers it, its schema is counted in the budget with every other tool's, the
approval gate asks for it like ``shell`` (:mod:`.approval`), and its result goes through the registry's
scrub, clip and spill. A result's text blocks are joined; any other block (an image, audio, a resource)
is described in one line.

Failures never break a turn: a server that cannot start is one line (:meth:`McpHub.notes`, ``%soba mcp``)
and offers no tools; a server that exits mid-call answers that call with ``MCP server X exited: …`` and
its tools leave the registry before the next request. The hub is closed with the agent, and at
interpreter exit, which stops every server process (the SDK's transport terminates the process it
started). A stdio server's processes also carry a ``SOBA_MCP_RUN`` tag registered with
:mod:`.process_reaper`, so they end when the kernel is killed without running its exit hooks.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import re
import tempfile
import threading
import uuid
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from ..config import ToolsConfig
from ..errors import ToolError
from ..mcp_config import McpServerConfig
from ..providers.base import ToolSpec
from . import process_reaper
from .approval import MCP_PREFIX
from .tools import Tool, ToolContext, ToolRegistry, ToolResult

__all__ = ["McpHub", "ServerStatus", "mcp_tool_name", "result_text", "sync_mcp_tools"]

State = Literal["starting", "running", "failed", "exited", "stopped"]
#: Seconds a server has to start and list its tools before it counts as failed.
START_TIMEOUT_S = 30.0
_RUN_VARIABLE = "SOBA_MCP_RUN"
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def mcp_tool_name(server: str, tool: str) -> str:
    return f"{MCP_PREFIX}{server}__{tool}"


@dataclass(frozen=True, slots=True)
class ServerStatus:
    """What ``%soba mcp`` shows of one server: its state, why it failed or exited, its tools."""

    name: str
    state: State
    reason: str = ""
    tools: tuple[str, ...] = ()

    def line(self) -> str:
        why = f": {self.reason}" if self.reason else ""
        tools = f" — tools: {', '.join(self.tools)}" if self.tools else ""
        return f"{self.name}: {self.state}{why}{tools}"


@dataclass(slots=True)
class _Server:
    config: McpServerConfig
    state: State = "starting"
    reason: str = ""
    session: Any = None
    tools: tuple[Tool, ...] = ()
    stop: asyncio.Event | None = None
    stderr: IO[str] | None = None
    #: ``SOBA_MCP_RUN=…`` in the environment of a stdio server's processes: the reaper's handle on them
    tag: bytes = b""
    started: asyncio.Event = field(default_factory=asyncio.Event)

    def status(self) -> ServerStatus:
        return ServerStatus(self.config.name, self.state, self.reason, tuple(t.name for t in self.tools))


def _describe_block(block: Any) -> str:
    """One line for a content block that is not text (an image, audio, a resource)."""
    kind = getattr(block, "type", type(block).__name__)
    mime = getattr(block, "mime_type", None) or getattr(getattr(block, "resource", None), "mime_type", None)
    uri = getattr(block, "uri", None) or getattr(getattr(block, "resource", None), "uri", None)
    data = getattr(block, "data", None)
    size = f", {len(data) * 3 // 4:,} bytes" if isinstance(data, str) else ""
    text = getattr(getattr(block, "resource", None), "text", None)
    if isinstance(text, str):  # an embedded text resource: its text is the content
        return text
    return f"[{kind} content{f' {mime}' if mime else ''}{f' {uri}' if uri else ''}{size}: not shown]"


def result_text(result: Any) -> tuple[str, bool]:
    """A ``CallToolResult`` as the model reads it: text blocks joined, other blocks described, and the
    structured content as JSON when there is nothing else; with whether the server called it an error."""
    parts = [block.text if getattr(block, "type", None) == "text" else _describe_block(block)
             for block in result.content]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts), bool(result.is_error)


def _tail(stream: IO[str] | None) -> str:
    """The last line a server wrote to stderr (why it failed, usually), or ""."""
    if stream is None:
        return ""
    with contextlib.suppress(OSError, ValueError):
        stream.seek(0)
        lines = [line.strip() for line in stream.read()[-4000:].splitlines() if line.strip()]
        return lines[-1][:300] if lines else ""
    return ""


def _error_text(exc: BaseException) -> str:
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _error_text(exc.exceptions[0])
    return str(message)


def _closed(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection to the server is gone (the server exited)."""
    from mcp.types import CONNECTION_CLOSED

    return getattr(exc, "code", None) == CONNECTION_CLOSED or isinstance(exc, (EOFError, BrokenPipeError))


class McpHub:
    """The MCP servers of one agent: started by :meth:`start`, their tools by :meth:`tools`, closed by
    :meth:`close` (also at interpreter exit)."""

    def __init__(self, servers: tuple[McpServerConfig, ...], cwd: Path) -> None:
        self.cwd = cwd
        self._servers = {s.name: _Server(s) for s in servers}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tasks: list[asyncio.Future[Any]] = []
        self._closed = False
        #: bumped whenever the set of offered tools changes (a server exited): the agent re-reads them
        self.generation = 0

    # -- start and stop ------------------------------------------------------------------------------
    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        """Start every server and wait (up to ``timeout`` seconds) until each runs or has failed."""
        if self._loop is not None or not self._servers:
            return
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="soba-mcp", daemon=True)
        self._thread.start()
        atexit.register(_close_at_exit, weakref.ref(self))  # the kernel exits: its servers stop with it
        ready = asyncio.run_coroutine_threadsafe(self._start_all(timeout), loop)
        with contextlib.suppress(Exception):
            ready.result(timeout + 5)

    async def _start_all(self, timeout: float) -> None:
        for server in self._servers.values():
            server.stop = asyncio.Event()
            server.started = asyncio.Event()
            self._tasks.append(asyncio.ensure_future(self._serve(server)))
        waits = [asyncio.wait_for(s.started.wait(), timeout) for s in self._servers.values()]
        results = await asyncio.gather(*waits, return_exceptions=True)
        for server, result in zip(self._servers.values(), results, strict=True):
            if isinstance(result, BaseException) and server.state == "starting":
                server.state, server.reason = "failed", f"no answer within {timeout:g}s of starting"
                assert server.stop is not None
                server.stop.set()

    async def _serve(self, server: _Server) -> None:
        """Open the transport and session, list the tools, then wait to be stopped."""
        try:
            async with contextlib.AsyncExitStack() as stack:
                session = await self._open(server, stack)
                listed = await session.list_tools()
                server.tools = tuple(self._tool(server.config.name, t) for t in listed.tools
                                     if _TOOL_NAME.fullmatch(mcp_tool_name(server.config.name, t.name)))
                server.session, server.state = session, "running"
                server.started.set()
                assert server.stop is not None
                await server.stop.wait()
        except BaseException as exc:
            if server.state == "starting":
                detail = _tail(server.stderr)
                server.state = "failed"
                server.reason = f"{_error_text(exc)}{f' ({detail})' if detail else ''}"
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
        finally:
            server.session = None
            server.started.set()
            if server.stderr is not None:
                with contextlib.suppress(OSError):
                    server.stderr.close()
            if server.tag:  # stopped (a straggler that outlived the stop stays registered, to die with the kernel)
                process_reaper.untrack(server.tag)

    async def _open(self, server: _Server, stack: contextlib.AsyncExitStack) -> Any:
        from mcp import ClientSession

        config = server.config
        if config.command is not None:
            from mcp.client.stdio import StdioServerParameters, stdio_client

            env = {k: os.path.expandvars(v) for k, v in config.env}
            # Registered with the shell's process reaper before it starts: when the kernel ends in any
            # way (a SIGKILL skips atexit and this hub's close), every process carrying the tag is killed.
            run_id = uuid.uuid4().hex
            env[_RUN_VARIABLE] = run_id
            server.tag = f"{_RUN_VARIABLE}={run_id}".encode()
            process_reaper.track(None, server.tag)
            params = StdioServerParameters(command=config.command, args=list(config.args), env=env,
                                           cwd=str(self.cwd))
            # its stderr, kept to say why it failed; closed when its task ends
            server.stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
            try:
                streams = await stack.enter_async_context(stdio_client(params, errlog=server.stderr))
            except OSError as exc:
                raise RuntimeError(f"cannot run {config.command!r}: {exc.strerror or exc}") from None
        else:
            from mcp.client.streamable_http import streamable_http_client

            assert config.url is not None
            streams = await stack.enter_async_context(streamable_http_client(config.url))
        session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
        await session.initialize()
        return session

    def close(self, timeout: float = 5.0) -> None:
        """Stop every server (their processes end) and the hub's thread. Idempotent."""
        if self._closed or self._loop is None:
            self._closed = True
            return
        self._closed = True
        loop = self._loop

        async def stop_all() -> None:
            for server in self._servers.values():
                if server.stop is not None:
                    server.stop.set()
                if server.state in ("running", "starting"):
                    server.state = "stopped"
            await asyncio.wait(self._tasks, timeout=timeout) if self._tasks else None

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop_all(), loop).result(timeout + 1)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout)

    # -- what the agent sees -------------------------------------------------------------------------
    def status(self) -> tuple[ServerStatus, ...]:
        return tuple(server.status() for server in self._servers.values())

    def notes(self) -> tuple[str, ...]:
        """One line per server that failed to start or exited: what the user is told."""
        return tuple(f"MCP server {s.name} {s.state}: {s.reason}" for s in self.status()
                     if s.state in ("failed", "exited"))

    def tools(self) -> tuple[Tool, ...]:
        """The tools of the servers that run now."""
        return tuple(tool for server in self._servers.values() if server.state == "running"
                     for tool in server.tools)

    def _tool(self, server: str, listed: Any) -> Tool:
        schema = dict(listed.input_schema or {"type": "object", "properties": {}})
        description = listed.description or listed.title or listed.name
        name = listed.name

        async def handler(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
            return await self._call(server, name, args, ctx)

        return Tool(ToolSpec(mcp_tool_name(server, name), f"{description} (MCP server {server})", schema), handler)

    async def _call(self, server: str, tool: str, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        loop = self._loop
        if loop is None or self._closed:
            raise ToolError(f"MCP server {server} is not running (the session's MCP servers are closed)")
        future = asyncio.run_coroutine_threadsafe(self._call_on_hub(server, tool, dict(args),
                                                                    float(ctx.config.shell_timeout_sec)), loop)
        call: asyncio.Future[Any] = asyncio.wrap_future(future)
        watch: asyncio.Future[Any] | None = asyncio.ensure_future(ctx.cancel.wait()) if ctx.cancel else None
        try:
            await asyncio.wait([call, *([watch] if watch is not None else [])], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            future.cancel()
            raise
        finally:
            if watch is not None:
                watch.cancel()
        if not call.done():  # the stop button: the request is abandoned; the server keeps running
            future.cancel()
            return ToolResult(f"[cancelled: the call to MCP server {server} was abandoned]", True,
                              data={"cancelled": True})
        return call.result()

    async def _call_on_hub(self, name: str, tool: str, args: dict[str, Any], timeout: float) -> ToolResult:
        server = self._servers[name]
        if server.session is None or server.state != "running":
            raise ToolError(f"MCP server {name} is not running ({server.status().line()})")
        try:
            result = await server.session.call_tool(tool, args, read_timeout_seconds=timeout)
        except Exception as exc:
            if not _closed(exc):
                raise ToolError(f"MCP server {name}: {tool} failed: {_error_text(exc)}") from None
            detail = _tail(server.stderr)
            server.state, server.reason = "exited", f"{_error_text(exc)}{f' ({detail})' if detail else ''}"
            self.generation += 1
            assert server.stop is not None
            server.stop.set()  # its task unwinds the transport and reaps the process
            raise ToolError(f"MCP server {name} exited: {server.reason}; its tools are no longer available") \
                from None
        text, is_error = result_text(result)
        return ToolResult(text, is_error, data={"mcp_server": name})


def _close_at_exit(ref: weakref.ref[McpHub]) -> None:
    hub = ref()
    if hub is not None:
        hub.close()


def sync_mcp_tools(registry: ToolRegistry, hub: McpHub | None, config: ToolsConfig) -> bool:
    """Make ``registry`` offer exactly the running servers' tools that the allow list (``tools.enabled``,
    ``tools.disabled``) lets through (added after the built-in ones; a name the registry already has is
    kept as it is); whether anything changed."""
    if hub is None:
        return False
    offered = {tool.name: tool for tool in hub.tools() if config.offers(tool.name)}
    gone = [name for name in registry.names() if name.startswith(MCP_PREFIX) and name not in offered]
    for name in gone:
        registry.unregister(name)
    new = [tool for name, tool in offered.items() if name not in registry]
    for tool in new:
        registry.register(tool)
    return bool(gone or new)
