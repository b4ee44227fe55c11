"""Keep secrets from the environment out of everything the agent writes.

API keys live only in environment variables. A tool can still echo one (``python -c 'import
os; print(os.environ)'``); before any text reaches the transcript, :func:`scrub` replaces the
value of every secret variable with a marker naming the variable. What counts as a secret
variable is decided in one place, :func:`soba_notebook.memory.redact.secret_variables`, so the
transcript and the capsule files agree. Unlike capsule export, the transcript is not scanned for
token *shapes*: it is the canonical record of what the user and tools said, and code under work
legitimately holds strings like ``sk-test-…``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..memory.redact import marker, secret_variables

__all__ = ["scrub", "scrub_value", "secret_values"]


def secret_values(environ: Mapping[str, str] | None = None, extra_names: tuple[str, ...] = ()) -> dict[str, str]:
    """value -> variable name for the environment's secrets (plus ``extra_names``), longest first,
    so a value that contains another secret is replaced whole."""
    found = secret_variables(environ)
    if extra_names:
        env = os.environ if environ is None else environ
        found.update({n: env[n] for n in extra_names if len(env.get(n, "")) >= 8})
    ordered = sorted(found.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return {value: name for name, value in ordered}


def scrub(text: str, secrets: Mapping[str, str]) -> str:
    for value, name in secrets.items():
        if value in text:
            text = text.replace(value, marker(name))
    return text


def scrub_value(value: Any, secrets: Mapping[str, str]) -> Any:
    """``scrub`` applied to every string inside a JSON-like value."""
    if not secrets:
        return value
    if isinstance(value, str):
        return scrub(value, secrets)
    if isinstance(value, Mapping):
        return {k: scrub_value(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_value(v, secrets) for v in value]
    return value
