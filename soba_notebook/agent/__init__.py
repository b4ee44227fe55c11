"""The agent: loop, tools, skills, and the runtime thread it lives on (headless)."""

from .loop import Agent, TurnResult
from .runtime import AgentRuntime, QueuedTurn
from .session import AgentHandle, open_agent, project_paths

__all__ = ["Agent", "AgentHandle", "AgentRuntime", "QueuedTurn", "TurnResult", "open_agent", "project_paths"]
