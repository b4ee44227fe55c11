"""Helpers for agent tests: a project dir, an agent on the fake server, a request recorder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from soba_notebook.agent import Agent
from soba_notebook.config import load_config
from soba_notebook.events import Event, EventBus
from soba_notebook.flight import FlightRecorder
from soba_notebook.providers.anthropic import AnthropicProvider
from soba_notebook.providers.base import ModelRequest, ModelResponse, Provider
from soba_notebook.providers.openai import OpenAIChatProvider
from soba_notebook.session import SessionStore
from soba_notebook.tokens import TokenCounter


class RecordingProvider:
    """Wraps a provider and keeps every ModelRequest that was actually sent."""

    def __init__(self, inner: Provider) -> None:
        self.inner = inner
        self.name, self.label, self.offline = inner.name, inner.label, inner.offline
        self.sent: list[ModelRequest] = []

    async def complete(self, request: ModelRequest, *, on_event: Any = None) -> ModelResponse:
        self.sent.append(request)
        return await self.inner.complete(request, on_event=on_event)

    async def aclose(self) -> None:
        await self.inner.aclose()

    # what the agent asks a provider about its server goes to the wrapped one
    @property
    def renders_tools(self) -> bool:
        return getattr(self.inner, "renders_tools", True) is not False

    def sent_system(self, system: str, tools: Any) -> str:
        sent = getattr(self.inner, "sent_system", None)
        return sent(system, tools) if sent is not None else system

    @property
    def effective_context_window(self) -> int | None:
        return getattr(self.inner, "effective_context_window", None)

    @property
    def message_form(self) -> Any:
        return getattr(self.inner, "message_form", None)

    async def prepare(self) -> None:
        prepare = getattr(self.inner, "prepare", None)
        if prepare is not None:
            await prepare()

    async def count_request_tokens(self, request: ModelRequest) -> int | None:
        count = getattr(self.inner, "count_request_tokens", None)
        return await count(request) if count is not None else None

    async def count_text_tokens(self, text: str) -> int | None:
        count = getattr(self.inner, "count_text_tokens", None)
        return await count(text) if count is not None else None

    def request_tokens(self, request: ModelRequest, counter: TokenCounter) -> int:
        return (counter.count_text(request.system) + counter.count_tools(request.tools)
                + counter.count_messages(request.messages))


def make_agent(tmp: Path, wire: str, base_url: str, *, compaction: dict[str, Any] | None = None,
               model: dict[str, Any] | None = None, tools: dict[str, Any] | None = None,
               ) -> tuple[Agent, RecordingProvider, list[Event]]:
    project = tmp / "project"
    (project / "ws").mkdir(parents=True, exist_ok=True)
    config = load_config(home=tmp / "home", project_dir=project, overrides={
        "model": {"provider": wire, "model": "gpt-4o-mini", "contextWindow": 128000, "maxOutputTokens": 4000,
                  **(model or {})},
        "compaction": compaction or {},
        # approvals off unless a test asks for them: these agents have no one to answer (test_approvals.py)
        "tools": {"workspace": str(project / "ws"), "shellTimeoutSec": 20, "approval": "never", **(tools or {})}})
    inner: Provider
    if wire == "openai":
        inner = OpenAIChatProvider("gpt-4o-mini", base_url=base_url, api_key="test-key-not-secret",
                                   tool_protocol=config.model.tool_protocol)
    else:
        inner = AnthropicProvider("claude-test", base_url=base_url, api_key="test-key-not-secret")
    provider = RecordingProvider(inner)
    store = SessionStore.create(project / ".soba" / "sessions")
    bus = EventBus()
    events: list[Event] = []
    bus.subscribe(events.append)
    agent = Agent(store, config, provider, workspace=project / "ws", bus=bus,
                  flight=FlightRecorder(project / ".soba" / "flight.jsonl", store.id))
    return agent, provider, events


def last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages", [])):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            texts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
            if texts:
                return texts[-1]
    return ""


def tool_results_in(body: dict[str, Any]) -> int:
    """How many tool results the request carries (either wire)."""
    n = 0
    for message in body.get("messages", []):
        if message.get("role") == "tool":
            n += 1
        elif isinstance(message.get("content"), list):
            n += sum(1 for b in message["content"] if isinstance(b, dict) and b.get("type") == "tool_result")
    return n


def is_summary_request(body: dict[str, Any]) -> bool:
    """Whether a recorded request body is a compaction summary request (either wire)."""
    system = body.get("system")
    if system is None:
        system = [m.get("content") for m in body.get("messages", []) if m.get("role") == "system"]
    return "Context Capsule" in str(system)


def file_writer(files: int, content: str, summary: dict[str, Any], answer: str
                ) -> Callable[[str, dict[str, Any]], dict[str, Any]]:
    """A fake-server handler for an agent that writes ``f1.txt`` .. ``f{files}.txt`` (each ``content``,
    one tool call a request, no usage reported), then answers ``answer``; a summary request gets
    ``summary`` as its reply."""
    count = {"n": 0}

    def handler(path: str, body: dict[str, Any]) -> dict[str, Any]:
        if is_summary_request(body):
            return summary
        count["n"] += 1
        if count["n"] <= files:
            return {"tool_calls": [{"id": f"w{count['n']}", "name": "write_file",
                                    "arguments": {"path": f"f{count['n']}.txt", "content": content}}],
                    "usage": False}
        return {"text": answer, "usage": False}

    return handler
