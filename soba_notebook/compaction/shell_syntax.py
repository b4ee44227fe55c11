"""The syntax of a shell command line: its simple commands, their words and redirections.

:mod:`.shell_parse` decides what a command line *did* (files read and written, the check it ran);
this module only takes the line apart the way a POSIX shell would, without running anything:
heredoc bodies are dropped (their text is data), words are split with shell quoting (or, when the
quotes do not balance, by a forgiving fallback), and operators (``&&``, ``||``, ``;``, ``|``,
``&``, ``( … )``, newlines) end one :class:`Segment` and redirections are set aside.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Segment", "split_commands"]

_OPERATOR_CHARS = frozenset(";&|<>()\n")
_HEREDOC = re.compile(r"<<-?[ \t]*(?:'([^'\n]+)'|\"([^\"\n]+)\"|\\?([A-Za-z_][\w.-]*))")
_FALLBACK_TOKEN = re.compile(r"&&|\|\||>>|&>>?|>&|<<<|<<-?|[;|&<>()\n]|(?:[^\s;|&<>()\"']|\"[^\"]*\"?|'[^']*'?)+")


def _strip_heredocs(command: str) -> str:
    """Drop heredoc bodies (their text is data, not commands); keep the ``<<`` and delimiter."""
    if "<<" not in command:
        return command
    lines = command.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        delimiters = [m.group(1) or m.group(2) or m.group(3) for m in _HEREDOC.finditer(line)
                      if not line[m.start():].startswith("<<<") and line[m.start() - 1: m.start()] != "<"]
        for delimiter in delimiters:
            end = next((j for j in range(i, len(lines)) if lines[j].strip() == delimiter), None)
            if end is None:  # not a heredoc after all (``<<`` inside a string): keep the text
                break
            i = end + 1
    return "\n".join(out)


def _tokens(command: str) -> list[str]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|<>()\n")
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes or a trailing escape: split without quoting rules
        return [_unquote(t) for t in _FALLBACK_TOKEN.findall(command)]


def _unquote(token: str) -> str:
    if token and all(c in _OPERATOR_CHARS for c in token):
        return token
    return token.replace('"', "").replace("'", "")


def _is_operator(token: str) -> bool:
    return bool(token) and all(c in _OPERATOR_CHARS for c in token)


@dataclass(slots=True)
class Segment:
    """One simple command: its words, its redirections, and the operator that ends it."""

    words: list[str]
    redirects: list[tuple[str, str]]
    end: str  # "&&", "||", ";", "|", "&", "(", ")" or "" at the end of the line


def _segments(tokens: Sequence[str]) -> list[Segment]:
    segments: list[Segment] = []
    words: list[str] = []
    redirects: list[tuple[str, str]] = []
    i = 0
    n = len(tokens)
    while i < n:
        token = tokens[i]
        if not _is_operator(token):
            words.append(token)
            i += 1
            continue
        if ">" in token or "<" in token:
            target = tokens[i + 1] if i + 1 < n and not _is_operator(tokens[i + 1]) else ""
            if words and words[-1].isdigit() and ">" in token:
                words.pop()  # ``2>file``: the fd number is not an argument
            redirects.append((token, target))
            i += 2 if target else 1
            continue
        segments.append(Segment(words, redirects, _separator(token)))
        words, redirects = [], []
        i += 1
    if words or redirects:
        segments.append(Segment(words, redirects, ""))
    return segments


def _separator(token: str) -> str:
    for op in ("&&", "||", "(", ")", "|", ";", "&"):
        if op in token:
            return op
    return ";"  # newline(s)


def split_commands(command: str) -> list[Segment]:
    """The simple commands of ``command`` in order, heredoc bodies dropped."""
    return _segments(_tokens(_strip_heredocs(command)))
