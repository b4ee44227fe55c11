"""Redaction: no secret from the environment, and no well-known token shape, leaves in a capsule.

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

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..compaction.capsule import Capsule

if TYPE_CHECKING:  # pragma: no cover - typing only; portable imports this module at runtime
    from .portable import PortableCapsule

__all__ = [
    "KNOWN_SECRET_VARIABLES",
    "MIN_SECRET_LENGTH",
    "SECRET_SUFFIXES",
    "TOKEN_PATTERNS",
    "Redactor",
    "marker",
    "redact_capsule",
    "redact_json",
    "redact_portable",
    "redact_text",
    "secret_variables",
]

#: Variables always treated as secrets when set (and long enough).
KNOWN_SECRET_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENROUTER_API_KEY", "GITHUB_TOKEN", "HF_TOKEN")
#: A variable whose (upper-cased) name ends with one of these holds a secret.
SECRET_SUFFIXES = ("_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD")
#: Shorter values are not redacted: they would match ordinary text.
MIN_SECRET_LENGTH = 8

#: Not preceded by a token character: ``task-…`` must not look like ``sk-…``.
_EDGE = r"(?<![A-Za-z0-9_\-])"

#: (kind, pattern): the text a pattern matches is replaced by the marker, except that a ``keep``
#: group (the word ``Bearer``) stays in front of it. Order matters: the longest,
#: most specific shapes first (``sk-ant-`` before ``sk-``).
TOKEN_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("private_key", re.compile(
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----.*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)",
        re.DOTALL)),
    ("anthropic_key", re.compile(_EDGE + r"sk-ant-[A-Za-z0-9_\-]{16,}")),
    ("openai_key", re.compile(_EDGE + r"sk-[A-Za-z0-9][A-Za-z0-9_\-]{15,}")),
    ("github_pat", re.compile(_EDGE + r"github_pat_[A-Za-z0-9_]{20,}")),
    ("github_token", re.compile(_EDGE + r"gh[pousr]_[A-Za-z0-9]{20,}")),
    ("slack_token", re.compile(_EDGE + r"xox[bp]-[A-Za-z0-9\-]{10,}")),
    ("aws_access_key", re.compile(r"(?<![A-Z0-9])AKIA[0-9A-Z]{16}(?![A-Z0-9])")),
    # a token has at least one digit or symbol: "bearer certificates" is prose, not a header
    ("bearer_token", re.compile(r"(?P<keep>\b(?i:bearer)[ \t]+)(?=[A-Za-z]*[0-9._~+/\-])[A-Za-z0-9._~+/\-]{8,}=*")),
)


def marker(name: str) -> str:
    """The text that replaces a secret: ``[REDACTED:<NAME or kind>]``."""
    return f"[REDACTED:{name}]"


def secret_variables(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{variable name: value}`` for every secret-looking variable set in ``environ``."""
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for name, value in env.items():
        if not isinstance(value, str) or len(value) < MIN_SECRET_LENGTH:
            continue
        upper = name.upper()
        if upper in KNOWN_SECRET_VARIABLES or upper.endswith(SECRET_SUFFIXES):
            out[name] = value
    return out


@dataclass(frozen=True, slots=True)
class Redactor:
    """Redaction for one snapshot of the environment: ``(name, value)`` pairs, longest value first."""

    secrets: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Redactor:
        found = secret_variables(environ)
        # longest first, so a value that contains another secret is replaced whole
        ordered = sorted(found.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        return cls(tuple(ordered))

    def text(self, text: str) -> str:
        for name, value in self.secrets:
            if value in text:
                text = text.replace(value, marker(name))
        for kind, pattern in TOKEN_PATTERNS:
            text = pattern.sub(lambda m, kind=kind: (m.groupdict().get("keep") or "") + marker(kind), text)
        return text

    def json(self, value: Any) -> Any:
        """:meth:`text` applied to every string value (never the keys) of a JSON-like value."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {k: self.json(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.json(v) for v in value]
        return value

    def capsule(self, capsule: Capsule) -> Capsule:
        return Capsule.from_json(self.json(capsule.to_json()), where="redacted capsule")


def redact_text(text: str, environ: Mapping[str, str] | None = None) -> str:
    """``text`` with every environment secret and token pattern replaced by its marker."""
    return Redactor.from_environ(environ).text(text)


def redact_json(value: Any, environ: Mapping[str, str] | None = None) -> Any:
    """:func:`redact_text` applied to every string inside a JSON-like value."""
    return Redactor.from_environ(environ).json(value)


def redact_capsule(capsule: Capsule, environ: Mapping[str, str] | None = None) -> Capsule:
    """The capsule with every string field redacted; an unchanged capsule is returned as is."""
    redacted = Redactor.from_environ(environ).capsule(capsule)
    return capsule if redacted == capsule else redacted


def redact_portable(pc: PortableCapsule, environ: Mapping[str, str] | None = None) -> PortableCapsule:
    """A Portable Capsule with its capsule and its free-text metadata (title) redacted."""
    r = Redactor.from_environ(environ)
    capsule = r.capsule(pc.capsule)
    title = r.text(pc.title)
    kernel_state = tuple(r.text(item) for item in pc.kernel_state)
    if capsule == pc.capsule and title == pc.title and kernel_state == pc.kernel_state:
        return pc
    return replace(pc, capsule=capsule, title=title, kernel_state=kernel_state)
