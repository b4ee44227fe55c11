"""Sessions: transcript entries, the append-only JSONL store, and the model-input builder."""

from .context import ModelContext, build_context
from .entries import (
    Entry,
    ToolCall,
    Usage,
    assistant_message,
    checkpoint,
    config_change,
    leaf_marker,
    tool_result,
    user_message,
)
from .listing import SessionInfo, list_sessions
from .store import FORMAT_VERSION, SessionStore

__all__ = [
    "FORMAT_VERSION",
    "Entry",
    "ModelContext",
    "SessionInfo",
    "SessionStore",
    "ToolCall",
    "Usage",
    "assistant_message",
    "build_context",
    "checkpoint",
    "config_change",
    "leaf_marker",
    "list_sessions",
    "tool_result",
    "user_message",
]
