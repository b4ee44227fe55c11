"""Keep secrets from the environment out of everything the agent writes.

API keys live only in environment variables. A tool can still echo one (``python -c 'import
os; print(os.environ)'``); before any text reaches the transcript, :func:`scrub` replaces the
value of every secret-looking variable with a marker naming the variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["scrub", "scrub_value", "secret_values"]

_SUFFIXES = ("_API_KEY", "_APIKEY", "_TOKEN", "_SECRET", "_PASSWORD", "_ACCESS_KEY")


def secret_values(environ: Mapping[str, str] | None = None, extra_names: tuple[str, ...] = ()) -> dict[str, str]:
    """value -> variable name, for variables that look like secrets and hold ≥ 8 characters."""
    environ = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for name, value in environ.items():
        upper = name.upper()
        if (upper.endswith(_SUFFIXES) or name in extra_names) and len(value) >= 8:
            out[value] = name
    return out


def scrub(text: str, secrets: Mapping[str, str]) -> str:
    for value, name in secrets.items():
        if value in text:
            text = text.replace(value, f"[REDACTED:{name}]")
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
