"""Redaction: no secret from the environment, and no well-known token shape, leaves in a capsule.

The rule itself lives in :mod:`soba_notebook.scrub` (one scrubber for every file soba writes);
this module applies it to capsules and Portable Capsules.

Portable Capsules and Project Memory are files meant to be read by people and moved between
sessions, projects and agents, so everything written there first passes through
:func:`redact_capsule` (or :func:`redact_text` for loose strings). Two kinds of secret are
replaced by ``[REDACTED:<NAME or kind>]``:

* **values of secret variables present in the environment** — the well-known provider keys
  (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ``OPENROUTER_API_KEY``, ``GITHUB_TOKEN``,
  ``HF_TOKEN``) and any variable whose name ends with ``_API_KEY``, ``_TOKEN``, ``_SECRET`` or
  ``_PASSWORD``, when the value has at least :data:`MIN_SECRET_LENGTH` characters (shorter
  values would redact ordinary words). The marker names the variable;
* **common token patterns**, wherever they come from — ``sk-…`` / ``sk-ant-…`` keys,
  ``ghp_…`` and ``github_pat_…`` GitHub tokens, ``xoxb-``/``xoxp-`` Slack tokens, ``AKIA…`` AWS
  access key ids, ``Bearer <token>`` headers and ``-----BEGIN … PRIVATE KEY-----`` blocks. The
  marker names the kind.

Redaction is idempotent (a marker never matches again) and pure: the environment is passed in
(default :data:`os.environ`, read at call time), nothing is logged, and the secret itself never
appears in any result or error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..compaction.capsule import Capsule
from ..scrub import (
    KNOWN_SECRET_VARIABLES,
    MIN_SECRET_LENGTH,
    SECRET_SUFFIXES,
    TOKEN_PATTERNS,
    Scrubber,
    marker,
    secret_variables,
)

if TYPE_CHECKING:  # pragma: no cover - typing only; portable imports this module at runtime
    from .portable import PortableCapsule

__all__ = [
    "KNOWN_SECRET_VARIABLES",
    "MIN_SECRET_LENGTH",
    "SECRET_SUFFIXES",
    "TOKEN_PATTERNS",
    "marker",
    "redact_capsule",
    "redact_json",
    "redact_portable",
    "redact_text",
    "secret_variables",
]

def _capsule(scrubber: Scrubber, capsule: Capsule) -> Capsule:
    return Capsule.from_json(scrubber.json(capsule.to_json()), where="redacted capsule")


def redact_text(text: str, environ: Mapping[str, str] | None = None) -> str:
    """``text`` with every environment secret and token pattern replaced by its marker."""
    return Scrubber.from_environ(environ).text(text)


def redact_json(value: Any, environ: Mapping[str, str] | None = None) -> Any:
    """:func:`redact_text` applied to every string inside a JSON-like value."""
    return Scrubber.from_environ(environ).json(value)


def redact_capsule(capsule: Capsule, environ: Mapping[str, str] | None = None) -> Capsule:
    """The capsule with every string field redacted; an unchanged capsule is returned as is."""
    redacted = _capsule(Scrubber.from_environ(environ), capsule)
    return capsule if redacted == capsule else redacted


def redact_portable(pc: PortableCapsule, environ: Mapping[str, str] | None = None) -> PortableCapsule:
    """A Portable Capsule with its capsule and its free-text metadata (title) redacted."""
    r = Scrubber.from_environ(environ)
    capsule = _capsule(r, pc.capsule)
    title = r.text(pc.title)
    kernel_state = tuple(r.text(item) for item in pc.kernel_state)
    if capsule == pc.capsule and title == pc.title and kernel_state == pc.kernel_state:
        return pc
    return replace(pc, capsule=capsule, title=title, kernel_state=kernel_state)
