"""Reading a ``.capsule.md`` file's text: the front matter and the sections, back into values.

:mod:`.portable` owns the format (the header keys, :data:`~.portable.SECTIONS`, the quoting rule,
the hash) and the writer; this module owns only the forgiving-but-exact parse of one file's text
that :func:`~.portable.load_text` runs. Every error is a :class:`~.portable.CapsuleFileError`
naming the source and the line; nothing is executed, only JSON string literals are decoded.
"""

from __future__ import annotations

import json
import re
from typing import Any, cast

from ..compaction.capsule import Capsule, Decision, EntryRange, Verification
from ..session.capsule_schema import CAPSULE_FIELDS, STATUSES
from ..session.payloads import VerificationStatus
from .portable import (
    FORMAT_KEY,
    FORMAT_VERSION,
    ID_PATTERN,
    INT_RE,
    KERNEL_STATE_TITLE,
    QUALITIES,
    SECTION_BY_TITLE,
    SECTIONS,
    SEP,
    CapsuleFileError,
)

__all__ = ["Reader"]

_FIELDS = {f.attr: f for f in CAPSULE_FIELDS}
_HEADER_KEYS = (FORMAT_KEY, "id", "title", "created", "source-session", "source-checkpoint", "as-of", "trigger",
                "quality", "tokens", "hash", "edited")
_RANGE_KEYS = {"first entry": "first_id", "last entry": "last_id", "entries": "count"}
_HASH_RE = re.compile(r"sha256:[0-9a-f]{64}")
_KEY_RE = re.compile(r"([A-Za-z][A-Za-z0-9_\-]*)[ \t]*:(.*)")
_DECODER = json.JSONDecoder()


class Reader:
    """One parse of one file's text; every error names ``source`` and a line."""

    def __init__(self, text: str, source: str) -> None:
        if text.startswith("\ufeff"):
            text = text[1:]
        self.lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self.source = source

    def fail(self, line: int | None, problem: str) -> CapsuleFileError:
        return CapsuleFileError(self.source, line, problem)

    # -- values ----------------------------------------------------------------------------------
    def json_string_prefix(self, text: str, line: int, what: str) -> tuple[str, str]:
        """Decode the JSON string at the start of ``text``; returns (value, rest of text)."""
        try:
            value, end = _DECODER.raw_decode(text)
        except json.JSONDecodeError as exc:
            raise self.fail(line, f"{what}: a value starting with a double quote must be a JSON string "
                                  f"({exc.msg} at column {exc.colno})") from None
        if not isinstance(value, str):  # pragma: no cover - text starts with '"'
            raise self.fail(line, f"{what}: expected a JSON string")
        return value, text[end:]

    def json_string(self, text: str, line: int, what: str) -> str:
        value, rest = self.json_string_prefix(text, line, what)
        if rest.strip():
            raise self.fail(line, f"{what}: unexpected text {rest.strip()[:40]!r} after the JSON string")
        return value

    def text(self, raw: str, line: int, what: str) -> str:
        raw = raw.strip()
        return self.json_string(raw, line, what) if raw.startswith('"') else raw

    def scalar(self, raw: str, line: int, what: str) -> str | int | bool | None:
        raw = raw.strip()
        if raw.startswith('"'):
            return self.json_string(raw, line, what)
        if raw in ("null", ""):
            return None
        if raw in ("true", "false"):
            return raw == "true"
        if INT_RE.fullmatch(raw):
            return int(raw)
        return raw

    # -- header ----------------------------------------------------------------------------------
    def header(self) -> tuple[dict[str, tuple[int, str]], int]:
        """The front matter as {key: (line, raw value)} and the index of the first body line."""
        if not self.lines or self.lines[0].strip() != "---":
            raise self.fail(1, "missing front-matter header: a .capsule.md file starts with a '---' line "
                               f"followed by '{FORMAT_KEY}: {FORMAT_VERSION}'")
        raw: dict[str, tuple[int, str]] = {}
        for i in range(1, len(self.lines)):
            line_no, line = i + 1, self.lines[i]
            if line.strip() == "---":
                return raw, i + 1
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            m = _KEY_RE.fullmatch(line.strip())
            if m is None:
                raise self.fail(line_no, f"front matter: expected 'key: value', got {line.strip()[:60]!r}")
            key = m.group(1).lower()
            if key in raw:
                raise self.fail(line_no, f"front matter: duplicated key {key!r} (first on line {raw[key][0]})")
            raw[key] = (line_no, m.group(2))
        raise self.fail(len(self.lines), "front matter is not closed: no second '---' line")

    def meta(self, raw: dict[str, tuple[int, str]], end_line: int) -> dict[str, Any]:
        if FORMAT_KEY not in raw:
            raise self.fail(1, f"front matter has no '{FORMAT_KEY}: {FORMAT_VERSION}' line; "
                               f"not a Portable Capsule file")
        line, value = raw[FORMAT_KEY]
        version = self.scalar(value, line, FORMAT_KEY)
        if version != FORMAT_VERSION:
            raise self.fail(line, f"unknown format version {version!r}: this soba_notebook reads "
                                  f"{FORMAT_KEY}: {FORMAT_VERSION}")
        for key, (line, _) in raw.items():
            if key not in _HEADER_KEYS:
                raise self.fail(line, f"front matter: unknown key {key!r} (known: {', '.join(_HEADER_KEYS)})")
        out: dict[str, Any] = {}

        def get(key: str, kinds: tuple[type, ...], default: Any) -> Any:
            if key not in raw:
                return default
            line, text = raw[key]
            value = self.scalar(text, line, key)
            if value is None and type(None) not in kinds:
                return default  # `title:` left empty
            if str in kinds and isinstance(value, int) and not isinstance(value, bool):
                value = str(value)  # a person wrote `title: 2025`
            if value is None and type(None) in kinds:
                return None
            if not isinstance(value, kinds) or (int in kinds and isinstance(value, bool) and bool not in kinds):
                names = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
                raise self.fail(line, f"front matter: {key} must be {names}, got {text.strip()[:40]!r}")
            return value

        if "id" not in raw:
            raise self.fail(end_line, "front matter has no 'id' line")
        out["id"] = get("id", (str,), None)
        if not isinstance(out["id"], str) or not ID_PATTERN.fullmatch(out["id"]):
            raise self.fail(raw["id"][0], f"front matter: id {out['id']!r} must be letters, digits, '_', '.' "
                                          f"or '-' (it names files)")
        out["title"] = get("title", (str,), "") or ""
        out["created"] = get("created", (str,), "") or ""
        out["source_session"] = get("source-session", (str, type(None)), None)
        out["source_checkpoint"] = get("source-checkpoint", (str, type(None)), None)
        out["as_of"] = get("as-of", (str, type(None)), None)
        out["trigger"] = get("trigger", (str,), "user")
        out["quality"] = get("quality", (str,), "ok")
        if out["quality"] not in QUALITIES:
            raise self.fail(raw["quality"][0], f"front matter: quality {out['quality']!r} is not one of "
                                               f"{', '.join(QUALITIES)}")
        out["token_count"] = get("tokens", (int,), 0)
        if out["token_count"] < 0:
            raise self.fail(raw["tokens"][0], "front matter: tokens must not be negative")
        out["hash"] = get("hash", (str, type(None)), None)
        if out["hash"] is not None and not _HASH_RE.fullmatch(out["hash"]):
            raise self.fail(raw["hash"][0], "front matter: hash must be 'sha256:' and 64 lowercase hex digits")
        out["edited"] = get("edited", (bool,), False)
        return out

    # -- body --------------------------------------------------------------------------------------
    def sections(self, start: int) -> dict[str, tuple[int, list[tuple[int, str]]]]:
        """{attr: (heading line, [(line, text), ...])}; text before the first section is ignored."""
        found: dict[str, tuple[int, list[tuple[int, str]]]] = {}
        current: list[tuple[int, str]] | None = None
        for i in range(start, len(self.lines)):
            line_no, line = i + 1, self.lines[i]
            if line.startswith("## ") or line.rstrip() == "##":
                title = line[2:].strip().rstrip("#").strip()
                known = SECTION_BY_TITLE.get(title.lower())
                if known is None:
                    raise self.fail(line_no, f"unknown section '## {title}' (known: "
                                             f"{', '.join(t for t, _ in SECTIONS)})")
                attr = known[1]
                if attr in found:
                    raise self.fail(line_no, f"duplicated section '## {known[0]}' (first on line {found[attr][0]})")
                current = []
                found[attr] = (line_no, current)
            elif current is not None:
                current.append((line_no, line))
        return found

    def goal(self, body: list[tuple[int, str]]) -> str:
        content = [(n, line) for n, line in body]
        while content and not content[0][1].strip():
            content.pop(0)
        while content and not content[-1][1].strip():
            content.pop()
        if not content:
            return ""
        if len(content) == 1 and content[0][1].lstrip().startswith('"'):
            return self.json_string(content[0][1].strip(), content[0][0], "Goal")
        return "\n".join(line.rstrip() for _, line in content).strip()

    def items(self, title: str, body: list[tuple[int, str]]) -> list[tuple[int, str]]:
        """The bullet lines of a list section: (line, text after the bullet)."""
        out: list[tuple[int, str]] = []
        for n, line in body:
            text = line.strip()
            if not text or (text.startswith("<!--") and text.endswith("-->")):
                continue  # blank, or a one-line comment for the reader
            if text in ("-", "*", "+"):
                out.append((n, ""))
            elif len(text) > 1 and text[0] in "-*+" and text[1] in " \t":
                out.append((n, text[2:].strip()))
            else:
                raise self.fail(n, f"section '## {title}': expected a '- ' list item, got {text[:60]!r} "
                                   f"(write text with newlines as one JSON string item)")
        return out

    def decision(self, n: int, text: str) -> Decision:
        if text.startswith('"'):
            what, rest = self.json_string_prefix(text, n, "Decisions: what")
            rest = rest.strip()
            if not rest:
                return Decision(what, "")
            if not rest.startswith("—"):
                raise self.fail(n, f"Decisions: expected '{SEP.strip()} why' after the quoted decision, "
                                   f"got {rest[:40]!r}")
            return Decision(what, self.text(rest[1:], n, "Decisions: why"))
        idx = text.find(SEP)
        if idx < 0:
            return Decision(text, "")
        return Decision(text[:idx].strip(), self.text(text[idx + len(SEP):], n, "Decisions: why"))

    def verification(self, n: int, text: str) -> Verification:
        where = "Verification"
        if text.startswith("`"):
            end = text.find("`", 1)
            if end < 0:
                raise self.fail(n, f"{where}: the command's closing backtick is missing")
            command, rest = text[1:end].strip(), text[end + 1:]
        elif text.startswith('"'):
            command, rest = self.json_string_prefix(text, n, f"{where}: command")
        else:
            raise self.fail(n, f"{where}: expected '- `command` — status[ — detail]', the command in "
                               f"backticks or as a JSON string; got {text[:60]!r}")
        rest = rest.strip()
        if not rest.startswith("—"):
            raise self.fail(n, f"{where}: expected '{SEP.strip()} <status>' after the command "
                               f"(status is one of {', '.join(STATUSES)})")
        rest = rest[1:]
        idx = rest.find("—")
        status, detail_raw = (rest.strip(), None) if idx < 0 else (rest[:idx].strip(), rest[idx + 1:])
        status = status.lower()
        if status not in STATUSES:
            raise self.fail(n, f"{where}: status {status!r} is not one of {', '.join(STATUSES)}")
        detail = self.text(detail_raw, n, f"{where}: detail") if detail_raw is not None else ""
        return Verification(command, cast(VerificationStatus, status), detail)  # checked against STATUSES above

    def covers(self, title: str, body: list[tuple[int, str]]) -> EntryRange:
        values: dict[str, Any] = {}
        seen: dict[str, int] = {}
        for n, text in self.items(title, body):
            m = re.fullmatch(r"([A-Za-z ]+?)\s*:\s*(.*)", text)
            key = m.group(1).strip().lower() if m else ""
            if key not in _RANGE_KEYS:
                raise self.fail(n, f"section '## {title}': expected one of "
                                   f"{', '.join(repr(k + ': …') for k in _RANGE_KEYS)}, got {text[:60]!r}")
            if key in seen:
                raise self.fail(n, f"section '## {title}': duplicated {key!r} (first on line {seen[key]})")
            seen[key] = n
            value = self.scalar(m.group(2), n, f"{title}: {key}")  # type: ignore[union-attr]  # m matched: key "" raised above
            if key == "entries":
                if not isinstance(value, int) or isinstance(value, bool):
                    raise self.fail(n, f"section '## {title}': entries must be an integer")
            elif isinstance(value, int) and not isinstance(value, bool):
                value = str(value)  # a person wrote an id that reads as a number
            elif value is not None and not isinstance(value, str):
                raise self.fail(n, f"section '## {title}': {key} must be an entry id or null")
            values[_RANGE_KEYS[key]] = value
        return EntryRange(values.get("first_id"), values.get("last_id"), values.get("count", 0))

    def capsule(self, start: int) -> tuple[Capsule, tuple[str, ...]]:
        """The capsule and the kernel state (not a capsule field) of the body."""
        found = self.sections(start)
        kernel_state: tuple[str, ...] = ()
        if "kernel_state" in found:
            title = KERNEL_STATE_TITLE
            kernel_state = tuple(self.text(t, n, title) for n, t in self.items(title, found.pop("kernel_state")[1]))
        if "goal" not in found:
            raise self.fail(min(start + 1, len(self.lines)), "missing required section '## Goal'")
        kwargs: dict[str, Any] = {}
        for attr, (_, body) in found.items():
            f = _FIELDS[attr]
            if f.kind == "text":
                kwargs[attr] = self.goal(body)
            elif f.kind == "decisions":
                kwargs[attr] = tuple(self.decision(n, t) for n, t in self.items(f.title, body))
            elif f.kind == "verification":
                kwargs[attr] = tuple(self.verification(n, t) for n, t in self.items(f.title, body))
            elif f.kind == "range":
                kwargs[attr] = self.covers(f.title, body)
            else:
                kwargs[attr] = tuple(self.text(t, n, f.title) for n, t in self.items(f.title, body))
        return Capsule(**kwargs), kernel_state
