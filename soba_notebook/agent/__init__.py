"""The agent: loop, tools, skills, and the runtime thread it lives on (headless)."""

from .loop import Agent, TurnResult
from .project import AgentHandle, ProjectPaths, open_agent, project_paths
from .runtime import AgentRuntime, QueuedTurn

__all__ = ["Agent", "AgentHandle", "AgentRuntime", "ProjectPaths", "QueuedTurn", "TurnResult", "open_agent",
           "project_paths"]
