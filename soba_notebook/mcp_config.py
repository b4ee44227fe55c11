"""The ``mcpServers`` block of a config file: which MCP servers soba starts, checked where it is read.

The shape is the one Claude Code's ``.mcp.json`` uses, so a block can be copied between them::

    "mcpServers": {
      "calc": {"command": "python", "args": ["calc_server.py"], "env": {"TOKEN": "${CALC_TOKEN}"}},
      "docs": {"url": "http://127.0.0.1:8000/mcp"}
    }

A server is a program soba runs (``command``, with ``args`` and ``env``, over stdio) or an endpoint
it connects to (``url``, streamable HTTP). Both are trusted-only settings in a project's config
(:func:`~soba_notebook.trust.needs_trust`). A server's name becomes part of its tools' names
(``mcp__<server>__<tool>``), so it is limited to what a tool name may hold. Values of ``env`` may
name environment variables (``${VAR}``), expanded when the server starts, so a token need not be
written in the file. Pure: parsing only; :mod:`soba_notebook.agent.mcp_tools` starts the servers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

__all__ = ["McpServerConfig", "parse_mcp_servers"]

#: A server name: what a provider accepts inside a tool name (``mcp__<server>__<tool>``).
_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")
_KEYS = ("command", "args", "env", "url", "type")


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    """One configured server: ``command`` (+ ``args``, ``env``) for stdio, or ``url``."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    url: str | None = None

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"


def _server(source: str, name: Any, raw: Any) -> McpServerConfig:
    where = f"mcpServers.{name}"

    def bad(message: str, key: str = "") -> ConfigError:
        dotted = f"{where}.{key}" if key else where
        return ConfigError(f"{source}: {dotted} {message}", source=source, key=dotted)

    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise bad("is not a usable server name: use 1 to 32 letters, digits, _ or - (it becomes part of tool "
                  "names, mcp__<server>__<tool>)")
    if not isinstance(raw, Mapping):
        raise bad(f'must be an object with "command" (and optional "args", "env") or "url", got {raw!r}')
    for key in raw:
        if key not in _KEYS:
            raise bad("is not a known key (known: command, args, env, url, type)", str(key))
    command, url = raw.get("command"), raw.get("url")
    if (command is None) == (url is None):
        raise bad('needs exactly one of "command" (a program run over stdio) or "url" (streamable HTTP)')
    if url is not None:
        if not isinstance(url, str) or not re.match(r"https?://", url):
            raise bad(f"must be an http:// or https:// address, got {url!r}", "url")
        if "args" in raw or "env" in raw:
            raise bad('"args" and "env" apply only to a "command" server', "args" if "args" in raw else "env")
        return McpServerConfig(name, url=url)
    if not isinstance(command, str) or not command.strip():
        raise bad(f"must be a non-empty string (the program to run), got {command!r}", "command")
    args = raw.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise bad(f"must be a list of strings, got {args!r}", "args")
    env = raw.get("env", {})
    if not isinstance(env, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise bad(f"must be an object mapping variable names to strings, got {env!r}", "env")
    return McpServerConfig(name, command=command, args=tuple(args), env=tuple(env.items()))


def parse_mcp_servers(source: str, raw: Any) -> tuple[McpServerConfig, ...]:
    """The servers of one layer's ``mcpServers`` block; a :class:`ConfigError` names the server and key."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: mcpServers must be an object mapping server names to their settings, "
                          f"got {raw!r}", source=source, key="mcpServers")
    return tuple(_server(source, name, value) for name, value in raw.items())
