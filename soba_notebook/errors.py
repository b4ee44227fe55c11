"""The exceptions soba raises at its boundaries.

Every error a user can cause (a bad config value, a corrupt session file, a provider that refuses
a key) is one of these, with a message that names *what* and *where*, so the notebook layer can
show it as one clear line instead of a traceback from deep inside.
"""

from __future__ import annotations

__all__ = [
    "AuthError",
    "CapsuleFormatError",
    "CompactionFailed",
    "ConfigError",
    "ContextOverflowError",
    "ProviderError",
    "SessionError",
    "SessionHeldError",
    "SessionLockedError",
    "SessionTakenOverError",
    "SessionWarning",
    "SobaError",
    "StaleLeafError",
    "StateFileError",
    "ToolError",
    "TurnCancelled",
    "WorkspaceError",
]


class SobaError(Exception):
    """Base class of every error soba raises on purpose."""


class ConfigError(SobaError, ValueError):
    """A configuration file or argument holds a value soba cannot use.

    ``source`` is the file (or ``"arguments"``), ``key`` the dotted key, ``value`` the bad value.
    """

    def __init__(self, message: str, *, source: str | None = None, key: str | None = None,
                 value: object = None) -> None:
        super().__init__(message)
        self.source = source
        self.key = key
        self.value = value


class SessionError(SobaError):
    """A session file cannot be opened or written: the message names the file and line."""


class SessionLockedError(SessionError):
    """Another process holds the session's write lock for longer than we were willing to wait."""


class SessionHeldError(SessionError):
    """Another live process holds the session's writer lease; ``holder`` says who (a ``Holder``)."""

    def __init__(self, message: str, *, holder: object = None) -> None:
        super().__init__(message)
        self.holder = holder


class SessionTakenOverError(SessionError):
    """This process's writer lease on a session was taken over (or released): it may not append."""


class StateFileError(SobaError, OSError):
    """A file SOBA would write under ``.soba`` (or ``.soba`` itself) is a symbolic link or not a
    regular file: nothing was written; the message names it. An ``OSError`` too, so a caller
    that reports a failed write reports this one the same way."""


class StaleLeafError(SessionError):
    """An append that was only valid for a particular leaf found the session moved on."""


class SessionWarning(UserWarning):
    """Something in a session file was skipped or repaired in memory; nothing on disk changed."""


class CapsuleFormatError(SobaError, ValueError):
    """A capsule (JSON state or a ``.capsule.md`` file) does not validate."""


class ProviderError(SobaError):
    """The model provider answered with an error or could not be reached."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable


class AuthError(ProviderError):
    """The provider refused the credentials (or none were configured)."""


class ContextOverflowError(ProviderError):
    """The provider says the request was longer than the model's context window.

    ``requested_tokens`` and ``context_limit`` are what the provider stated, when its message
    says (``"maximum context length is 2048 tokens. However, you requested 2311 tokens"``);
    ``None`` otherwise. The overflow recovery uses them to check that its retry is smaller.

    ``response`` is the reply itself when the provider answered but its usage shows it read more
    than the window holds (a *silent* overflow: a
    :class:`~soba_notebook.providers.base.ModelResponse`); ``None`` when the provider refused.
    It is typed ``object`` because this module sits below ``providers/``.

    ``completion_tokens`` is the completion share of ``requested_tokens`` where the server splits
    them ("2055 in the messages, 256 in the completion").
    """

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False,
                 requested_tokens: int | None = None, context_limit: int | None = None,
                 response: object | None = None, completion_tokens: int | None = None) -> None:
        super().__init__(message, status=status, retryable=retryable)
        self.requested_tokens = requested_tokens
        self.context_limit = context_limit
        self.response = response
        self.completion_tokens = completion_tokens


class CompactionFailed(SobaError):
    """A mandatory compaction could not bring the request under the hard limit."""


class TurnCancelled(SobaError):
    """The running turn was cancelled by the user (stop button, ``%soba stop``)."""


class ToolError(SobaError):
    """A tool could not do what the model asked; the message goes back to the model."""


class WorkspaceError(ToolError):
    """A file tool was asked to reach outside the workspace root."""
