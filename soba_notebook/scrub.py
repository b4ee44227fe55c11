"""The one secret scrubber: what counts as a secret, and how it is replaced, for every file soba writes.

Everything that leaves the kernel's memory for a file or the screen passes through
:class:`Scrubber`: transcript entries, spilled tool output (``.soba/outputs``, scrubbed *before*
it is written), capsules, Portable Capsules and Project Memory, flight records and provider error
messages. One rule everywhere (there used to be three, with different rules):

* **values of secret variables in the environment**, read when the scrubber is built (the agent
  builds one per turn, so ``%env MY_TOKEN=...`` set after start is scrubbed from the next turn
  on, and again after every ``python`` or ``shell`` run, so a variable the code sets is scrubbed
  from that run's own output): the well-known provider keys and any variable whose name ends with ``_API_KEY``,
  ``_TOKEN``, ``_SECRET`` or ``_PASSWORD``, at least :data:`MIN_SECRET_LENGTH` characters long;
  plus explicitly named variables (the model's ``apiKeyEnv``) and explicit values (a key passed
  to a provider in code). The marker names the variable;
* **common token shapes** wherever they come from: ``sk-…`` / ``sk-ant-…`` keys, GitHub, Slack
  and AWS tokens, ``Bearer`` headers, private key blocks. The marker names the kind.

Each secret becomes ``[REDACTED:<NAME or kind>]``. Scrubbing is idempotent and pure; nothing is
logged, and a secret never appears in an error.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "KNOWN_SECRET_VARIABLES",
    "MIN_SECRET_LENGTH",
    "SECRET_SUFFIXES",
    "SECRET_WORDS",
    "TOKEN_PATTERNS",
    "Scrubber",
    "is_secret_name",
    "mark_tokens",
    "marker",
    "names_a_secret",
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


#: Every shape of :data:`TOKEN_PATTERNS` contains one of these: text without any holds no token.
_MAY_HOLD_TOKEN = re.compile(r"PRIVATE KEY|sk-|github_pat_|gh[pousr]_|xox[bp]-|AKIA|(?i:bearer)")


def mark_tokens(text: str) -> str:
    """``text`` with every match of :data:`TOKEN_PATTERNS` replaced by its kind's marker."""
    for kind, pattern in TOKEN_PATTERNS:
        def keep_and_mark(m: re.Match[str], kind: str = kind) -> str:
            return (m.groupdict().get("keep") or "") + marker(kind)

        text = pattern.sub(keep_and_mark, text)
    return text


def marker(name: str) -> str:
    """The text that replaces a secret: ``[REDACTED:<NAME or kind>]``."""
    return f"[REDACTED:{name}]"


def is_secret_name(name: str) -> bool:
    """Whether a variable of this name holds a secret: a known provider key or a secret suffix."""
    upper = name.upper()
    return upper in KNOWN_SECRET_VARIABLES or upper.endswith(SECRET_SUFFIXES)


#: Words that make a variable's name a secret's wherever a name alone decides (what a sandboxed command
#: is given), beyond :func:`is_secret_name`'s suffixes: ``AWS_SECRET_ACCESS_KEY``, ``DB_PASSWORD_FILE``.
SECRET_WORDS = ("SECRET", "PASSWORD", "PASSWD", "TOKEN", "API_KEY", "APIKEY", "ACCESS_KEY", "PRIVATE_KEY",
                "CREDENTIAL")


def names_a_secret(name: str) -> bool:
    """:func:`is_secret_name`, or a name containing one of :data:`SECRET_WORDS` (hiding one too many
    costs little where only the name is known)."""
    upper = name.upper()
    return is_secret_name(name) or any(word in upper for word in SECRET_WORDS)


def secret_variables(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{variable name: value}`` for every secret-looking variable set in ``environ``."""
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for name, value in env.items():
        if not isinstance(value, str) or len(value) < MIN_SECRET_LENGTH:
            continue
        if is_secret_name(name):
            out[name] = value
    return out


#: The marker name of a secret handed over as a value, not found in a variable.
EXPLICIT_SECRET = "api_key"


@dataclass(frozen=True, slots=True)
class Scrubber:
    """Scrubbing for one snapshot of the environment: ``(name, value)`` pairs, longest value first."""

    secrets: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None, *, extra_names: Iterable[str | None] = (),
                     extra_values: Iterable[str | None] = ()) -> Scrubber:
        """The secrets of ``environ`` (default: :data:`os.environ`, read now), plus ``extra_names``
        (variables that hold a secret whatever their name) and ``extra_values`` (secrets given as
        values, at least 4 characters)."""
        env = os.environ if environ is None else environ
        found = secret_variables(env)
        for name in extra_names:
            value = env.get(name) if name else None
            if name and isinstance(value, str) and len(value) >= MIN_SECRET_LENGTH:
                found[name] = value
        pairs = [(n, v) for n, v in found.items()]
        known = {v for _, v in pairs}
        pairs += [(EXPLICIT_SECRET, v) for v in extra_values if v and len(v) >= 4 and v not in known]
        # longest first, so a value that contains another secret is replaced whole
        return cls(tuple(sorted(pairs, key=lambda kv: (-len(kv[1]), kv[0]))))

    def merged(self, other: Scrubber) -> Scrubber:
        """The secrets of both: a variable unset since this scrubber was built is still scrubbed."""
        pairs = dict.fromkeys((*self.secrets, *other.secrets))
        return Scrubber(tuple(sorted(pairs, key=lambda kv: (-len(kv[1]), kv[0]))))

    @property
    def names(self) -> frozenset[str]:
        """The environment variables this scrubber treats as secrets."""
        return frozenset(n for n, _ in self.secrets if n != EXPLICIT_SECRET)

    def text(self, text: str) -> str:
        for name, value in self.secrets:
            if value in text:
                text = text.replace(value, marker(name))
        if _MAY_HOLD_TOKEN.search(text) is None:  # one scan, not one per shape: most text holds no token
            return text
        return mark_tokens(text)

    def json(self, value: Any) -> Any:
        """:meth:`text` applied to every string value (never the keys) of a JSON-like value."""
        cls = value.__class__  # exact classes first: the ABC check below is slow, and capsules are long
        if cls is str:
            return self.text(value)
        if cls is dict:
            return {k: self.text(v) if v.__class__ is str else self.json(v) for k, v in value.items()}
        if cls is list or cls is tuple:
            return [self.text(v) if v.__class__ is str else self.json(v) for v in value]
        if value is None or cls is int or cls is float or cls is bool:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {k: self.json(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.json(v) for v in value]
        return value
