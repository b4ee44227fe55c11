"""Text a person must read as it is: control characters shown as escapes, never interpreted.

A command the agent asks to run is shown to the person who decides, on a terminal or on an
approval card. A terminal interprets control characters (``ESC[2K`` erases the line, ``CR`` goes
back to its start), and a browser applies bidi overrides (U+202E reverses what follows), so
``touch PWNED # ESC[2K CR git status`` would read ``git status``. :func:`visible_controls` is the
one rule both use: every C0 and C1 control except newline and tab, DEL, the bidi controls and the
invisible format characters become a visible escape (``\\x1b``, ``\\r``, ``\\u202e``); every other
character is left as it is, so the text stays the text (and selectable on a card).
:func:`controls_note` says in one line that a text holds such characters, so an escape typed
literally is never mistaken for one that was made visible.
"""

from __future__ import annotations

__all__ = ["controls_note", "hidden_controls", "visible_controls"]

#: Shown by name where one exists; every other listed character as ``\xNN`` or ``\uNNNN``.
_NAMED = {"\r": "\\r", "\b": "\\b", "\f": "\\f", "\v": "\\v", "\0": "\\0"}
#: Characters a terminal or a browser acts on or hides: C0 (but newline and tab), DEL, C1, the
#: bidi marks, embeddings, overrides and isolates, zero-width characters, line/paragraph separators.
_HIDDEN: frozenset[str] = frozenset(
    [chr(c) for c in range(0x20) if chr(c) not in "\n\t"]
    + [chr(c) for c in range(0x7F, 0xA0)]
    + ["\u061c", "\u200b", "\u200c", "\u200d", "\u200e", "\u200f", "\u2028", "\u2029", "\u2060", "\ufeff"]
    + [chr(c) for c in range(0x202A, 0x202F)] + [chr(c) for c in range(0x2066, 0x206A)])


def _escape(ch: str) -> str:
    code = ord(ch)
    return _NAMED.get(ch) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


_TABLE = {ord(ch): _escape(ch) for ch in _HIDDEN}


def visible_controls(text: str) -> str:
    """``text`` with every control, bidi and invisible format character as a visible escape."""
    return text.translate(_TABLE)


def hidden_controls(text: str) -> list[str]:
    """The distinct such characters in ``text``, as their escapes, in order of first appearance."""
    found: list[str] = []
    for ch in text:
        if ch in _HIDDEN and _TABLE[ord(ch)] not in found:
            found.append(_TABLE[ord(ch)])
    return found


def controls_note(text: str) -> str | None:
    """One line saying ``text`` holds control characters, shown escaped (None when it holds none)."""
    found = hidden_controls(text)
    if not found:
        return None
    return (f"it holds control characters, shown here as escapes and not acted on: {', '.join(found[:8])}"
            + (f" (+{len(found) - 8:,} more kinds)" if len(found) > 8 else ""))
