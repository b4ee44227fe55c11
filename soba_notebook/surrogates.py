"""UTF-16 surrogates in Python text: the one rule that makes any ``str`` writable as UTF-8.

JSON may spell a character outside the Basic Multilingual Plane as two ``\\uXXXX`` escapes (a
high and a low surrogate). Python's ``json`` decodes each escape to its own code point, so a pair
whose halves arrive in two stream chunks, or a half with no partner (a model's broken escape, a
cut-off string), leaves surrogate code points in a ``str`` that ``str.encode("utf-8")`` refuses.
Everything soba writes is UTF-8, so such text would end a turn with a ``UnicodeEncodeError``.

The rule, used by the provider wires (on what they receive) and by the session store (on what it
writes, the last line of defence): adjacent halves are joined into their character, a lone half
becomes U+FFFD. :class:`PairJoiner` does the same for text that arrives in pieces, holding back a
trailing high half until the next piece says whether its low half follows. Pure, no I/O.
"""

from __future__ import annotations

import re

__all__ = ["REPLACEMENT", "PairJoiner", "clean_surrogates", "has_surrogates"]

#: What a lone surrogate becomes.
REPLACEMENT = "\ufffd"

_SURROGATE = re.compile("[\ud800-\udfff]")


def has_surrogates(text: str) -> bool:
    """Whether ``text`` holds any surrogate code point (then it cannot be encoded as UTF-8)."""
    return _SURROGATE.search(text) is not None


def clean_surrogates(text: str) -> str:
    """``text`` with each high + low surrogate pair joined into its character and every lone
    surrogate replaced by U+FFFD; text without surrogates is returned as it is."""
    if not has_surrogates(text):
        return text
    # UTF-16 is where surrogates mean something: a valid pair decodes to its character, a lone
    # half is an invalid code unit, which "replace" turns into U+FFFD.
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


class PairJoiner:
    """Cleans text that arrives in pieces (a stream's deltas) so every piece given out is clean.

    A piece that ends in a high surrogate keeps it back: the next piece may start with its low
    half. :meth:`flush` gives out what is held at the end of the stream (U+FFFD, or ``""``).
    """

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held = ""

    def feed(self, piece: str) -> str:
        """The clean text of ``piece`` (after anything held back), minus a trailing high half."""
        text = self._held + piece
        self._held = ""
        if text and "\ud800" <= text[-1] <= "\udbff":
            self._held, text = text[-1], text[:-1]
        return clean_surrogates(text)

    def flush(self) -> str:
        """The end of the stream: a held-back high half, now known to be lone, as U+FFFD."""
        held, self._held = self._held, ""
        return clean_surrogates(held)
